"""A job's learning health from its record, and the part of JobService that logs verdict changes.

learning_health.py decides a verdict from train steps alone; this module feeds it a record (its
window of steps, phase, stage, when training started, where its checkpoints are) and keeps the
event log in step: a `health` entry (verdict, message, step, previous) whenever the verdict differs
from the one last logged, so SSE streams and `rljob status --follow`-style clients see it change.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from trainer.contract import RunLayout, Stage

from .learning_health import HealthPolicy, LearningHealth, as_utc, assess_learning, read_window
from .models import JobRecord
from .ports import Clock, JobStore, JobTx


def train_started_at(record: JobRecord) -> datetime | None:
    times = record.stage_times.get(Stage.TRAIN.value)
    return as_utc(times.started_at) if times and times.started_at else None


def learning_health(record: JobRecord, now: datetime, policy: HealthPolicy) -> LearningHealth | None:
    """The job's verdict at `now`; None before its first train step."""
    output = record.spec.get("output")
    return assess_learning(
        read_window(record.recent_train_steps),
        phase=record.phase,
        stage=record.stage,
        now=now,
        policy=policy,
        train_started_at=train_started_at(record),
        job_id=record.id,
        checkpoints_uri=RunLayout(output, record.id).actor_checkpoints if output else None,
    )


class HealthMixin:
    """Mixed into JobService; uses its store, clock, policy and write path."""

    if TYPE_CHECKING:
        store: JobStore
        clock: Clock
        health_policy: HealthPolicy

        def _mutate(self, job_id: str, change: Callable[[JobRecord, JobTx], Any]) -> JobRecord: ...

    def refresh_health(self, job_id: str) -> None:
        """Re-judge a job's health now: a running job becomes (or stops being) stalled by time
        passing, with no write to trigger it. The poller calls this; it writes only on a change."""
        record = self.store.get(job_id)
        if record is None or record.phase.is_terminal():
            return
        health = learning_health(record, self.clock(), self.health_policy)
        if (health.verdict.value if health else None) != record.health_verdict:
            self._mutate(job_id, lambda rec, tx: None)  # _mutate re-judges under the lock and logs it

    def _note_health(self, rec: JobRecord, tx: JobTx) -> None:
        """Called by _mutate after every change, inside its transaction."""
        now = self.clock()
        health = learning_health(rec, now, self.health_policy)
        verdict = health.verdict.value if health else None
        previous = rec.health_verdict
        if verdict == previous:
            return
        rec.health_verdict = verdict
        if health is not None:
            data = {"verdict": verdict, "message": health.message, "step": health.step, "previous": previous}
            tx.append_event(rec, "health", data, now)
