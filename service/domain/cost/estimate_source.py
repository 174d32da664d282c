"""Gathers what an estimate is made from (the store's jobs, the launcher's place in line, the price table and the
clock) and makes it (estimates.py): at POST /v1/jobs?dry_run=estimate and at every submit, before anything is
stored."""

from __future__ import annotations

import logging
import os

from service.domain.records.estimate_models import JobEstimate
from service.domain.records.models import Caller, JobFilters
from service.domain.records.phases import JobPhase
from service.domain.records.ports import Clock, JobLauncher, JobStore, QueuePreview
from trainer.contract import JobSpec

from .estimates import EstimateInputs, estimate_job
from .usage import PriceTable

log = logging.getLogger(__name__)
FINISHED_READ = 100  # the team's newest SUCCEEDED jobs read for history (estimate_history keeps the matching few)
RECENT_READ = 100  # the newest jobs of every team read for recent admissions


class SubmitEstimator:
    def __init__(self, store: JobStore, launcher: JobLauncher, prices: PriceTable, clock: Clock, *, cpu_cores: int | None = None) -> None:
        self.store, self.launcher, self.prices, self.clock = store, launcher, prices, clock
        self.cpu_cores = cpu_cores or os.cpu_count() or 1  # a local cpu job shares this host's cores

    def queue_position(self, spec: JobSpec) -> int | None:
        if not isinstance(self.launcher, QueuePreview):
            return None
        try:
            return self.launcher.queue_position_for(spec)
        except Exception:  # the place in line is a nicety; a backend that cannot say must not refuse the job
            log.warning("the launcher could not say where a new job would queue", exc_info=True)
            return None

    def estimate(self, caller: Caller, spec: JobSpec) -> JobEstimate:
        """`spec` as check_submission returns it (its team the caller's)."""
        finished = self.store.list_jobs(JobFilters(phase=JobPhase.SUCCEEDED, team=caller.team), before_pk=None, limit=FINISHED_READ)
        recent = self.store.list_jobs(JobFilters(), before_pk=None, limit=RECENT_READ)
        inputs = EstimateInputs(
            spec=spec,
            now=self.clock(),
            prices=self.prices,
            finished=[record for _, record in finished],
            recent=[record for _, record in recent],
            queue_position=self.queue_position(spec),
            cpu_cores=self.cpu_cores,
        )
        return estimate_job(inputs)
