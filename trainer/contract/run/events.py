"""Progress events: the one channel from a running trainer to whoever watches it.

The trainer writes each event as one JSON line to stdout and appends it to `events.jsonl` in the
run directory. `seq` increases by one per event within a run directory (also across restarts of
the trainer, which continues the numbering from the file), so a consumer can drop duplicates and
resume from the last `seq` it saw.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from trainer.contract.run.eval_report import EvalReport
from trainer.contract.run.evaluation import EvalSummary
from trainer.contract.run.goodput import TrainGoodput
from trainer.contract.run.storage import RunStorage

EVENTS_FILE = "events.jsonl"
EVENT_SCHEMA_VERSION = 1


class Stage(enum.StrEnum):
    CONVERT = "convert"
    TRAIN = "train"
    EXPORT = "export"
    EVALUATE = "evaluate"  # eval jobs only (eval_suite.py)


STAGE_ORDER: tuple[Stage, ...] = (Stage.CONVERT, Stage.TRAIN, Stage.EXPORT)
# An eval job: export converts a MaxText checkpoint to Hugging Face (skipped for a Hugging Face one), then evaluate.
EVAL_STAGE_ORDER: tuple[Stage, ...] = (Stage.EXPORT, Stage.EVALUATE)
# The bounds of what the service stores for an event's counts (a PostgreSQL integer for steps, attempts and exit codes,
# a bigint for seq and sizes): a line outside them is one unreadable event, skipped alone, not a batch the store
# cannot write (one step of 2**40 in events.jsonl held back every later event of the job).
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    v: int = EVENT_SCHEMA_VERSION
    seq: int = Field(ge=0, le=INT64_MAX)
    time: datetime
    job_id: str


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    attempt: int = Field(ge=1, le=INT32_MAX, description="1 on the first start in this run directory, then 2, 3, ...")
    run_uri: str


class StageStarted(_Event):
    type: Literal["stage_started"] = "stage_started"
    stage: Stage


class StageFinished(_Event):
    type: Literal["stage_finished"] = "stage_finished"
    stage: Stage
    duration_s: float = Field(ge=0)
    skipped: bool = Field(default=False, description="already complete from an earlier attempt or the cache")
    reason: str | None = None


class TrainStep(_Event):
    type: Literal["train_step"] = "train_step"
    step: int = Field(ge=0, le=INT32_MAX)
    total_steps: int = Field(ge=1, le=INT32_MAX)
    reward_mean: float | None = None
    reward_std: float | None = None
    kl: float | None = None
    loss: float | None = None
    # Values are finite (the reporter drops NaN/inf); None is accepted because JSON has no NaN and
    # older trainers wrote it as null: a reader must not lose the whole line over one value.
    metrics: dict[str, float | None] = Field(default_factory=dict, description="every scalar Tunix logged at this step")
    nonfinite: list[str] = Field(default_factory=list, description="names of the values above that were NaN or infinite (and so left out)")


class EvalResult(_Event):
    type: Literal["eval"] = "eval"
    step: int = Field(ge=0, le=INT32_MAX)
    accuracy: float | None = None
    metrics: dict[str, float | None] = Field(default_factory=dict)  # as TrainStep.metrics
    summary: EvalSummary | None = Field(
        default=None,
        description="the evaluation's counts and paired change from `before` (from its row file); "
        "None when only MaxText's log line was seen",
    )


class EvalReported(_Event):
    """An eval job's result (eval_report.py), sent once its outcomes and report files are written."""

    type: Literal["eval_report"] = "eval_report"
    report: EvalReport


class CheckpointSaved(_Event):
    """train_rl finished saving an actor checkpoint (for evaluations attached to the job: eval_suite.AttachedEval)."""

    type: Literal["checkpoint"] = "checkpoint"
    step: int = Field(ge=0, le=INT32_MAX)
    params: str = Field(max_length=4096, description="the checkpoint's model_params directory")


class ArtifactWritten(_Event):
    type: Literal["artifact"] = "artifact"
    # Bounded: each is kept on the job record, which every list page carries (MAX_ARTIFACTS of them per job).
    name: str = Field(max_length=256)
    uri: str = Field(max_length=4096)
    size_bytes: int | None = Field(default=None, ge=0, le=INT64_MAX)


class StorageMeasured(_Event):
    type: Literal["storage"] = "storage"
    stage: Stage | None = Field(description="the stage at whose end the run directory was measured")
    storage: RunStorage


class GoodputMeasured(_Event):
    type: Literal["goodput"] = "goodput"
    attempt: int = Field(ge=1, le=INT32_MAX, description="the run attempt whose train_rl process measured it (RunStarted.attempt)")
    train: TrainGoodput


class HangDetected(_Event):
    """The trainer's watchdog (trainer/hang_watchdog.py) saw no progress event for longer than the hang limit: it wrote
    every thread's stacks to `stacks` and exits with ExitCode.HUNG after this event and RunFinished."""

    type: Literal["hung"] = "hung"
    attempt: int = Field(ge=1, le=INT32_MAX, description="the run attempt that hung (RunStarted.attempt)")
    stage: Stage | None = Field(description="the stage running when it hung; null before the first")
    step: int | None = Field(default=None, ge=0, le=INT32_MAX, description="the last train step this attempt reported")
    idle_s: float = Field(ge=0, description="seconds since the last progress event")
    limit_s: float = Field(ge=0, description="the hang limit it exceeded")
    stacks: str = Field(max_length=4096, description="the log the stacks of every thread were written to")


class RunFinished(_Event):
    type: Literal["run_finished"] = "run_finished"
    ok: bool
    exit_code: int = Field(ge=-INT32_MAX - 1, le=INT32_MAX)
    message: str = ""
    failed_stage: Stage | None = None


TrainerEvent = Annotated[
    RunStarted
    | StageStarted
    | StageFinished
    | TrainStep
    | EvalResult
    | EvalReported
    | CheckpointSaved
    | ArtifactWritten
    | StorageMeasured
    | GoodputMeasured
    | HangDetected
    | RunFinished,
    Field(discriminator="type"),
]

_EVENT_ADAPTER: TypeAdapter[TrainerEvent] = TypeAdapter(TrainerEvent)


def parse_event(line: str | bytes) -> TrainerEvent:
    """Parse one JSON line; raises pydantic.ValidationError on anything that is not an event."""
    return _EVENT_ADAPTER.validate_json(line)


def dump_event(event: TrainerEvent) -> str:
    return event.model_dump_json(exclude_none=False)
