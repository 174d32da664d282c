"""Folds the trainer's progress events into a job record: the one channel from trainer to service.

`fold_report` is the reducer: a RunReport and one event give a new report, the event-log entries and the metric
points, and change nothing else. `fold_events` is the shell around it that drops duplicates, charges the entries to
the job's bounds (trainer_event_budget.py) and adds what needs the whole record (goodput's split of the job's time).

The channel is the trainer's `events.jsonl` in the run directory (see trainer/contract/run/events.py):
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
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from service.domain.cost.goodput import job_goodput, warn_if_parts_overlap
from service.domain.evals.job_eval import eval_event_data, push_eval
from service.domain.records.manifest_sizes import ManifestSizes, size_manifest
from service.domain.records.models import JobRecord, ManifestRefused, MetricPoint
from service.domain.records.ports import SkippedLine
from service.domain.records.run_report import MAX_CHECKPOINTS_KEPT, MAX_HANGS_KEPT, Artifact, HangReport, RunOutcome, RunReport, StageTimes
from service.domain.records.train_step_summary import TrainStepSummary, push_step
from service.domain.records.trainer_event_budget import MAX_ARTIFACTS, MAX_GOODPUT_ATTEMPTS, refused_message
from trainer.contract import (
    ArtifactWritten,
    CheckpointSaved,
    EvalReported,
    EvalResult,
    GoodputMeasured,
    HangDetected,
    RunFinished,
    RunStarted,
    Stage,
    StageFinished,
    StageStarted,
    StorageMeasured,
    TrainerEvent,
    TrainStep,
)
from trainer.contract.spec.reward_sandbox import REWARD_CALL_LATEST, REWARD_CALL_TOTALS

# Metrics that JobPublic.metrics shows; everything else stays in the time series only (and the reward sandbox's below).
HEADLINE_METRICS = ("reward_mean", "reward_std", "kl", "loss")


def fold_reward_calls(latest: dict[str, float], step_metrics: dict[str, float]) -> None:
    """The reward sandbox's figures of a step (trainer/contract/spec/reward_sandbox.py) into the job's: its calls, errors and
    timeouts add up (each step is folded once: events are deduplicated by seq), its latencies and isolation are the newest."""
    for tag, name in REWARD_CALL_TOTALS.items():
        if tag in step_metrics:
            latest[name] = latest.get(name, 0.0) + step_metrics[tag]
    for tag, name in REWARD_CALL_LATEST.items():
        if tag in step_metrics:
            latest[name] = step_metrics[tag]


@dataclass
class ProgressChanges:
    """What applying a batch of events changed: event-log entries and metric points to store."""

    log: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    points: list[MetricPoint] = field(default_factory=list)


def fold_events(record: JobRecord, events: list[TrainerEvent]) -> ProgressChanges:
    """Apply events in seq order to `record`; return what to append to the event log and metrics.

    The report's state comes from the pure reducer `fold_report`; this shell drops duplicates, charges each
    event's log entries to the job's bounds, and adds what needs the whole record (goodput's time split)."""
    changes = ProgressChanges()
    refused_before = record.report.trainer_events.refused
    for event in sorted(events, key=lambda e: e.seq):
        if event.seq <= record.report.last_trainer_seq or event.job_id != record.id:
            continue  # duplicate, or a file that belongs to another job: never applied twice
        record.report.last_trainer_seq = event.seq
        folded = fold_report(record.report, event)
        if folded is None:
            record.report.trainer_events.refused += 1
            continue
        record.report = folded.report  # the state keeps what the event said, even if its entries are not stored
        log = [_with_goodput(record, event, entry) for entry in folded.log]
        if record.report.trainer_events.admit(log):
            changes.log += log
            changes.points += folded.points
    _say_first_refusal(record, refused_before, changes)
    return changes


def _with_goodput(record: JobRecord, event: TrainerEvent, entry: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A goodput entry carries the job's time split as of the event (phase times are the record's, not the report's)."""
    if not isinstance(event, GoodputMeasured):
        return entry
    warn_if_parts_overlap(record, event.time)
    measured = job_goodput(record, event.time)
    return entry[0], {**entry[1], **(measured.model_dump() if measured else {})}


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


@dataclass(frozen=True)
class Folded:
    """A report after one event, with the event-log entries and metric points the event makes."""

    report: RunReport
    log: list[tuple[str, dict[str, Any]]]
    points: list[MetricPoint] = field(default_factory=list)


def fold_report(report: RunReport, event: TrainerEvent) -> Folded | None:
    """The reducer of trainer events: pure, `report` is left as it was (a changed part is a new object).
    None when a per-job bound (trainer_event_budget.py) refuses the event whole."""
    if isinstance(event, RunStarted):
        return Folded(replace(report, attempt=event.attempt), [("attempt", {"attempt": event.attempt, "run_uri": event.run_uri})])
    if isinstance(event, StageStarted):
        times = {**report.stage_times, event.stage: StageTimes(started_at=event.time)}
        return Folded(replace(report, stage=event.stage, stage_times=times), [("stage", {"stage": event.stage.value, "status": "started"})])
    if isinstance(event, StageFinished):
        started = report.stage_times.get(event.stage)
        finished = StageTimes(
            started_at=started.started_at if started else event.time,  # a start this service never saw
            finished_at=event.time,
            duration_s=event.duration_s,
            skipped=event.skipped,
        )
        data: dict[str, Any] = {"stage": event.stage.value, "status": "finished", "skipped": event.skipped}
        if event.reason:
            data["reason"] = event.reason
        return Folded(replace(report, stage_times={**report.stage_times, event.stage: finished}), [("stage", data)])
    if isinstance(event, TrainStep):
        values = _finite(event.metrics)
        latest = dict(report.latest_metrics)
        for name in HEADLINE_METRICS:
            value = getattr(event, name)
            if value is not None:
                values[name] = latest[name] = value
        fold_reward_calls(latest, values)
        after = replace(
            report,
            stage=Stage.TRAIN,
            step=event.step,
            total_steps=event.total_steps,
            latest_metrics=latest,
            # The learning-health window: job_service judges it after the fold and logs a verdict change.
            recent_train_steps=push_step(report.recent_train_steps, TrainStepSummary.of_event(event)),
        )
        point = MetricPoint(kind="train", step=event.step, time=event.time, values=values)
        return Folded(after, [("progress", {"step": event.step, "total_steps": event.total_steps, "metrics": dict(values)})], [point])
    if isinstance(event, EvalResult):
        values = _finite(event.metrics)
        after = report
        if event.accuracy is not None:
            values["accuracy"] = event.accuracy
            after = replace(after, latest_metrics={**report.latest_metrics, "eval_accuracy": event.accuracy})
        logged: dict[str, Any] = {"step": event.step, "metrics": dict(values)}
        if event.summary is not None:
            after = replace(after, eval_points=push_eval(report.eval_points, event.summary))
            logged |= eval_event_data(event.summary)
        return Folded(after, [("eval", logged)], [MetricPoint(kind="eval", step=event.step, time=event.time, values=values)])
    if isinstance(event, EvalReported):
        primary = event.report.functions.get(event.report.primary)
        reported: dict[str, Any] = {"suite": event.report.suite.name, "content_hash": event.report.suite.content_hash, "n": event.report.n}
        if primary is not None:
            reported |= {"pass@1": primary.pass_at_1.value, "sampled": primary.sampled.value, "function": event.report.primary}
        return Folded(replace(report, eval_report=event.report), [("eval_report", reported)])
    if isinstance(event, CheckpointSaved):
        kept = dict(sorted({**report.checkpoints, event.step: event.params}.items())[-MAX_CHECKPOINTS_KEPT:])
        return Folded(replace(report, checkpoints=kept), [("checkpoint", {"step": event.step, "params": event.params})])
    if isinstance(event, ArtifactWritten):
        if event.name not in report.artifacts and len(report.artifacts) >= MAX_ARTIFACTS:
            return None
        artifact = Artifact(name=event.name, uri=event.uri, size_bytes=event.size_bytes)
        return Folded(
            replace(report, artifacts={**report.artifacts, event.name: artifact}), [("artifact", artifact.model_dump(exclude_unset=True))]
        )
    if isinstance(event, StorageMeasured):
        # The newest measurement is the run directory's size now (retention deleted older checkpoints).
        data = {"stage": event.stage.value if event.stage else None, **event.storage.model_dump(mode="json")}
        return Folded(replace(report, storage=event.storage), [("storage", data)])
    if isinstance(event, GoodputMeasured):
        # Cumulative within an attempt: the newest replaces that attempt's last; attempts add up.
        if event.attempt not in report.goodput and len(report.goodput) >= MAX_GOODPUT_ATTEMPTS:
            return None
        data = {"attempt": event.attempt, "step": event.train.step, "final": event.train.final}
        first = report.first_goodput
        if event.attempt not in first and event.train.step > 0 and not event.train.final:
            first = {**first, event.attempt: event.train}  # the attempt's first step's end (one report per step)
        return Folded(replace(report, goodput={**report.goodput, event.attempt: event.train}, first_goodput=first), [("goodput", data)])
    if isinstance(event, HangDetected):
        hang = HangReport(
            attempt=event.attempt,
            time=event.time,
            stage=event.stage.value if event.stage else None,
            step=event.step,
            idle_s=round(event.idle_s, 3),
            limit_s=round(event.limit_s, 3),
            stacks=event.stacks,
        )
        return Folded(replace(report, hangs=[*report.hangs, hang][-MAX_HANGS_KEPT:]), [("hung", hang.model_dump(mode="json"))])
    if isinstance(event, RunFinished):
        outcome = RunOutcome(
            ok=event.ok,
            exit_code=event.exit_code,
            message=event.message,
            failed_stage=event.failed_stage.value if event.failed_stage else None,
        )
        return Folded(replace(report, outcome=outcome), [("run_finished", outcome.model_dump())])
    return Folded(report, [])


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
