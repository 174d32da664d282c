"""Folds the trainer's progress events into a job record: the one channel from trainer to service.

The channel is the trainer's `events.jsonl` in the run directory (see trainer/contract/events.py):
the service tails it by `seq`. An event with `seq <= record.last_trainer_seq` is a duplicate (a
re-read after a restart, or a rerun of the trainer that continued the numbering) and is dropped.
Progress never changes the phase: only the backend's view of the process does (job_service), so a
RunFinished written by a pod that Kubernetes then retries cannot end the job early.

The run's manifest.json (written by the trainer after its last event) is folded in once, with the
terminal phase the workload's exit brings (observation_policy.Decision.records_artifacts): it turns
the artifacts the events announced into sizes, file counts and checksums. A manifest the service refused to
parse (ManifestRefused: too many values for its memory) is recorded in the same `artifacts` entry, with the
reason, and the job's end is written as if there were none; a terminal job's manifest is never read again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from trainer.contract import (
    ArtifactWritten,
    EvalResult,
    GoodputMeasured,
    RunFinished,
    RunStarted,
    Stage,
    StageFinished,
    StageStarted,
    StorageMeasured,
    TrainerEvent,
    TrainStep,
)

from .goodput import job_goodput, warn_if_parts_overlap
from .job_eval import eval_event_data, push_eval
from .manifest_sizes import ManifestSizes, size_manifest
from .models import JobRecord, ManifestRefused, MetricPoint
from .ports import SkippedLine
from .run_report import Artifact, RunOutcome, StageTimes
from .train_step_summary import TrainStepSummary, push_step
from .trainer_event_budget import MAX_ARTIFACTS, MAX_GOODPUT_ATTEMPTS, refused_message

# Metrics that JobPublic.metrics shows; everything else stays in the time series only.
HEADLINE_METRICS = ("reward_mean", "reward_std", "kl", "loss")


@dataclass
class ProgressChanges:
    """What applying a batch of events changed: event-log entries and metric points to store."""

    log: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    points: list[MetricPoint] = field(default_factory=list)


def fold_events(record: JobRecord, events: list[TrainerEvent]) -> ProgressChanges:
    """Apply events in seq order to `record`; return what to append to the event log and metrics."""
    changes = ProgressChanges()
    refused_before = record.report.trainer_events.refused
    for event in sorted(events, key=lambda e: e.seq):
        if event.seq <= record.report.last_trainer_seq or event.job_id != record.id:
            continue  # duplicate, or a file that belongs to another job: never applied twice
        record.report.last_trainer_seq = event.seq
        logged, pointed = len(changes.log), len(changes.points)
        kept = _fold_one(record, event, changes)
        if kept and record.report.trainer_events.admit(changes.log[logged:]):
            continue
        del changes.log[logged:], changes.points[pointed:]  # the record's state keeps what the event said
        if not kept:
            record.report.trainer_events.refused += 1
    _say_first_refusal(record, refused_before, changes)
    return changes


def _say_first_refusal(record: JobRecord, refused_before: int, changes: ProgressChanges) -> None:
    """The job's message at its first refused event, whichever path refused it; later ones are only counted."""
    if refused_before == 0 and record.report.trainer_events.refused > 0:
        record.message = refused_message(record.report.trainer_events)
        changes.log.append(("message", {"message": record.message, "reason": "TrainerEventsRefused"}))


def note_skipped_lines(record: JobRecord, skipped: Sequence[SkippedLine]) -> ProgressChanges:
    """Say in the job's message that events were lost: its curves or artifacts may have a gap."""
    changes = ProgressChanges()
    refused_before = record.report.trainer_events.refused
    for line in skipped:
        message = (
            f"skipped a {line.size_bytes}-byte line at byte {line.offset} of {line.uri}: longer than the "
            f"service reads for one event ({line.limit_bytes} bytes); progress continues after it, but that event "
            "is missing. Trainer events are small JSON lines: report this trainer bug with the file."
        )
        entry = ("message", {"message": message, "reason": "EventLineTooLong"})
        if record.report.trainer_events.admit([entry]):  # each says so, until the job's bound: then only counted
            record.message = message
            changes.log.append(entry)
    _say_first_refusal(record, refused_before, changes)
    return changes


def _finite(metrics: dict[str, float | None]) -> dict[str, float]:
    """Old trainers wrote NaN/inf as null: such a value is not a point on a curve."""
    return {name: value for name, value in metrics.items() if value is not None and math.isfinite(value)}


