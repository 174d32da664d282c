"""What an eval job writes, and how two evaluations on one suite version are compared.

Files, under the eval job's run directory:
- `eval/outcomes.jsonl`: one `RowOutcome` per suite row, in suite order, the last line written last;
- `eval/report.json`: the `EvalReport` (also sent as an `eval_report` event), written after the outcomes.

Scores, per reward function f (a completion is correct under f when f scores it above 0):
- pass@1: the greedy completion is correct (0/1 per row);
- sampled accuracy: the share of the row's k sampled completions that are correct;
- pass@k: at least one of the k is correct;
- maj@k: the answer most of the k give (the suite's answer extractor; ties: the earliest) is correct.
One model's pass@1, pass@k and maj@k carry a 95% Wilson interval; sampled accuracy a percentile
bootstrap over rows.

A comparison (`compare_outcomes`) pairs two evaluations' rows by id: the difference of each score with
a paired percentile bootstrap 95% interval over rows (fixed seed, BOOTSTRAP_RESAMPLES resamples), and
for the 0/1 scores the exact two-sided McNemar p (the discordant rows split Binomial(n, 1/2) under "no
difference"). Pure Python: the service imports this package without numpy.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trainer.contract.run.evaluation import wilson_interval
from trainer.contract.spec.eval_suite import EvalCheckpoint, GenerationEngine, SuiteIdentity

OUTCOMES_FILE = "outcomes.jsonl"
REPORT_FILE = "report.json"
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20261201
MAX_KEPT_TEXT = 2000  # characters of a question or completion kept per row
Score = Literal["pass@1", "sampled", "pass@k", "maj@k"]
SCORES: tuple[Score, ...] = ("pass@1", "sampled", "pass@k", "maj@k")
BINARY_SCORES: tuple[Score, ...] = ("pass@1", "pass@k", "maj@k")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class FunctionOutcome(_Model):
    """One row under one reward function."""

    greedy: float | None = Field(description="the function's score of the greedy completion (null: it raised or returned NaN)")
    samples: list[float | None] = Field(description="its score of each sampled completion")
    majority: int = Field(ge=0, le=1, description="1 when the majority answer's completion is correct")

    def score(self, name: Score) -> float:
        correct = [s is not None and s > 0 for s in self.samples]
        if name == "pass@1":
            return float(self.greedy is not None and self.greedy > 0)
        if name == "sampled":
            return sum(correct) / len(correct) if correct else 0.0
        if name == "pass@k":
            return float(any(correct))
        return float(self.majority)


class RowOutcome(_Model):
    id: str = Field(max_length=64, description="sha256 of the question (evaluation.row_id): the pairing key")
    index: int = Field(ge=0)
    question: str = Field(max_length=MAX_KEPT_TEXT)
    answers: list[str]
    greedy: str = Field(max_length=MAX_KEPT_TEXT, description="the greedy completion")
    samples: list[str] = Field(description="the sampled completions")
    functions: dict[str, FunctionOutcome]


class Estimate(_Model):
    value: float
    ci95: tuple[float, float]
    method: Literal["wilson", "bootstrap"]


class FunctionScores(_Model):
    pass_at_1: Estimate = Field(alias="pass@1")
    sampled: Estimate
    pass_at_k: Estimate = Field(alias="pass@k")
    maj_at_k: Estimate = Field(alias="maj@k")

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True, serialize_by_alias=True)

    def get(self, name: Score) -> Estimate:
        return {"pass@1": self.pass_at_1, "sampled": self.sampled, "pass@k": self.pass_at_k, "maj@k": self.maj_at_k}[name]


class EvalReport(_Model):
    """An eval job's result: what ran and its scores per reward function."""

    suite: SuiteIdentity
    checkpoint: EvalCheckpoint
    model_source: str = Field(max_length=4096, description="the Hugging Face checkpoint evaluated (converted, for maxtext)")
    n: int = Field(ge=0, description="rows scored")
    k: int = Field(ge=1, description="sampled completions per row")
    functions: dict[str, FunctionScores]
    primary: str = Field(description="the reward function comparisons use unless told otherwise (the suite's first)")
    generate_s: float = Field(ge=0, description="seconds spent generating and scoring")
    outcomes_file: str = Field(max_length=4096)
    # Every report written before the JAX engine existed was transformers'.
    engine: GenerationEngine = Field(
        default="transformers", description="what generated: transformers (torch, a cpu host) or jax (trainer/evals/jax_model.py)"
    )


