"""Binary correctness for integer arithmetic (`make-data arith`): 1.0 iff the completion's FIRST number is
the answer, else 0.0.

A user reward file for MaxText's `reward_functions_path` (rljob: grpo.rewards.functions_path), called
as Tunix and MaxText's evaluate() call it: `fn(prompts=..., completions=..., tmvp_config=..., answer=...)`,
where each `answer` entry is a JSON list of acceptable answers (utils_rl.process_data keeps the text after
GSM8K's `####`, so for "47 + 38 = 85\\n#### 85" the list is ["85", "85"]).

Why the first number and not the last: a completion that restates the question ("47 + 38 = 85") or
lists guesses ("84, 85, 86") must not be paid for containing the answer somewhere; the model earns the
reward only by answering first, as the one-shot example in examples/templates/arith-one-shot.json does.
Numbers may carry a sign and thousands separators ("-1,234"); a first number with a non-zero fraction
("85.5") is not an integer and scores 0.0, "85.0" and "85." count as 85.
"""

import json
import re
from decimal import Decimal, InvalidOperation

# Thousands groups only in threes, so "85,86" reads as 85 (a list), "1,234" as 1234.
FIRST_NUMBER = re.compile(r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")


def first_number(completion):
    """The first number in the text as a Decimal, or None when there is none."""
    found = FIRST_NUMBER.search(completion)
    return Decimal(found.group().replace(",", "")) if found else None


def _gold(acceptable):
    try:
        return Decimal(acceptable.replace(",", "").strip())
    except InvalidOperation:
        return None


def arith_correct(prompts, completions, tmvp_config, answer=None, **kwargs):
    """1.0 when the first number in the completion equals an acceptable answer."""
    # MaxText's batches hold numpy arrays (one JSON string per completion), not lists.
    answers = [None] * len(completions) if answer is None else list(answer)
    scores = []
    for completion, acceptable in zip(completions, answers, strict=True):
        golds = {_gold(g) for g in json.loads(acceptable)} - {None} if acceptable else set()
        guess = first_number(completion)
        scores.append(1.0 if guess is not None and guess in golds else 0.0)
    return scores
