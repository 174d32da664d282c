"""The shapes of eval jobs: a suite version's key and row (the store's), an eval job's evaluation as JobPublic shows it,
GET /v1/evals' answers and a comparison.

Only shapes (no job records), so models.py can name EvalSummaryPublic in JobPublic; eval_view.py,
suite_versions.py and eval_compare.py build them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, Field

from trainer.contract.run.eval_report import Comparison, FunctionScores, Score
from trainer.contract.spec.eval_suite import EvalCheckpoint, EvalSampling, GenerationEngine

from .phases import JobPhase
from .usage_models import JobUsage


@dataclass(frozen=True)
class SuiteKey:
    """One content of one suite: what a version number is assigned to."""

    scope: str
    name: str
    content_hash: str


@dataclass(frozen=True)
class SuiteVersion:
    """A row of the suite_versions table."""

    key: SuiteKey
    version: int
    first_seen_at: datetime
    first_job_id: str


class EvalSuitePublic(BaseModel):
    name: str
    scope: str = Field(description="builtin (one version sequence for every team), or the team whose suite it is")
    version: int | None = Field(description="the service's number for this content of the suite; null until the eval has reported")
    content_hash: str | None = Field(description="sha256 (first 16 hex) of the rows, rewards, template and sampling that ran")
    rows: int | None = Field(description="rows the suite held when it ran")
    reward_functions: list[str]
    sampling: EvalSampling


class EvalSummaryPublic(BaseModel):
    """What an eval job evaluates and, once it has reported, its scores per reward function with 95% CIs."""

    checkpoint: EvalCheckpoint
    model_source: str = Field(
        description="the Hugging Face checkpoint evaluated; for maxtext, the training job's model it is converted with"
    )
    suite: EvalSuitePublic
    baseline: str | None = Field(description="the eval it is compared with (GET /v1/evals/{id} shows the comparison)")
    n: int | None = Field(description="rows scored")
    k: int | None = Field(description="sampled completions per row, beside the greedy one")
    primary: str | None = Field(description="the reward function comparisons use unless told otherwise")
    scores: dict[str, FunctionScores] = Field(description="pass@1, sampled, pass@k and maj@k per reward function, with 95% intervals")
    generate_s: float | None = Field(description="seconds spent generating and scoring")
    engine: GenerationEngine = Field(
        description="what generates: transformers on a cpu eval job's host, jax (trainer/evals/jax_model.py) on a TPU's"
    )


class EvalSide(BaseModel):
    eval_id: str
    name: str
    checkpoint: EvalCheckpoint
    model_source: str = Field(description="the Hugging Face checkpoint evaluated (converted, for maxtext)")
    chip_hours: float = Field(description="the eval job's billed chip-hours (0 for cpu jobs, whose hours usage still shows)")
    cost_usd: float | None = Field(description="the eval job's cost at list price; null: no price for its hardware")
    # Evals of either engine compare: greedy text agrees between them, and sampled scores are estimates of the same
    # distribution from different draws; the engine is shown so a reader knows which drew what.
    engine: GenerationEngine = Field(default="transformers", description="what generated: transformers (cpu) or jax (a TPU)")


class CostPerPoint(BaseModel):
    """What a point of this score cost: the training job's cost over the points a gained over b."""

    score: Score
    training_job_id: str
    training_cost_usd: float
    points: float = Field(description="a - b in percentage points")
    ci95_points: tuple[float, float]
    usd_per_point: float | None = Field(description="null when a gained nothing")
    ci95_usd_per_point: tuple[float, float] | None = Field(description="cost over each bound of ci95_points; null unless both are gains")
    verdict: str = Field(description="the sentence to show: $ per point with its interval, or `no gain established` and why")


class EvalComparisonPublic(BaseModel):
    """GET /v1/evals/{id}/compare: eval a against eval b (the baseline), paired by row."""

    a: EvalSide
    b: EvalSide
    suite: EvalSuitePublic = Field(description="the one suite version both ran")
    comparison: Comparison = Field(description="a - b per score, with the paired bootstrap 95% CI and, for 0/1 scores, McNemar's p")
    cost_per_point: list[CostPerPoint] = Field(description="pass@1 and sampled, when a evaluated a training job's trained weights")
    cost_note: str | None = Field(default=None, description="why there is no cost per point, when there is none")


class EvalPublic(BaseModel):
    """GET /v1/evals/{id}: an eval job, its scores and, with a baseline, the comparison once both have finished."""

    id: str
    name: str
    team: str
    phase: JobPhase
    message: str
    created_at: datetime
    finished_at: datetime | None
    eval_job: EvalSummaryPublic = Field(
        description="the eval job's checkpoint, suite (name, version, content hash) and, once reported, its scores per reward "
        "function with 95% intervals (the same as JobPublic.eval_job)"
    )
    usage: JobUsage = Field(description="chip-hours by phase and stage, and the cost at list price, as the job shows them")
    comparison: EvalComparisonPublic | None = Field(default=None, description="against the baseline, once both have SUCCEEDED")
    comparison_note: str | None = Field(default=None, description="why there is no comparison, when a baseline was given")


class EvalsPublic(BaseModel):
    data: list[EvalPublic]
    count: int
    next_cursor: str | None