class ScoreDifference(_Model):
    score: Score
    a: float
    b: float
    difference: float = Field(description="a - b over the paired rows")
    ci95: tuple[float, float] = Field(description="paired percentile bootstrap over rows")
    mcnemar_p: float | None = Field(description="exact two-sided McNemar p for 0/1 scores; null for sampled accuracy")
    a_only: int | None = Field(description="rows only a got right (0/1 scores)")
    b_only: int | None


class Comparison(_Model):
    function: str
    n: int = Field(description="rows both evaluations scored")
    resamples: int
    seed: int
    scores: list[ScoreDifference]

    def get(self, name: Score) -> ScoreDifference:
        return next(s for s in self.scores if s.score == name)


def summarize(outcomes: Sequence[RowOutcome], function: str) -> FunctionScores:
    """One function's four scores over the rows, with their intervals."""
    n = len(outcomes)
    values = {name: [row.functions[function].score(name) for row in outcomes] for name in SCORES}
    out: dict[str, Estimate] = {}
    for name in BINARY_SCORES:
        successes = sum(values[name])
        out[name] = Estimate(value=successes / n if n else 0.0, ci95=wilson_interval(successes, n), method="wilson")
    low, high = bootstrap_interval(values["sampled"]) if n else (0.0, 1.0)
    out["sampled"] = Estimate(value=sum(values["sampled"]) / n if n else 0.0, ci95=(low, high), method="bootstrap")
    return FunctionScores.model_validate(out)


def bootstrap_interval(diffs: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the mean of `diffs` resampled with replacement (linear interpolation
    between order statistics, as numpy's default percentile).

    A resample of n rows is drawn as the counts of each distinct value (a multinomial over the values' shares,
    drawn as one binomial per value given those before): the same distribution of resampled means as drawing n
    row indices, in (distinct values) draws per resample instead of n. Scores take few values (0/1 differences:
    three; sampled accuracy with k samples: at most 2k + 1), so GSM8K's 1319 rows cost what 3 to 9 do."""
    n = len(diffs)
    if n == 0:
        raise ValueError("no rows to resample")
    rng = random.Random(seed)
    counts: dict[float, int] = {}
    for value in diffs:
        counts[value] = counts.get(value, 0) + 1
    values = sorted(counts)
    means = []
    for _ in range(resamples):
        left, rows_left, total = n, n, 0.0
        for value in values[:-1]:
            drawn = rng.binomialvariate(left, counts[value] / rows_left) if left else 0
            total += drawn * value
            left -= drawn
            rows_left -= counts[value]
        total += left * values[-1]
        means.append(total / n)
    means.sort()
    return _percentile(means, 2.5), _percentile(means, 97.5)


def _percentile(ordered: Sequence[float], q: float) -> float:
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def mcnemar_exact(a: Sequence[float], b: Sequence[float]) -> tuple[float, int, int]:
    """Exact two-sided McNemar p on paired 0/1 outcomes, with the rows only a and only b got right."""
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    n = a_only + b_only
    tail = sum(math.comb(n, i) for i in range(min(a_only, b_only) + 1)) / 2**n
    return min(1.0, 2 * tail), a_only, b_only


class NotComparable(ValueError):
    """Two evaluations that must not be compared; the message says why and what to do."""


def compare_outcomes(
    a: Sequence[RowOutcome],
    b: Sequence[RowOutcome],
    function: str,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Comparison:
    """a - b on each score, paired by row id over the rows both hold."""
    by_id = {row.id: row for row in b}
    pairs = [(row, by_id[row.id]) for row in a if row.id in by_id]
    if not pairs:
        raise NotComparable("the two evaluations share no row")
    if any(function not in x.functions or function not in y.functions for x, y in pairs):
        raise NotComparable(f"reward function {function!r} did not score both evaluations")
    scores = []
    for name in SCORES:
        xs = [x.functions[function].score(name) for x, _ in pairs]
        ys = [y.functions[function].score(name) for _, y in pairs]
        diffs = [x - y for x, y in zip(xs, ys, strict=True)]
        low, high = bootstrap_interval(diffs, resamples=resamples, seed=seed)
        p, a_only, b_only = mcnemar_exact(xs, ys) if name in BINARY_SCORES else (None, None, None)
        n = len(pairs)
        scores.append(
            ScoreDifference(
                score=name,
                a=sum(xs) / n,
                b=sum(ys) / n,
                difference=sum(diffs) / n,
                ci95=(low, high),
                mcnemar_p=p,
                a_only=a_only,
                b_only=b_only,
            )
        )
    return Comparison(function=function, n=len(pairs), resamples=resamples, seed=seed, scores=scores)
