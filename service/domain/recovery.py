"""Start-up recovery and the slow reconcile: the part of JobService that re-asks the backend.

`recover()` runs once before the service accepts submissions and re-attaches every non-terminal
job; `reconcile_once()` runs every reconcile_interval_s and catches what the watchers missed: an
observation dropped from a full queue, a cancel that did not reach the backend, or a QUEUED job
whose hand-over to the launcher never happened (a database error between storing and launching).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .launcher_port import JobLauncher, Observation, ObservedState
from .models import JobRecord
from .phases import JobPhase
from .ports import Clock, JobStore, JobTx

log = logging.getLogger(__name__)


class RecoveryMixin:
    """Mixed into JobService; uses its store, launcher, launch() and write path."""

    if TYPE_CHECKING:
        store: JobStore
        launcher: JobLauncher
        clock: Clock
        queued_relaunch_after_s: float

        def launch(self, job_id: str) -> None: ...
        def apply_observation(self, obs: Observation) -> None: ...
        def ingest_progress(self, job_id: str, *, until_caught_up: bool = False) -> None: ...
        def _cancel_workload(self, job_id: str) -> None: ...
        def _mutate(self, job_id: str, change: Callable[[JobRecord, JobTx], Any]) -> JobRecord: ...

    def recover(self) -> None:
        """Re-attach to or resolve every non-terminal job; run before accepting submissions."""
        for record in self.store.list_active():
            try:
                self._recover_one(record)
            except Exception:  # one bad job must not keep the service from becoming ready
                log.exception("recovering %s failed; the reconcile loop retries it", record.id)

    def _recover_one(self, record: JobRecord) -> None:
        if record.phase is JobPhase.QUEUED:
            self.launch(record.id)
            return
        obs = self.launcher.observe(record.id)
        alive = obs.state in (ObservedState.PENDING, ObservedState.RUNNING, ObservedState.RESTARTING)
        if alive:
            note = f"re-attached to {obs.object_name or 'the workload'} after a service restart"

            def mark(rec: JobRecord, tx: JobTx) -> None:
                if not rec.phase.is_terminal():
                    rec.message = note
                    tx.append_event(rec, "message", {"message": note}, self.clock())

            self._mutate(record.id, mark)
            if record.phase is JobPhase.CANCELLING:
                self._cancel_workload(record.id)
        self.apply_observation(obs)

    def reconcile_once(self) -> None:
        """Ask the backend about every launched job; hand over QUEUED jobs that were never launched."""
        for record in self.store.list_active():
            try:
                if record.phase is JobPhase.QUEUED:
                    # Not just submitted (its own launch call may be under way): launch() is idempotent.
                    if (self.clock() - record.updated_at).total_seconds() >= self.queued_relaunch_after_s:
                        log.info("launching %s: still QUEUED since %s", record.id, record.updated_at.isoformat())
                        self.launch(record.id)
                    continue
                self.ingest_progress(record.id)
                obs = self.launcher.observe(record.id)
                if record.phase is JobPhase.CANCELLING and obs.state in (ObservedState.RUNNING, ObservedState.PENDING):
                    self._cancel_workload(record.id)
                self.apply_observation(obs)
            except Exception:
                log.exception("reconciling %s failed", record.id)
