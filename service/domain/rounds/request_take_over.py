"""Taking over other replicas' requests: where replicas share the store, one that does not lead stores the jobs it
accepts and the cancels it records, and the leader carries them out.

`RequestTakeOver.take_over_requests()` runs on the supervisor's `rljob-recovery` loop after each progress poll, only
where the leader lock is shared (service/supervisor.py). It writes nothing itself: the launch and the stop go through
JobService's public API.
"""

from __future__ import annotations

import logging

from service.domain.job_service import JobService
from service.domain.records.phases import JobPhase
from service.domain.records.ports import JobStore

log = logging.getLogger(__name__)


class RequestTakeOver:
    """Reads QUEUED and CANCELLING jobs from `store`; launches and stops through `jobs` (is_launching, launch,
    stop_requested, stop_workload)."""

    def __init__(self, jobs: JobService, store: JobStore) -> None:
        self.jobs = jobs
        self.store = store
        self._seen: dict[str, tuple[JobPhase, int]] = {}  # the (phase, last event) pairs already acted on

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