def _fold_one(record: JobRecord, event: TrainerEvent, changes: ProgressChanges) -> bool:
    """Apply one event; False when a per-job bound refused it whole (trainer_event_budget.py)."""
    if isinstance(event, RunStarted):
        record.report.attempt = event.attempt
        changes.log.append(("attempt", {"attempt": event.attempt, "run_uri": event.run_uri}))
    elif isinstance(event, StageStarted):
        record.report.stage = event.stage
        record.report.stage_times[event.stage] = StageTimes(started_at=event.time)
        changes.log.append(("stage", {"stage": event.stage.value, "status": "started"}))
    elif isinstance(event, StageFinished):
        started = record.report.stage_times.get(event.stage)
        record.report.stage_times[event.stage] = StageTimes(
            started_at=started.started_at if started else event.time,  # a start this service never saw
            finished_at=event.time,
            duration_s=event.duration_s,
            skipped=event.skipped,
        )
        data: dict[str, Any] = {"stage": event.stage.value, "status": "finished", "skipped": event.skipped}
        if event.reason:
            data["reason"] = event.reason
        changes.log.append(("stage", data))
    elif isinstance(event, TrainStep):
        record.report.stage = Stage.TRAIN
        record.report.step = event.step
        record.report.total_steps = event.total_steps
        values = _finite(event.metrics)
        for name in HEADLINE_METRICS:
            value = getattr(event, name)
            if value is not None:
                values[name] = value
                record.report.latest_metrics[name] = value
        # The learning-health window: job_service judges it after the fold and logs a verdict change.
        record.report.recent_train_steps = push_step(record.report.recent_train_steps, TrainStepSummary.of_event(event))
        changes.points.append(MetricPoint(kind="train", step=event.step, time=event.time, values=values))
        changes.log.append(("progress", {"step": event.step, "total_steps": event.total_steps, "metrics": dict(values)}))
    elif isinstance(event, EvalResult):
        values = _finite(event.metrics)
        if event.accuracy is not None:
            values["accuracy"] = event.accuracy
            record.report.latest_metrics["eval_accuracy"] = event.accuracy
        changes.points.append(MetricPoint(kind="eval", step=event.step, time=event.time, values=values))
        logged: dict[str, Any] = {"step": event.step, "metrics": dict(values)}
        if event.summary is not None:
            record.report.eval_points = push_eval(record.report.eval_points, event.summary)
            logged |= eval_event_data(event.summary)
        changes.log.append(("eval", logged))
    elif isinstance(event, ArtifactWritten):
        if event.name not in record.report.artifacts and len(record.report.artifacts) >= MAX_ARTIFACTS:
            return False
        artifact = Artifact(name=event.name, uri=event.uri, size_bytes=event.size_bytes)
        record.report.artifacts[event.name] = artifact
        changes.log.append(("artifact", artifact.model_dump(exclude_unset=True)))
    elif isinstance(event, StorageMeasured):
        # The newest measurement is the run directory's size now (retention deleted older checkpoints).
        record.report.storage = event.storage
        changes.log.append(("storage", {"stage": event.stage.value if event.stage else None, **event.storage.model_dump(mode="json")}))
    elif isinstance(event, GoodputMeasured):
        # Cumulative within an attempt: the newest replaces that attempt's last; attempts add up.
        if event.attempt not in record.report.goodput and len(record.report.goodput) >= MAX_GOODPUT_ATTEMPTS:
            return False
        record.report.goodput = {**record.report.goodput, event.attempt: event.train}
        warn_if_parts_overlap(record, event.time)
        measured = job_goodput(record, event.time)
        changes.log.append(
            (
                "goodput",
                {
                    "attempt": event.attempt,
                    "step": event.train.step,
                    "final": event.train.final,
                    **(measured.model_dump() if measured else {}),
                },
            )
        )
    elif isinstance(event, RunFinished):
        record.report.outcome = RunOutcome(
            ok=event.ok,
            exit_code=event.exit_code,
            message=event.message,
            failed_stage=event.failed_stage.value if event.failed_stage else None,
        )
        changes.log.append(("run_finished", record.report.outcome.model_dump()))
    return True


# The whole run directory appears as one artifact, so a job page shows what the job stored in total.
RUN_ARTIFACT = "run"


def _manifest_artifact(fields: dict[str, Any]) -> Artifact | None:
    """None for values of the wrong type: a manifest is read from storage, and one that is not the
    trainer's must not stop the job from ending (it is folded in with the terminal phase)."""
    try:
        return Artifact.model_validate(fields)
    except ValidationError:
        return None


def fold_manifest(record: JobRecord, manifest: ManifestSizes | dict[str, Any] | ManifestRefused) -> dict[str, Any]:
    """Complete `record.artifacts` from the trainer's manifest (its sizes, manifest_sizes.py, or the manifest
    itself, reduced here); return the event-log entry's data."""
    if isinstance(manifest, ManifestRefused):
        artifacts = [a.model_dump(exclude_unset=True) for a in record.report.artifacts.values()]
        return {"artifacts": artifacts, "manifest_refused": manifest.reason}
    if isinstance(manifest, dict):
        manifest = size_manifest(manifest, {name: a.uri for name, a in record.report.artifacts.items()})
    for name, sized in manifest.sized.items():
        artifact = record.report.artifacts.get(name)
        if artifact is not None:
            record.report.artifacts[name] = _manifest_artifact(artifact.model_dump(exclude_unset=True) | sized) or artifact
    for name, uri in sorted(manifest.references.items()):
        # Used by the run but owned by someone else (the conversion cache): shown, never sized here.
        reference = _manifest_artifact({"name": f"reference.{name}", "uri": uri})
        if reference is not None:
            record.report.artifacts.setdefault(reference.name, reference)
    run = manifest.run and _manifest_artifact({"name": RUN_ARTIFACT, **manifest.run})
    if run:
        record.report.artifacts[RUN_ARTIFACT] = run
    return {"artifacts": [a.model_dump(exclude_unset=True) for a in record.report.artifacts.values()]}
