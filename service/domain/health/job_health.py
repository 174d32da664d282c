"""A job's learning health from its record, and the verdict changes JobService's write path logs.

learning_health.py decides a verdict from train steps and evaluations; this module feeds it a record
(its window of steps, its latest evaluation compared with `before`, phase, stage, when training
started, where its checkpoints are) and keeps the
event log in step: a `health` entry (verdict, message, step, previous) whenever the verdict differs
from the one last logged, so SSE streams and `rljob status --follow`-style clients see it change.
"""

from __future__ import annotations

from datetime import datetime

from service.domain.evals.job_eval import latest_comparison
from service.domain.records.health_models import LearningHealth
from service.domain.records.models import JobRecord
from service.domain.records.ports import JobTx
from service.domain.records.train_step_summary import as_utc
from trainer.contract import Stage

from .learning_health import HealthPolicy, assess_learning, stall_deadline


def train_started_at(record: JobRecord) -> datetime | None:
    times = record.report.stage_times.get(Stage.TRAIN)
    return as_utc(times.started_at) if times and times.started_at else None


def learning_health(record: JobRecord, now: datetime, policy: HealthPolicy) -> LearningHealth | None:
    """The job's verdict at `now`; None before its first train step."""
    return assess_learning(
        record.report.recent_train_steps,
        phase=record.phase,
        stage=record.report.stage,
        now=now,
        policy=policy,
        train_started_at=train_started_at(record),
        job_id=record.id,
        checkpoints_uri=record.layout.actor_checkpoints,
        evaluation=latest_comparison(record.report.eval_points),
    )


def health_verdict_changed(record: JobRecord, now: datetime, policy: HealthPolicy) -> bool:
    """Whether the verdict at `now` differs from the one last logged: time alone can stall a job."""
    health = learning_health(record, now, policy)
    return (health.verdict.value if health else None) != record.health_verdict


def health_changes_by_time_at(record: JobRecord, policy: HealthPolicy) -> datetime | None:
    """When time alone can next change the job's verdict (once the clock passes it: the job stalls);
    None when only a change to the record can. The progress poller re-judges a job then, not every round."""
    return stall_deadline(
        record.report.recent_train_steps,
        phase=record.phase,
        stage=record.report.stage,
        policy=policy,
        train_started_at=train_started_at(record),
    )


def log_health_change(record: JobRecord, tx: JobTx, now: datetime, policy: HealthPolicy) -> None:
    """Re-judge `record` and, if the verdict changed, keep it and log a `health` entry through `tx`.
    JobService's write path calls this after every change, inside its transaction."""
    health = learning_health(record, now, policy)
    verdict = health.verdict.value if health else None
    previous = record.health_verdict
    if verdict == previous:
        return
    record.health_verdict = verdict
    if health is not None:
        data = {"verdict": verdict, "message": health.message, "step": health.step, "previous": previous}
        tx.append_event(record, "health", data, now)
