"""Start-up recovery and the slow reconcile: asking the backend again about every job that has not ended.

`JobRecovery.recover()` runs once before the service accepts submissions and re-attaches every
non-terminal job; `reconcile_once()` runs on the supervisor's reconcile loop and catches what the
watchers missed: an observation dropped from a full queue, a cancel that did not reach the backend,
or a QUEUED job whose hand-over to the launcher never happened (a database error between storing
and launching). It writes nothing itself: every change goes through JobService's public API.
"""

from __future__ import annotations

import logging

from service.domain.job_service import JobService
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import Clock, JobLauncher, JobStore, ObservedState

log = logging.getLogger(__name__)

# At start-up: a workload in one of these states is still there, and the job is re-attached to it.
ALIVE: frozenset[ObservedState] = frozenset({ObservedState.QUEUED, ObservedState.PENDING, ObservedState.RUNNING, ObservedState.RESTARTING})
# On the slow reconcile: a CANCELLING job whose workload is seen in one of these gets the cancel again.
STILL_TO_STOP: frozenset[ObservedState] = frozenset({ObservedState.QUEUED, ObservedState.PENDING, ObservedState.RUNNING})


class JobRecovery:
    """Reads the jobs that have not ended from `store` and asks `launcher` about each; hands over, re-attaches, stops
    and folds through `jobs` (launch, post_message, stop_workload, apply_observation, ingest_progress)."""

    def __init__(
        self, jobs: JobService, store: JobStore, launcher: JobLauncher, *, clock: Clock, queued_relaunch_after_s: float = 10.0
    ) -> None:
        self.jobs = jobs
        self.store = store
        self.launcher = launcher
        self.clock = clock
        # A QUEUED job younger than this may have its own launch call under way: not handed over again yet.
        self.queued_relaunch_after_s = queued_relaunch_after_s
        self._seen: dict[str, tuple[JobPhase, int]] = {}  # take_over_requests: the pairs already acted on

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

    def take_over_requests(self) -> None:
        """Carry out what another replica stored and could not do itself (it does not lead): hand over
        the QUEUED jobs it accepted and stop the workloads of the jobs it recorded as cancelled.

        Every round reads the (phase, last event) pairs of QUEUED and CANCELLING jobs only, and a job's
        record only when its pair moved: a queue of jobs the backend holds costs one narrow query."""
        versions = self.store.job_versions((JobPhase.QUEUED, JobPhase.CANCELLING))
        for job_id, version in versions.items():
            if self._seen.get(job_id) == version:
                continue
            try:
                record = self.store.get(job_id)
                if record is None:
                    continue
                if record.phase is JobPhase.QUEUED and not record.handed_over:
                    if self.jobs.is_launching(job_id):
                        continue  # this replica's own submission is being launched: look again next round
                    self.jobs.launch(job_id)
                elif record.phase is JobPhase.CANCELLING and not self.jobs.stop_requested(job_id):
                    self.jobs.stop_workload(job_id)
                self._seen[job_id] = version
            except Exception:
                log.exception("taking over the request for %s failed", job_id)
        self._seen = {job_id: v for job_id, v in self._seen.items() if job_id in versions}

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
