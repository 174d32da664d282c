"""The job record (what the store keeps) and the API schema family built from it.

`JobRecord` is a plain dataclass the job service mutates inside one store transaction. Its spec is
the parsed JobSpec (validated where it crossed a boundary: the API's body, the store's row), and what
it keeps of the trainer's events (stage, recent train steps, stage times, artifacts, the run's
outcome, evaluations, run size, goodput) and the submit-time fit estimate are typed: the store turns its JSON
columns into these models where it reads a row, so nothing re-validates them on the way out. `JobCreate` /
`JobPublic` / `JobsPublic` are what the REST API accepts and returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, ValidationInfo, model_validator

from trainer.contract import HardwareSpec, JobSpec, RunLayout, RunStorage, Stage, StepSamples
from trainer.contract.run.goodput import JobGoodput
from trainer.sizing.fit import FitEstimate

from .attached_eval_models import AttachedEvalPublic
from .budget_models import JobHold
from .checkpoint_expiry_models import CheckpointExpiry
from .errors import InvalidRequest
from .estimate_models import EstimateActuals, JobEstimate
from .eval_models import EvalSummaryPublic
from .health_models import LearningHealth
from .job_eval_models import JobEval
from .phases import JobPhase
from .reward_calls import RewardCalls
from .run_report import Artifact, HangReport, RunReport, StageTimes
from .trainer_event_budget import TrainerEventCounts
from .usage_models import JobUsage


@dataclass(frozen=True)
class ManifestRefused:
    """What RunFiles.read_manifest answers for a manifest it would not parse, and why (a sentence)."""

    reason: str


@dataclass(frozen=True)
class Caller:
    """Who is asking: resolved from the bearer token."""

    team: str
    token_id: str
    admin: bool = False
    name: str = ""  # the token's name (who or what it was issued to), recorded as a job's submitter

    @property
    def submitter(self) -> str:
        """Who submitted, for the job record: the token's name, else its id (never empty)."""
        return self.name or self.token_id

    def can_see(self, team: str) -> bool:
        return self.admin or self.team == team


class QueueStatus(BaseModel):
    """Where a QUEUED job waits for capacity: the backend's queue (a Kueue LocalQueue, the local
    launcher's team queue), why it is not admitted, and its place in line when the backend says."""

    name: str = Field(description="the queue: a Kueue LocalQueue, or `team/<team>` on the local launcher")
    position: int | None = Field(default=None, description="1 = next to be admitted; null when the backend does not say")
    reason: str = Field(description="machine-readable, e.g. InsufficientQuota, TeamJobLimit, Preempted")
    message: str = Field(default="", description="the backend's own words")


class Placement(BaseModel):
    """The kind of capacity a job was admitted into (the latest admission), and its billed time on each kind
    (placement.py keeps it)."""

    capacity: str = Field(description="the kind of capacity it was admitted into: on-demand, spot, flex-start or reservation")
    flavor: str | None = Field(default=None, description="the Kueue ResourceFlavor that admitted it; null without Kueue")
    billed_s: dict[str, float] = Field(
        default_factory=dict, description="seconds of closed billed phases (RUNNING, CANCELLING) by kind of capacity"
    )
    stranded: list[str] = Field(
        default_factory=list,
        description="kinds of capacity the job was stranded on (admitted, its pod taken by no node) and left: its "
        "relaunches ask for the rest of its hardware.capacity",
    )

    def says(self) -> str:
        return f"admitted to {self.flavor} ({self.capacity})" if self.flavor else f"on {self.capacity} capacity"


