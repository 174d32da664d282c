"""ProgressPoller: the supervisor's progress round, at next to no cost for the jobs where nothing changed.

A round used to read every active job's record twice and its events file once, so an idle service
with 200 running jobs spent a third of a core on rounds that found nothing. Now a round:
- asks the store for the version (phase, last event seq) of every job that can make progress, one
  narrow query; QUEUED jobs are not in it, so a queue of any length costs nothing here;
- reads a job's record only when its version moved since the last round (every change that matters
  here logs an event: job_service.py's write path), and keeps it until it moves again;
- asks the progress source whether the job's events grew (a stat for a local file) and reads and
  folds them only then (JobService.ingest_progress, which reads the record fresh for the fold); a job
  whose last read stopped at the read's bound is read again without asking, and the round says so, so
  the next one comes at once (the fold pacer, fold_pacer.py, keeps catching up to its share of the CPU);
- re-judges a running job's learning health only when its record changed or when the clock passes
  the one moment time alone can change the verdict (job_health.health_changes_by_time_at): stalled.
Missed nothing stays missed: the slow reconcile (active_jobs_reconciler.py) reads every active job's events anyway.
A job whose poll fails round after round (the state disk full) is logged once per fault and once when it recovers
(service/fault_log.py), not once per round.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from service.domain.health.job_health import health_changes_by_time_at
from service.domain.health.learning_health import HealthPolicy
from service.domain.job_service import JobService
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import Clock, JobStore, ProgressSource
from service.fault_log import FaultLog

log = logging.getLogger(__name__)

# The phases in which a trainer may write events: the job has been handed to a backend and has not ended.
PROGRESSING: frozenset[JobPhase] = frozenset({JobPhase.LAUNCHING, JobPhase.RUNNING, JobPhase.CANCELLING})


@dataclass
class _Watched:
    """What the poller keeps of one job between rounds."""

    version: tuple[JobPhase, int]
    record: JobRecord  # as of `version`
    judge_after: datetime | None = None  # re-judge health once the clock passes this (None: at the next change)
    judged: bool = False  # health judged at this version


class ProgressPoller:
    """Reads versions and records from `store` and asks `progress` whether a job's events grew; the folds and the
    health verdicts are written by `jobs` (ingest_progress, judge_health), which must hold the same clock and
    health policy."""

    def __init__(self, jobs: JobService, store: JobStore, progress: ProgressSource, *, clock: Clock, health_policy: HealthPolicy) -> None:
        self.jobs = jobs
        self.store = store
        self.progress = progress
        self.clock = clock
        self.health_policy = health_policy
        self._watched: dict[str, _Watched] = {}
        self._behind: set[str] = set()  # jobs whose last read stopped at its bound: more is there now
        self._faults = FaultLog(log)

    def poll_once(self) -> bool:
        """One round; True when a job has events left that one read could not hold (poll again now)."""
        versions = self.store.job_versions(PROGRESSING)
        for job_id in self._watched.keys() - versions.keys():
            del self._watched[job_id]  # ended (or queued again for a relaunch): its next version is read afresh
        self._behind &= versions.keys()
        self._faults.forget(versions.keys())
        for job_id, version in versions.items():
            try:
                self._poll_job(job_id, version)
            except Exception as e:  # noqa: BLE001 - logged by FaultLog; one job's bad file or a database hiccup must not starve the others
                self._behind.discard(job_id)
                self._faults.failed(job_id, e, "reading progress of %s failed", job_id)
            else:
                self._faults.succeeded(job_id, "reading progress of %s works again", job_id)
        return bool(self._behind)

    def _poll_job(self, job_id: str, version: tuple[JobPhase, int]) -> None:
        watched = self._watched.get(job_id)
        if watched is None or watched.version != version:
            record = self.store.get(job_id)
            if record is None or record.phase not in PROGRESSING:
                self._watched.pop(job_id, None)
                return
            # The record's own version: it may have moved since the versions were read.
            watched = _Watched((record.phase, record.last_event_seq), record)
            self._watched[job_id] = watched
        record = watched.record
        if job_id in self._behind or self.progress.pending(record):
            # Its fold moves the version: the next round reads the record.
            if self.jobs.ingest_progress(job_id):
                self._behind.add(job_id)
            else:
                self._behind.discard(job_id)
        now = self.clock()  # read before judging: a verdict judged at or after it is no older
        if record.phase is JobPhase.RUNNING and self._health_due(watched, now):
            self.jobs.judge_health(record)  # writes (and so moves the version) only if the verdict changed
            moment = health_changes_by_time_at(record, self.health_policy)
            watched.judged = True
            watched.judge_after = moment if moment is not None and now <= moment else None

    @staticmethod
    def _health_due(watched: _Watched, now: datetime) -> bool:
        if not watched.judged:
            return True
        return watched.judge_after is not None and now > watched.judge_after
