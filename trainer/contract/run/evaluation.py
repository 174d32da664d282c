"""Evaluations a job runs inside train_rl, and what may be concluded from them.

MaxText's train_rl evaluates the policy on the eval split before training, every `eval_interval`
steps and after training when `grpo.num_test_batches > 0`. The trainer keeps each evaluation's
per-row outcomes, exactly as MaxText scored them, as JSON lines at `<run>/eval/<label>.jsonl`
(`before`, `step-<N>`, `after`; one EvalRow per line) and reports an EvalResult event carrying an
EvalSummary. Rows are matched across evaluations by `id` (a hash of the question), so the change
from `before` is a paired comparison over the same prompts.

What a row's outcome is depends on the job's rewards. With MaxText's own GSM8K rewards (no
`grpo.rewards.functions_path`) it is MaxText's score (`correct`: the answer inside its <answer> tags).
A job with its own reward functions is scored by them (`scored_by: rewards`): the outcome is the
fraction of the row's completions whose total reward is above 0 (`rewarded`), the same "rewarded"
as the train steps' counts, so an arithmetic job that pays for the right number is not scored 0 for
lacking MaxText's tags. MaxText's score is still kept per row and summed in `maxtext_correct`.

The statistics here are pure Python (no numpy), shared by the trainer and the service:
- `wilson_interval`: the 95% Wilson score interval of a proportion. It stays inside [0, 1] and is
  sensible at 0 or n successes, unlike the normal (Wald) interval.
- `paired_difference`: after - before over the rows both evaluations share. For 0/1 outcomes,
  Newcombe's method 10 (Newcombe 1998, "Improved confidence intervals for the difference between
  binomial proportions based on paired data", Stat Med 17:2635), built from the two Wilson
  intervals and the phi correlation of the pairs; for fractional outcomes (MaxText's `pass_at_1`
  eval mode scores a row by the fraction of its samples that are correct) a paired t interval.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

EVAL_DIR = "eval"
BEFORE = "before"
AFTER = "after"
Z95 = 1.959963984540054
MAX_EVAL_TEXT_CHARS = 2000  # per prompt and completion kept in a row file
MAX_EVAL_COMPLETIONS = 8  # completions kept per row (MaxText may sample more passes)
# What the trainer prints on stdout after writing a row file; pipeline.py turns it into an EvalResult.
EVAL_LINE_PREFIX = "RLJOB_EVAL "
_STEP_LABEL = re.compile(r"^step-(\d{1,9})$")
EvalScoring = Literal["maxtext", "rewards"]
MAXTEXT_SCORING: EvalScoring = "maxtext"
REWARDS_SCORING: EvalScoring = "rewards"


def step_label(step: int) -> str:
    return f"step-{step}"


def label_step(label: str) -> int | None:
    """The step of a `step-N` label; None for `before` and `after`."""
    match = _STEP_LABEL.match(label)
    return int(match.group(1)) if match else None


def is_eval_label(label: str) -> bool:
    return label in (BEFORE, AFTER) or label_step(label) is not None


def eval_file_name(label: str) -> str:
    if not is_eval_label(label):
        raise ValueError(f"not an evaluation label: {label!r} (before, after or step-N)")
    return f"{label}.jsonl"


def row_id(question: str) -> str:
    """A stable id for an eval row: the same question gets the same id in every evaluation."""
    return hashlib.sha256(" ".join(question.split()).encode()).hexdigest()[:16]


class EvalRow(BaseModel):
    """One eval prompt's outcome, as MaxText's evaluate() scored it."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="hash of the question; the same prompt has the same id in every evaluation")
    index: int = Field(ge=0, description="position in this evaluation's order")
    question: str = Field(description=f"the question (its last {MAX_EVAL_TEXT_CHARS} characters if long)")
    answers: list[str] = Field(description="the acceptable answers MaxText compared with")
    completions: list[str] = Field(description=f"the sampled completions (at most {MAX_EVAL_COMPLETIONS})")
    correct: float = Field(ge=0, le=1, description="1/0, or the fraction of samples correct in pass_at_1 mode")
    partial: float = Field(ge=0, le=1, description="MaxText's partial correctness (answer within 10%)")
    format: float = Field(ge=0, le=1, description="MaxText's format match (reasoning and answer tags)")
    rewards: dict[str, list[float | None]] = Field(
        default_factory=dict, description="each reward function's score per completion (null for NaN)"
    )
    rewarded: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="the fraction of completions whose total reward (the sum of the reward "
        "functions' scores) is above 0; null when no reward function ran",
    )

    def outcome(self, scoring: EvalScoring) -> float:
        """The row's outcome under `scoring` (a row no reward scored counts as not rewarded)."""
        return self.correct if scoring == MAXTEXT_SCORING else (self.rewarded or 0.0)