@dataclass
class JobRecord:
    id: str
    team: str
    name: str
    spec: JobSpec
    spec_hash: str
    phase: JobPhase
    created_at: datetime
    updated_at: datetime
    labels: dict[str, str] = field(default_factory=dict)
    submitted_by: str | None = None  # the submitting token's name (None for jobs stored before 0002)
    idempotency_key: str | None = None
    message: str = ""
    failure_reason: str | None = None  # machine-readable: exit code name, OOMKilled, ResumeLimit, ...
    exit_code: int | None = None
    health_verdict: str | None = None  # the verdict last announced in the event log (a `health` entry)
    backend: str | None = None
    object_name: str | None = None
    resumes: int = 0  # relaunches after the workload was lost (bounded by settings.max_resumes)
    last_event_seq: int = 0  # highest job_events.seq for this job (the snapshot's SSE id)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    queue: QueueStatus | None = None  # set while QUEUED behind a backend's queue, cleared on leaving QUEUED
    # Seconds spent in each phase left so far (by JobPhase value), and when the current phase began:
    # usage (chip-hours by phase) is computed from these, the current phase's share up to `now`.
    phase_seconds: dict[str, float] = field(default_factory=dict)
    phase_entered_at: datetime | None = None
    fit_estimate: FitEstimate | None = None  # the submit-time memory estimate (trainer.sizing.fit)
    report: RunReport = field(default_factory=RunReport)  # what the trainer reported (run_report.py)
    placement: Placement | None = None  # the kind of capacity (and flavor) it was last admitted into (placement.py)
    estimate: JobEstimate | None = None  # the submit-time estimate (estimate_models.py); None for jobs stored before 0013
    hold: JobHold | None = None  # why the service holds the job (budget_models.py); None: it does not
    checkpoint_expiry: CheckpointExpiry | None = None  # the retention pass's record (checkpoint_expiry_models.py)

    @property
    def handed_over(self) -> bool:
        """A launcher holds a workload for it (possibly still in the backend's queue): QUEUED then
        means waiting in that queue, and a cancel has something to stop."""
        return self.backend is not None

    @property
    def layout(self) -> RunLayout:
        """Where the job's run directory and its files are (its spec's output, its id)."""
        return RunLayout(self.spec.output, self.id)

    @property
    def hardware(self) -> HardwareSpec:
        """What the job runs on, as the launchers read it: the spec's hardware, with JobSpec's defaults."""
        return self.spec.hardware


def _team_is_read_only(schema: dict[str, Any]) -> None:
    # The service sets it from the token (a different one is refused): a client should not send it.
    schema["properties"]["team"]["readOnly"] = True


# Set on the one strict validation JobCreate runs, so its wrap validator lets the inner pass through.
_STRICT_PASS = "rljob_strict_pass"


class JobCreate(JobSpec):
    """The body of POST /v1/jobs: a job spec. `team` comes from the caller's token."""

    model_config = ConfigDict(json_schema_extra=_team_is_read_only)

    @model_validator(mode="wrap")
    @classmethod
    def _types_as_declared(cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo) -> Self:
        """The body's types as the schema states them: JSON `0` is not `false`, nor `"20"` 20. FastAPI
        validates a body in pydantic's lax mode, which converts such values, and a model's `strict`
        config would not reach the nested specs: so the one validation is a strict one, of the whole
        tree. An integral number such as `20.0` stays an integer, as JSON Schema counts it."""
        if isinstance(info.context, dict) and info.context.get(_STRICT_PASS):
            return handler(data)
        return cls.model_validate(_integral_floats_as_ints(data), strict=True, context={_STRICT_PASS: True})


def _integral_floats_as_ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _integral_floats_as_ints(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integral_floats_as_ints(item) for item in value]
    return value


class LatestMetrics(BaseModel):
    reward_mean: float | None = None
    reward_std: float | None = None
    kl: float | None = None
    loss: float | None = None
    eval_accuracy: float | None = None


class Failure(BaseModel):
    reason: str | None = Field(description="machine-readable cause, e.g. EXIT_70, ResumeLimit")
    message: str = Field(description="what happened and what to do next")
    exit_code: int | None = None
    failed_stage: str | None = None


class JobPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    team: str
    submitted_by: str | None = Field(description="name of the API token that submitted the job")
    labels: dict[str, str]
    phase: JobPhase
    message: str
    stage: Stage | None
    step: int | None
    total_steps: int | None
    progress: float | None = Field(description="step / total_steps in the train stage")
    eta_s: float | None = Field(description="seconds until training ends at the current rate")
    metrics: LatestMetrics
    reward_calls: RewardCalls | None = Field(
        default=None, description="the job's own reward functions' calls in the sandbox: counts, latency, network isolation"
    )
    health: LearningHealth | None = Field(description="whether training is learning; null before the first train step")
    train_evals: JobEval = Field(
        description="the evaluations train_rl ran on the eval rows while training (before, every eval_interval, after), with "
        "95% intervals, or why there are none"
    )
    stage_times: dict[Stage, StageTimes]
    artifacts: list[Artifact]
    failure: Failure | None
    backend: str | None
    object_name: str | None
    attempt: int
    run_uri: str
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    queue: QueueStatus | None = Field(description="while QUEUED behind a backend's queue: which, why, and the place in line")
    hold: JobHold | None = Field(
        default=None,
        description="why the service holds the job (its team's monthly budget is spent): stopped with a checkpoint and QUEUED "
        "with queue reason BudgetExhausted, it resumes when the budget has room; null: not held",
    )
    placement: Placement | None = Field(
        default=None,
        description="the kind of capacity (and Kueue flavor) the job was last admitted into; null before its first admission",
    )
    usage: JobUsage = Field(description="chip-hours by phase and stage, and what the billed time cost at list price")
    storage: RunStorage | None = Field(
        default=None,
        description="bytes the run directory holds, total and by part (checkpoints, converted, export, "
        "logs, samples, data, other), as the trainer measured it at its newest stage end; null before the first",
    )
    goodput: JobGoodput | None = Field(
        default=None,
        description="where the job's wall-clock time went: queued, start-up, convert, rollout, "
        "log-probs, update, weight sync, checkpoint, eval, export and other, adding up to wall_s; live while "
        "it runs; null before it has spent any time",
    )
    trainer_events: TrainerEventCounts = Field(
        default_factory=TrainerEventCounts,
        description="what the job's trainer events made the service store, "
        "and how many a per-job bound refused (the job's message says when the first was)",
    )
    fit_estimate: FitEstimate | None = Field(
        description="memory per chip estimated at submit, with the verdict against the accelerator's (a `tight` "
        "one is a warning); null when the model's shape was unknown at submit, or for jobs from before the check"
    )
    estimate: JobEstimate | None = Field(
        default=None,
        description="what the job was expected to take, estimated at its submit (wait, run, wall, chip-hours, cost, storage, "
        "each with its range, and what it was learnt from); null for jobs submitted before estimates",
    )
    estimate_actuals: EstimateActuals | None = Field(
        default=None,
        description="once the job has ended: what it took beside the estimate, and whether each figure fell inside its range",
    )
    eval_job: EvalSummaryPublic | None = Field(
        default=None,
        description="for an eval job (POST /v1/evals): its checkpoint, suite (name, version, content hash) and, once "
        "reported, its scores per reward function with 95% intervals; null for a training job",
    )
    checkpoint_expiry: CheckpointExpiry | None = Field(
        default=None,
        description="once the job's intermediate checkpoints expired (checkpoint retention, docs/service.md): which were "
        "planned and deleted, with their bytes, which were kept and why, or why nothing was deleted; null before",
    )
    attached_evals: list[AttachedEvalPublic] = Field(
        default_factory=list,
        description="the eval jobs made for this job's checkpoints (spec.eval): base, step-N, export, each with its phase, "
        "primary scores with 95% intervals and, once it and the base eval SUCCEEDED, the paired difference from the base",
    )
    hangs: list[HangReport] = Field(
        default_factory=list,
        description="attempts the trainer's watchdog found hung (no progress event for longer than the hang limit), newest "
        "last: where each hung and the log holding its stacks; each was restarted from the last checkpoint up to "
        "RLJOB_MAX_HUNG_RESTARTS times",
    )
    hung_restarts: int = Field(default=0, description="restarts after a hang so far")
    spec: JobSpec = Field(
        description="the job's spec as the service validated and stored it, defaults filled in (the same schema a submit "
        "takes). Clients read it leniently: a field a newer service adds is ignored, not an error (service/cli/client.py)"
    )


class SamplesPublic(BaseModel):
    """GET /v1/jobs/{id}/samples: one train step's completions with what each reward function paid."""

    job_id: str
    step: int = Field(description="the step shown (the requested one, else the newest with samples)")
    steps_available: list[int] = Field(description="steps that have samples, ascending (the newest few thousand)")
    samples: StepSamples


class JobsPublic(BaseModel):
    data: list[JobPublic]
    count: int = Field(description="jobs in this page")
    next_cursor: str | None = Field(description="pass as ?cursor= for the next (older) page; null at the end")


class JobEvent(BaseModel):
    """One entry of a job's event log; SSE sends these with `id: seq`."""

    seq: int
    job_id: str
    team: str
    kind: str  # phase, attempt, stage, progress, eval, artifact(s), storage, goodput, message, run_finished, health
    time: datetime
    data: dict[str, Any]


class MetricPoint(BaseModel):
    kind: str  # train | eval
    step: int
    time: datetime
    values: dict[str, float]


class MetricsPublic(BaseModel):
    job_id: str
    points: list[MetricPoint]


# Control characters (NUL above all: PostgreSQL cannot hold one in text) match no stored name, team or
# label, so a filter holding one is refused as bad input rather than sent to the database.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class JobFilters:
    """A list query's filters; InvalidRequest (422, `query`, the parameter) for text no job can have."""

    phase: JobPhase | None = None
    team: str | None = None
    name: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        texts = [("team", self.team), ("name", self.name)] + [("label", f"{k}={v}") for k, v in self.labels]
        for parameter, text in texts:
            if text is not None and (found := _CONTROL.search(text)):
                raise InvalidRequest(
                    ("query", parameter), f"{parameter} holds a control character ({found.group()!r}); names, teams and labels never do"
                )


@dataclass(frozen=True)
class TokenRecord:
    id: str
    team: str
    name: str
    admin: bool
    created_at: datetime
    revoked_at: datetime | None = None
