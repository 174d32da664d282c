"""GSM8K rewards in GSM8K's own answer format: a last line `#### <number>`.

A user reward file for MaxText's `reward_functions_path` (rljob: grpo.rewards.functions_path): each
function gets the prompts and completions Tunix sampled plus the dataset's columns (MaxText passes the
acceptable answers as a JSON list in `answer`) and returns one float per completion.

Why this exists: SmolLM2-135M-Instruct never writes MaxText's <reasoning>/<answer> tags (0 of 36
sampled completions, also with a one-shot example in the prompt), so MaxText's GSM8K rewards give every
completion 0 and GRPO has nothing to learn from. It does sometimes end with GSM8K's `#### N` line
(about 1 in 8), which gives these rewards variance within a group. See the README's learning benchmark.
"""

import json
import re

ANSWER_LINE = re.compile(r"^####\s*(-?[\d,]*\.?\d+)\s*$", re.MULTILINE)


def _final_answer(completion):
    found = ANSWER_LINE.findall(completion)
    return found[-1].replace(",", "").rstrip(".") if found else None


def _same_number(a, b):
    try:
        return abs(float(a) - float(b)) < 1e-6
    except (TypeError, ValueError):
        return False


def answer_line_format(prompts, completions, tmvp_config, **kwargs):
    """0.5 for ending the reasoning with a `#### N` line, whatever N is."""
    return [0.5 if _final_answer(c) is not None else 0.0 for c in completions]


def answer_line_correct(prompts, completions, tmvp_config, answer=None, **kwargs):
    """1.0 when the `#### N` line holds the right number."""
    scores = []
    # MaxText's batches hold numpy arrays (one JSON string per completion), not lists.
    answers = [None] * len(completions) if answer is None else list(answer)
    for completion, acceptable in zip(completions, answers):
        golds = json.loads(acceptable) if acceptable else []
        guess = _final_answer(completion)
        scores.append(1.0 if guess is not None and any(_same_number(guess, g) for g in golds) else 0.0)
    return scores
