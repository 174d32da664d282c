"""What a job's trainer has reported about its run, as one typed document: the fold of its events
(service/domain/progress.py) writes it, the views, goodput, evaluation, usage and the dashboard read it.

`JobRecord.report` holds it beside the control plane's own state (phase, backend, resumes, queue). Every part is
the model the API shows or the trainer sent, so nothing is validated again on the way out; the store turns its
columns into these models where it reads a row (service/adapters/store/record_rows.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, Field

from trainer.contract import RunStorage, Stage
from trainer.contract.run.eval_report import EvalReport
from trainer.contract.run.evaluation import EvalSummary
from trainer.contract.run.goodput import TrainGoodput

from .attached_eval_models import AttachedEvalPublic
from .train_step_summary import TrainStepSummary
from .trainer_event_budget import TrainerEventCounts


class StageTimes(BaseModel):
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_s: float | None = None
    skipped: bool = False


# Fields no source has given yet stay unset (not only None): the event log lists an artifact with what
# was known, `model_dump(exclude_unset=True)`. (A comment, not a docstring: that would enter the OpenAPI schema.)
class Artifact(BaseModel):
    name: str
    uri: str = Field(description="gs:// URI or absolute local path; a directory for checkpoints and exports")
    size_bytes: int | None = Field(default=None, description="total bytes (all files of a directory)")
    file_count: int | None = Field(default=None, description="files under a directory artifact, from the manifest")
    checksum: str | None = Field(default=None, description="md5:<hex> or crc32c:<hex>, for single-file artifacts")


class HangReport(BaseModel):
    """One hung attempt, as the trainer's watchdog reported it (its `hung` event, trainer/hang_watchdog.py)."""

    attempt: int = Field(description="the run attempt that hung")
    time: datetime = Field(description="when the trainer gave up on it")
    stage: str | None = Field(description="the stage it hung in")
    step: int | None = Field(description="the last train step the attempt reported; null before its first")
    idle_s: float = Field(description="seconds without a progress event")
    limit_s: float = Field(description="the job's hang limit then (spec.hang_timeout_s, or derived from its step times)")
    stacks: str = Field(description="the log holding the stacks of every thread of the trainer and its stage process")


class RunOutcome(BaseModel):
    """The trainer's own account of how the run ended (its RunFinished event): a failure's message
    quotes it, the failed stage names where."""

    ok: bool
    exit_code: int | None = None
    message: str = ""
    failed_stage: str | None = None


@dataclass
class RunReport:
    attempt: int = 0  # the trainer's RunStarted.attempt
    last_trainer_seq: int = -1  # highest events.jsonl seq applied; lower ones are duplicates
    stage: Stage | None = None
    step: int | None = None
    total_steps: int | None = None
    latest_metrics: dict[str, float] = field(default_factory=dict)
    # The run's first FIRST_STEPS_KEPT train steps and its last HEALTH_WINDOW_STEPS, oldest first
    # (train_step_summary.push_step): what the learning-health verdict is computed from.
    recent_train_steps: list[TrainStepSummary] = field(default_factory=list)
    stage_times: dict[Stage, StageTimes] = field(default_factory=dict)
    artifacts: dict[str, Artifact] = field(default_factory=dict)  # by name
    outcome: RunOutcome | None = None  # the trainer's last RunFinished event, if any
    eval_points: list[EvalSummary] = field(default_factory=list)  # one per label, oldest first (job_eval.push_eval)
    storage: RunStorage | None = None  # the trainer's newest run-directory measurement
    # The newest train_rl time split of each attempt, by attempt number (goodput.py: attempts add up).
    goodput: dict[int, TrainGoodput] = field(default_factory=dict)
    # Each attempt's first report after a step: set against its newest, it says what a steady step costs and so
    # what the first step cost beyond one (goodput.py's warmup).
    first_goodput: dict[int, TrainGoodput] = field(default_factory=dict)
    trainer_events: TrainerEventCounts = field(default_factory=TrainerEventCounts)  # trainer_event_budget.py
    eval_report: EvalReport | None = None  # an eval job's result (its eval_report event)
    # The service's version number of eval_report's suite content (suite_versions.py), assigned when it was folded;
    # None: not an eval job's report yet, or one about another suite than its spec's.
    suite_version: int | None = None
    # Actor checkpoints train_rl saved, step -> model_params URI (checkpoint events), newest MAX_CHECKPOINTS_KEPT;
    # evaluations attached to the job (JobSpec.eval) are made from them.
    checkpoints: dict[int, str] = field(default_factory=dict)
    # The eval jobs the service made for this job's checkpoints (JobSpec.eval) as its view shows them, kept by the
    # leader's reconcile (attached_eval_reconciler.py), so showing the job reads nothing else.
    attached_evals: list[AttachedEvalPublic] = field(default_factory=list)
    # Hung attempts the trainer reported, newest MAX_HANGS_KEPT; and how many times the service restarted the job after
    # one (observation_policy.Decision.HUNG_RESTART), bounded by RLJOB_MAX_HUNG_RESTARTS.
    hangs: list[HangReport] = field(default_factory=list)
    hung_restarts: int = 0


MAX_CHECKPOINTS_KEPT = 1000
MAX_HANGS_KEPT = 20
