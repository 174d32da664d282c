"""The built-in `arith` suites' reward: 1.0 iff the completion's FIRST number is the answer, else 0.0.

The logic of examples/rewards/arith_correct.py (the arith training jobs' reward), kept here so the image has
it (examples/ is not in the image); tests/trainer/evals/test_eval_job_suites.py checks both score alike. This file's
bytes are part of the built-in suites' content hash: editing it makes a new suite version.

Why the first number: a completion that restates the question ("47 + 38 = 85") or lists guesses
("84, 85, 86") must not be paid for containing the answer somewhere. Numbers may carry a sign and
thousands separators ("-1,234"); "85.5" is not an integer and scores 0.0, "85.0" and "85." count as 85.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

# Thousands groups only in threes, so "85,86" reads as 85 (a list), "1,234" as 1234.
FIRST_NUMBER = re.compile(r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")


def first_number(completion: str) -> Decimal | None:
    """The first number in the text as a Decimal, or None when there is none."""
    found = FIRST_NUMBER.search(completion)
    return Decimal(found.group().replace(",", "")) if found else None


def _gold(acceptable: str) -> Decimal | None:
    try:
        return Decimal(acceptable.replace(",", "").strip())
    except InvalidOperation:
        return None


def arith_correct(
    prompts: Sequence[str], completions: Sequence[str], tmvp_config: Any, answer: Iterable[str] | None = None, **kwargs: Any
) -> list[float]:
    """1.0 when the first number in the completion equals an acceptable answer (`answer`: JSON lists)."""
    answers: list[str | None] = [None] * len(completions) if answer is None else list(answer)
    scores = []
    for completion, acceptable in zip(completions, answers, strict=True):
        golds = {_gold(g) for g in json.loads(acceptable)} - {None} if acceptable else set()
        guess = first_number(completion)
        scores.append(1.0 if guess is not None and guess in golds else 0.0)
    return scores
