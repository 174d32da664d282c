"""The built-in `gsm8k` suite's reward: lm-evaluation-harness's gsm8k "flexible-extract" exact match.

lm-eval (tasks/gsm8k/gsm8k.yaml): the prediction is the LAST match of `(-?[$0-9.,]{2,})|(-?[0-9]+)` in the
completion; prediction and gold (the text after `#### `) then drop ',' and '$' and a trailing '.', and must
be equal strings. So "... she pays $1,080." is 1080 and correct for "#### 1080"; "18.00" is not "18" (as in
lm-eval). This file's bytes are part of the suite's content hash: editing it makes a new suite version.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

FLEXIBLE_EXTRACT = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
# lm-eval's exact_match regexes_to_ignore for gsm8k, in its order ("(?s).*#### " is already applied to the gold).
IGNORED = (re.compile(","), re.compile(r"\$"), re.compile(r"(?s).*#### "), re.compile(r"\.$"))


def final_number(completion: str) -> str | None:
    """The last number-like span lm-eval's flexible extract takes, or None when there is none."""
    matches: list[tuple[str, str]] = FLEXIBLE_EXTRACT.findall(completion)
    if not matches:
        return None
    last = matches[-1]
    return last[0] or last[1]


def normalise(text: str) -> str:
    for pattern in IGNORED:
        text = pattern.sub("", text)
    return text.strip()


def gsm8k_final_number(
    prompts: Sequence[str], completions: Sequence[str], tmvp_config: Any, answer: Iterable[str] | None = None, **kwargs: Any
) -> list[float]:
    """1.0 when the completion's final number equals an acceptable answer (`answer`: JSON lists), else 0.0."""
    answers: list[str | None] = [None] * len(completions) if answer is None else list(answer)
    scores = []
    for completion, acceptable in zip(completions, answers, strict=True):
        golds = {normalise(str(g)) for g in json.loads(acceptable) if g is not None} if acceptable else set()
        predicted = final_number(completion)
        scores.append(1.0 if predicted is not None and normalise(predicted) in golds else 0.0)
    return scores
