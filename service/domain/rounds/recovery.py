"""Start-up recovery: every job that has not ended is re-attached to its workload, or resolved, before the service
accepts submissions.

`JobRecovery.recover()` runs first on the supervisor's `rljob-recovery` loop, retried with backoff until it succeeds
once; the same loop then takes over other replicas' requests (request_take_over.py) and runs the slow reconcile
(active_jobs_reconciler.py) between its progress polls (service/supervisor.py). It writes nothing itself: every
change goes through JobService's public API.
"""

from __future__ import annotations

import logging

from service.domain.job_service import JobService
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import JobLauncher, JobStore, ObservedState

log = logging.getLogger(__name__)

# A workload in one of these states is still there, and the job is re-attached to it.
ALIVE: frozenset[ObservedState] = frozenset({ObservedState.QUEUED, ObservedState.PENDING, ObservedState.RUNNING, ObservedState.RESTARTING})


class JobRecovery:
    """Reads the jobs that have not ended from `store` and asks `launcher` about each; hands over, re-attaches and
    stops through `jobs` (launch, post_message, stop_workload, apply_observation)."""

    def __init__(self, jobs: JobService, store: JobStore, launcher: JobLauncher) -> None:
        self.jobs = jobs
        self.store = store
        self.launcher = launcher

    def recover(self) -> None:
        """Re-attach to or resolve every non-terminal job; run before accepting submissions."""
        for record in self.store.list_active():
            try:
                self._recover_one(record)
            except Exception:  # one bad job must not keep the service from becoming ready
                log.exception("recovering %s failed; the reconcile loop retries it", record.id)

    def _recover_one(self, record: JobRecord) -> None:
        if record.phase is JobPhase.QUEUED and not record.handed_over:
            self.jobs.launch(record.id)
            return
        obs = self.launcher.observe(record.id)
        if obs.state in ALIVE:
            workload = obs.object_name or "the workload"
            self.jobs.post_message(record.id, f"re-attached to {workload} after a service restart or a change of leader")
            if record.phase is JobPhase.CANCELLING:
                self.jobs.stop_workload(record.id)
        self.jobs.apply_observation(obs)
