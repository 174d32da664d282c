"""One row's completions scored by each reward function, and its majority answer (eval_report.py's scores).

A user suite's functions run in the reward sandbox (suite_rewards.py: a failed call there scores per the suite's
reward_on_error), a built-in suite's in process. Each function is called once per row, on the greedy completion
and the k samples together, as train_rl calls reward functions: fn(prompts=, completions=, question=, answer=,
tmvp_config=), one entry per completion, where `answer` holds the JSON list of acceptable answers. A completion
is correct when its score is above 0. A call that raises, returns something that is not one number per completion,
or a score that is NaN or infinite, gives None for the completions concerned: scored incorrect, and counted in
`unscored`.

maj@k: each sample's answer is read with the suite's extractor (its first or last number, commas dropped and
"85.0" read as 85; no number is an answer too, "none"). The majority answer is the most frequent, ties going
to the one given earliest, and the row's maj@k is 1 when the first sample that gave it is correct under the
function.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from trainer.contract.run.eval_report import FunctionOutcome
from trainer.contract.spec.eval_suite import AnswerExtractor

from .prompts import answers_json, reward_config
from .suite import RewardFn
from .suite_rewards import SuiteRewardFailed

NUMBER = re.compile(r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")


def extract_answer(text: str, extractor: AnswerExtractor) -> str | None:
    """The completion's first or last number, normalised ("1,234.50" -> "1234.5"), or None without one."""
    matches: list[str] = NUMBER.findall(text)
    if not matches:
        return None
    raw = (matches[0] if extractor == "first-number" else matches[-1]).replace(",", "")
    try:
        value = Decimal(raw)
    except InvalidOperation:
        return raw
    text_value = format(value.normalize(), "f")
    return "0" if text_value in ("-0", "0") else text_value


def majority_index(answers: Sequence[str | None]) -> int:
    """The index of the first sample giving the most frequent answer (ties: the answer given earliest)."""
    counts: dict[str | None, int] = {}
    first: dict[str | None, int] = {}
    for i, answer in enumerate(answers):
        counts[answer] = counts.get(answer, 0) + 1
        first.setdefault(answer, i)
    best = max(counts, key=lambda a: (counts[a], -first[a]))
    return first[best]


def call_reward(fn: RewardFn, prompt: str, question: str, answers: Sequence[str], completions: list[str]) -> list[float | None]:
    n = len(completions)
    try:
        scores = fn(
            prompts=[prompt] * n,
            completions=completions,
            question=[question] * n,
            answer=[answers_json(list(answers))] * n,
            tmvp_config=reward_config(),
        )
        values = list(scores)
    except SuiteRewardFailed:  # a user suite's reward_on_error: fail
        raise
    except Exception:  # noqa: BLE001 - a failing call scores its completions None (incorrect, counted)
        return [None] * n
    if len(values) != n:
        return [None] * n
    return [_finite(v) for v in values]


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class RowScores:
    functions: dict[str, FunctionOutcome]
    unscored: int  # completions some function could not score (None)


def score_row(
    functions: dict[str, RewardFn],
    *,
    prompt: str,
    question: str,
    answers: Sequence[str],
    greedy: str,
    samples: list[str],
    extractor: AnswerExtractor,
) -> RowScores:
    majority = majority_index([extract_answer(s, extractor) for s in samples]) if samples else None
    outcomes = {}
    unscored = 0
    for name, fn in functions.items():
        scores = call_reward(fn, prompt, question, answers, [greedy, *samples])
        unscored += sum(s is None for s in scores)
        sample_scores = scores[1:]
        chosen = sample_scores[majority] if majority is not None else None
        outcomes[name] = FunctionOutcome(greedy=scores[0], samples=sample_scores, majority=int(chosen is not None and chosen > 0))
    return RowScores(functions=outcomes, unscored=unscored)