def rewarded_fraction(rewards: dict[str, list[float | None]]) -> float | None:
    """The fraction of the scored completions (the longest list) whose scores, summed over every function, are
    above 0; a completion that a function left unscored (NaN, or fewer scores) is not rewarded. None when nothing
    was scored."""
    completions = max((len(values) for values in rewards.values()), default=0)
    if completions == 0:
        return None
    rewarded = 0
    for i in range(completions):
        scores = [values[i] if i < len(values) else None for values in rewards.values()]
        if all(s is not None for s in scores) and sum(s for s in scores if s is not None) > 0:
            rewarded += 1
    return rewarded / completions


class PairedDifference(BaseModel):
    """after - before over the rows two evaluations share, with its 95% interval."""

    model_config = ConfigDict(extra="forbid")

    difference: float
    ci95: tuple[float, float]
    n: int = Field(ge=0, description="rows present in both evaluations")
    improved: int = Field(ge=0, description="rows wrong before and right after (for 0/1 outcomes)")
    regressed: int = Field(ge=0, description="rows right before and wrong after")
    method: Literal["newcombe-paired-wilson", "paired-t"]


class EvalSummary(BaseModel):
    """One evaluation, as the trainer reports it in an EvalResult event."""

    model_config = ConfigDict(extra="forbid")

    label: str
    step: int = Field(ge=0, description="the policy's train step when it ran (0: the base model)")
    n: int = Field(ge=0, description="rows evaluated")
    correct: float = Field(ge=0, description="sum of the rows' outcomes (see scored_by)")
    scored_by: EvalScoring = Field(
        default=MAXTEXT_SCORING,
        description="maxtext: a row's outcome is MaxText's score (its answer tags) | rewards: "
        "the fraction of its completions the job's own reward functions rewarded (total reward above 0)",
    )
    maxtext_correct: float | None = Field(
        default=None, ge=0, description="with scored_by rewards: the sum of MaxText's own scores, for reference"
    )
    format_correct: float = Field(ge=0)
    partial_correct: float = Field(ge=0)
    mean_reward: float | None = Field(default=None, description="mean total reward per completion, if rewards ran")
    samples_per_row: int = Field(ge=0, description="completions MaxText sampled per row")
    sampling: str = Field(description="MaxText's eval_sampling_strategy and eval_mode")
    rows_file: str = Field(description="the row file's name under <run>/eval/")
    vs_before: PairedDifference | None = Field(default=None, description="paired change from the `before` evaluation")


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of successes/n; (0, 1) when n is 0 (nothing is known)."""
    if n <= 0:
        return 0.0, 1.0
    p = min(max(successes / n, 0.0), 1.0)
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_difference(before: dict[str, float], after: dict[str, float]) -> PairedDifference | None:
    """after - before over the ids both hold; None when they share no row."""
    ids = sorted(before.keys() & after.keys())
    if not ids:
        return None
    b = [before[i] for i in ids]
    a = [after[i] for i in ids]
    improved = sum(1 for x, y in zip(b, a, strict=True) if y > x)
    regressed = sum(1 for x, y in zip(b, a, strict=True) if y < x)
    if all(v in (0.0, 1.0) for v in (*a, *b)):
        low, high = _newcombe_paired(b, a)
        method: Literal["newcombe-paired-wilson", "paired-t"] = "newcombe-paired-wilson"
    else:
        low, high = _paired_t(b, a)
        method = "paired-t"
    diff = (sum(a) - sum(b)) / len(ids)
    return PairedDifference(difference=diff, ci95=(low, high), n=len(ids), improved=improved, regressed=regressed, method=method)


def _newcombe_paired(before: Sequence[float], after: Sequence[float]) -> tuple[float, float]:
    n = len(before)
    both = sum(1 for x, y in zip(before, after, strict=True) if x and y)
    only_after = sum(1 for x, y in zip(before, after, strict=True) if y and not x)
    only_before = sum(1 for x, y in zip(before, after, strict=True) if x and not y)
    neither = n - both - only_after - only_before
    p1, p2 = (both + only_after) / n, (both + only_before) / n
    l1, u1 = wilson_interval(both + only_after, n)
    l2, u2 = wilson_interval(both + only_before, n)
    margins = (both + only_after) * (only_before + neither) * (both + only_before) * (only_after + neither)
    phi = (both * neither - only_after * only_before) / math.sqrt(margins) if margins else 0.0
    d = p1 - p2
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    epsilon = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, d - delta), min(1.0, d + epsilon)


def _paired_t(before: Sequence[float], after: Sequence[float]) -> tuple[float, float]:
    diffs = [y - x for x, y in zip(before, after, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n
    if n < 2:
        return -1.0, 1.0
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = _t975(n - 1) * sd / math.sqrt(n)
    return max(-1.0, mean - half), min(1.0, mean + half)


_T975_SMALL_DF = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706}


def _t975(df: int) -> float:
    """The 97.5% quantile of Student's t: a table to df 5, then the Cornish-Fisher expansion (within 3e-3)."""
    if df in _T975_SMALL_DF:
        return _T975_SMALL_DF[df]
    z = Z95
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3
