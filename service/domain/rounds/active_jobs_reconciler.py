"""The slow reconcile: asking the backend again about every job that has not ended.

`ActiveJobsReconciler.reconcile_once()` runs on the supervisor's `rljob-recovery` loop every
active_jobs_reconcile_interval_s, once start-up recovery has succeeded (service/supervisor.py), and catches what the
watchers missed: an observation dropped from a full queue, a cancel that did not reach the backend, or a QUEUED job
whose hand-over to the launcher never happened (a database error between storing and launching). It writes nothing
itself: every change goes through JobService's public API.
"""

from __future__ import annotations

import logging

from service.domain.job_service import JobService
from service.domain.records.phases import JobPhase
from service.domain.records.ports import Clock, JobLauncher, JobStore, ObservedState

log = logging.getLogger(__name__)

# A CANCELLING job whose workload is seen in one of these gets the cancel again.
STILL_TO_STOP: frozenset[ObservedState] = frozenset({ObservedState.QUEUED, ObservedState.PENDING, ObservedState.RUNNING})


class ActiveJobsReconciler:
    """Reads the jobs that have not ended from `store` and asks `launcher` about each; folds, launches, stops and
    applies what it saw through `jobs` (ingest_progress, launch, stop_workload, apply_observation)."""

    def __init__(
        self, jobs: JobService, store: JobStore, launcher: JobLauncher, *, clock: Clock, queued_relaunch_after_s: float = 10.0
    ) -> None:
        self.jobs = jobs
        self.store = store
        self.launcher = launcher
        self.clock = clock
        # A QUEUED job younger than this may have its own launch call under way: not handed over again yet.
        self.queued_relaunch_after_s = queued_relaunch_after_s

    def reconcile_once(self) -> None:
        """Ask the backend about every launched job (one QUEUED in the backend's queue too); hand over
        QUEUED jobs that were never launched."""
        for record in self.store.list_active():
            try:
                if record.phase is JobPhase.QUEUED and not record.handed_over:
                    # launch() is idempotent, so a launch that was under way after all does no harm.
                    if (self.clock() - record.updated_at).total_seconds() >= self.queued_relaunch_after_s:
                        log.info("launching %s: still QUEUED since %s", record.id, record.updated_at.isoformat())
                        self.jobs.launch(record.id)
                    continue
                self.jobs.ingest_progress(record.id)
                obs = self.launcher.observe(record.id)
                if record.phase is JobPhase.CANCELLING and obs.state in STILL_TO_STOP:
                    self.jobs.stop_workload(record.id)
                self.jobs.apply_observation(obs)
            except Exception:
                log.exception("reconciling %s failed", record.id)
