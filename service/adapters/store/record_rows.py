"""A job's row and its record: the columns a JobRecord is read from and written to, and how each JSON
column is turned into the domain's types and back."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy.engine import Row

from service.domain.records.attached_eval_models import AttachedEvalPublic
from service.domain.records.budget_models import JobHold
from service.domain.records.checkpoint_expiry_models import CheckpointExpiry
from service.domain.records.estimate_models import JobEstimate
from service.domain.records.models import JobRecord, Placement, QueueStatus
from service.domain.records.phases import JobPhase
from service.domain.records.run_report import Artifact, HangReport, RunOutcome, RunReport, StageTimes
from service.domain.records.train_step_summary import read_window
from service.domain.records.trainer_event_budget import TrainerEventCounts
from trainer.contract import JobSpec, RunStorage, Stage
from trainer.contract.run.eval_report import EvalReport
from trainer.contract.run.evaluation import EvalSummary
from trainer.contract.run.goodput import TrainGoodput
from trainer.contract.spec.base import STORED_SPEC_CONTEXT
from trainer.sizing.fit import FitEstimate

from .tables import JobRow

# The control plane's columns (JobRecord's own fields); the trainer's report is one more (_report, report_json).
_RECORD_FIELDS = [
    "id",
    "team",
    "name",
    "submitted_by",
    "spec",
    "spec_hash",
    "idempotency_key",
    "message",
    "failure_reason",
    "exit_code",
    "health_verdict",
    "backend",
    "object_name",
    "resumes",
    "last_event_seq",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "queue",
    "phase_seconds",
    "phase_entered_at",
    "fit_estimate",
    "placement",
    "estimate",
    "hold",
    "checkpoint_expiry",
]


def to_record(row: JobRow | Row[Any], labels: dict[str, str]) -> JobRecord:
    values = {name: getattr(row, name) for name in _RECORD_FIELDS}
    # An ORM row's JSON columns are the objects SQLAlchemy tracks: copy them, so domain edits are
    # explicit. A core row's were just decoded and belong to nobody (the copy was a third of a list).
    own = _deep_copy if isinstance(row, JobRow) else _as_is
    values["spec"] = _stored_spec(row.id, row.spec)
    values["queue"] = QueueStatus.model_validate(row.queue) if row.queue else None
    values["phase_seconds"] = own(values["phase_seconds"]) or {}  # NULL: stored before 0004
    values["fit_estimate"] = _typed(row.id, "fit_estimate", FitEstimate, row.fit_estimate) if row.fit_estimate else None
    values["placement"] = _typed(row.id, "placement", Placement, row.placement) if row.placement else None
    values["estimate"] = _typed(row.id, "estimate", JobEstimate, row.estimate) if row.estimate else None
    values["hold"] = _typed(row.id, "hold", JobHold, row.hold) if row.hold else None
    values["checkpoint_expiry"] = (
        _typed(row.id, "checkpoint_expiry", CheckpointExpiry, row.checkpoint_expiry) if row.checkpoint_expiry else None
    )
    return JobRecord(phase=JobPhase(row.phase), labels=labels, report=_report(row), **values)


def _report(row: JobRow | Row[Any]) -> RunReport:
    """The report column (migration 0010's document; NULL only for a row written before it, which 0010 filled).
    Every part is a new object, never the row's JSON: an ORM row's JSON is what SQLAlchemy tracks."""
    doc: dict[str, Any] = row.report or {}
    stage = doc.get("stage")
    outcome = doc.get("outcome")
    return RunReport(
        attempt=doc.get("attempt", 0),
        last_trainer_seq=doc.get("last_trainer_seq", -1),
        stage=Stage(stage) if stage is not None and stage in Stage else None,  # an unknown name: none
        step=doc.get("step"),
        total_steps=doc.get("total_steps"),
        latest_metrics=dict(doc.get("latest_metrics") or {}),
        recent_train_steps=read_window(doc.get("recent_train_steps") or []),
        stage_times={
            Stage(k): _typed(row.id, "report.stage_times", StageTimes, v) for k, v in (doc.get("stage_times") or {}).items() if k in Stage
        },
        artifacts={k: _typed(row.id, "report.artifacts", Artifact, v) for k, v in (doc.get("artifacts") or {}).items()},
        outcome=_typed(row.id, "report.outcome", RunOutcome, outcome) if outcome else None,
        eval_points=[_typed(row.id, "report.eval_points", EvalSummary, p) for p in doc.get("eval_points") or []],
        storage=_typed(row.id, "report.storage", RunStorage, doc["storage"]) if doc.get("storage") else None,
        goodput={int(n): _typed(row.id, "report.goodput", TrainGoodput, body) for n, body in (doc.get("goodput") or {}).items()},
        first_goodput={
            int(n): _typed(row.id, "report.first_goodput", TrainGoodput, body) for n, body in (doc.get("first_goodput") or {}).items()
        },
        trainer_events=TrainerEventCounts.of_json(doc.get("trainer_events")),
        eval_report=_typed(row.id, "report.eval_report", EvalReport, doc["eval_report"]) if doc.get("eval_report") else None,
        checkpoints={int(step): str(uri) for step, uri in (doc.get("checkpoints") or {}).items()},
        suite_version=doc.get("suite_version"),
        attached_evals=[_typed(row.id, "report.attached_evals", AttachedEvalPublic, e) for e in doc.get("attached_evals") or []],
        hangs=[_typed(row.id, "report.hangs", HangReport, h) for h in doc.get("hangs") or []],
        hung_restarts=int(doc.get("hung_restarts") or 0),
    )


def report_json(report: RunReport) -> dict[str, Any]:
    """The report column's document: each part as its own JSON (whole models, as their columns held them before 0010)."""
    return {
        "attempt": report.attempt,
        "last_trainer_seq": report.last_trainer_seq,
        "stage": None if report.stage is None else report.stage.value,
        "step": report.step,
        "total_steps": report.total_steps,
        "latest_metrics": dict(report.latest_metrics),
        "recent_train_steps": [summary.to_json() for summary in report.recent_train_steps],
        "stage_times": {stage.value: _deep_copy(times) for stage, times in report.stage_times.items()},
        "artifacts": {name: _deep_copy(artifact) for name, artifact in report.artifacts.items()},
        "outcome": _deep_copy(report.outcome),
        "eval_points": [summary.model_dump(mode="json") for summary in report.eval_points],
        "storage": report.storage.model_dump(mode="json") if report.storage else None,
        "goodput": {str(n): train.model_dump(mode="json") for n, train in report.goodput.items()},
        "first_goodput": {str(n): train.model_dump(mode="json") for n, train in report.first_goodput.items()},
        "trainer_events": report.trainer_events.to_json(),
        "eval_report": report.eval_report.model_dump(mode="json") if report.eval_report else None,
        "checkpoints": {str(step): uri for step, uri in report.checkpoints.items()},
        "suite_version": report.suite_version,
        "attached_evals": [e.model_dump(mode="json", by_alias=True) for e in report.attached_evals],
        "hangs": [h.model_dump(mode="json") for h in report.hangs],
        "hung_restarts": report.hung_restarts,
    }


class StoredReportUnreadable(RuntimeError):
    """A stored report part (an evaluation, the run's size, its goodput, the fit estimate) this version's
    model refuses: read as an error naming the job and the column, never dropped, so that the next write
    cannot erase what a newer version stored."""


def _typed[M: BaseModel](job_id: str, column: str, model: type[M], value: Any) -> M:
    try:
        return model.model_validate(value)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise StoredReportUnreadable(
            f"job {job_id}: its stored {column} does not validate against this version's {model.__name__} ({problems}); "
            "a replica of an older version reads a row a newer one wrote: finish the rollout, or migrate the column"
        ) from None


class StoredSpecUnreadable(RuntimeError):
    """A stored spec this version's JobSpec refuses: the model was tightened without a data migration.
    Raised on read, naming the job and the fields, so the operator sees which rows need migrating
    instead of a bare validation error (or a job silently read with other values)."""


def _stored_spec(job_id: str, spec: Any) -> JobSpec:
    try:
        return _parsed_spec(json.dumps(spec, sort_keys=True))
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise StoredSpecUnreadable(
            f"job {job_id}: its stored spec does not validate against this version's JobSpec ({problems}); "
            "a change to the spec model needs an Alembic data migration (service/adapters/store/migrations/) "
            "that rewrites the stored specs, or the previous version to read them"
        ) from None


# A job's spec never changes, and a list reads the same specs again and again: validating one costs
# some 80 us, its JSON text as the key some 10. A JobSpec is frozen, so records may share one.
@lru_cache(maxsize=1024)
def _parsed_spec(spec_json: str) -> JobSpec:
    return JobSpec.model_validate_json(spec_json, context=STORED_SPEC_CONTEXT)


def _as_is(value: Any) -> Any:
    return value


def _deep_copy(value: Any) -> Any:
    """Plain JSON for a column, never an object the domain may still change. A model keeps only the
    fields that were set, so it reads back the same (Artifact's event-log form depends on it)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


_TYPED_FIELDS = {"spec", "fit_estimate", "placement", "estimate", "hold", "checkpoint_expiry"}


def apply_record(row: JobRow, record: JobRecord) -> None:
    for name in _RECORD_FIELDS:
        if name not in _TYPED_FIELDS:
            setattr(row, name, _deep_copy(getattr(record, name)))
    # Written once, at insert: a job's spec never changes, and an old row keeps its JSON as stored.
    if row.spec is None:
        row.spec = record.spec.model_dump(mode="json")
    # Whole models (not only the fields that were set), as these columns were written before they were typed.
    row.fit_estimate = record.fit_estimate.model_dump(mode="json") if record.fit_estimate else None
    row.placement = record.placement.model_dump(mode="json") if record.placement else None
    row.estimate = record.estimate.model_dump(mode="json") if record.estimate else None
    row.hold = record.hold.model_dump(mode="json") if record.hold else None
    row.checkpoint_expiry = record.checkpoint_expiry.model_dump(mode="json") if record.checkpoint_expiry else None
    row.report = report_json(record.report)
    row.phase = record.phase.value
