"""The leader's checkpoint expiry (`rljob-checkpoint-expiry`): it deletes finished runs' expired intermediate actor
checkpoints (which ones: checkpoint_retention.py), recorded on the job (`checkpoint_expiry`) and in its event log.

Each pass works from what is stored, so a restarted service or a new leader finishes what a killed one started:
- the ended jobs (one narrow query) not looked at yet in this term are read, a bounded number a pass, and those whose
  checkpoints will expire are remembered with when; a job whose record is settled (everything planned deleted, or
  refused) or whose checkpoints never expire is not looked at again this term;
- for a job that is due: the run directory is checked against the team's locations (links resolved); outside them,
  the refusal is recorded and nothing is deleted. Then, if it has no plan yet, the actor checkpoints present are
  listed, those that expire are measured and the plan is written (a `checkpoint_expiry` event) before anything is
  deleted; then each planned checkpoint not marked deleted is deleted whole (the leftovers of one a killed pass
  half-deleted included) and marked, with a `checkpoint_deleted` event and a `storage` event: the run directory's
  newest size less the checkpoint's bytes, so JobPublic.storage and the GiB-months of usage (storage_usage.py) show
  the drop from then on; the last one marks the plan finished.

A job whose pass fails (its storage unreachable, a checkpoint it may not delete) is tried again with backoff, not every
pass: EXPIRY_RETRY_FIRST_S after the first failure, the wait doubling after each to EXPIRY_RETRY_MAX_S; the other jobs go
on meanwhile. It is reported once: one warning line with the error when it first fails (the traceback of every failure
only at DEBUG), and one line when it succeeds again. Nothing is written on the job for a failed pass (its
`checkpoint_expiry` shows the plan and what is deleted so far, as before); a refusal (outside the team's locations,
not a plain directory) is recorded and never retried. The backoff is kept by this reconciler for the leader's term
and not stored: it only has to outlast passes. A restarted service or a new leader tries the job once at once, and
if that fails reports it once more and backs off from the start: at most one line per job per term, and a few
retries, not one a minute.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from service.domain.cost.checkpoint_retention import checkpoint_path, expiry_due_at, plan_retention, retention_days, steps_in_use
from service.domain.job_service import JobService
from service.domain.location_policy import LocationPolicy, location_problem
from service.domain.records.checkpoint_expiry_models import CheckpointExpiry, ExpiringCheckpoint
from service.domain.records.errors import DomainError
from service.domain.records.models import JobRecord
from service.domain.records.phases import TERMINAL
from service.domain.records.ports import Clock, JobStore, JobTx
from trainer.contract import RunStorage

log = logging.getLogger(__name__)

READS_PER_PASS = 200  # ended jobs new to this term read per pass (the first passes of a term catch up on old ones)
EXPIRY_EVENT = "checkpoint_expiry"
DELETED_EVENT = "checkpoint_deleted"
EXPIRY_RETRY_FIRST_S = 120.0  # two passes (CHECKPOINT_EXPIRY_INTERVAL_S): a storage hiccup is over by then
EXPIRY_RETRY_MAX_S = 6 * 3600.0  # a checkpoint nobody can delete is tried four times a day, not 1440


def expiry_retry_delay_s(failures: int) -> float:
    """The wait before trying a job's expiry again after its `failures`-th failed pass in a row."""
    doublings = min(failures - 1, 30)  # the cap is reached long before; unbounded, 2.0 ** n overflows after 1024 failures
    return float(min(EXPIRY_RETRY_MAX_S, EXPIRY_RETRY_FIRST_S * 2.0**doublings))


@dataclass(frozen=True)
class _Failing:
    failures: int  # passes in a row that failed
    retry_at: datetime


@dataclass(frozen=True)
class TreeSize:
    size_bytes: int  # of regular files (objects on gs://)
    files: int  # files and links (objects)
    left: int = 0  # entries neither a file, a link nor a directory: never touched


class CheckpointStore(Protocol):
    """Where a run's actor checkpoints are listed, measured and deleted (service/adapters/checkpoint_deleter.py)."""

    def list_steps(self, record: JobRecord) -> list[int]:
        """Steps of the actor checkpoint directories present, ascending."""
        ...

    def referenced(self, record: JobRecord) -> dict[str, str]:
        """why -> URI of the weights the run's own records point at (the export's, the best record's)."""
        ...

    def measure(self, record: JobRecord, path: str) -> TreeSize: ...

    def delete(self, record: JobRecord, path: str) -> TreeSize:
        """Delete the tree at `path` (relative to the run directory); what is already gone is nothing to do."""
        ...


class CheckpointExpiryReconciler:
    """Reads the jobs from `store`, lists, measures and deletes their checkpoints through `checkpoints` where
    `location_policy` lets it, and records each step on the job through `jobs` (write_as_leader)."""

    def __init__(
        self,
        jobs: JobService,
        store: JobStore,
        checkpoints: CheckpointStore,
        *,
        clock: Clock,
        location_policy: LocationPolicy,
        default_days: int,
        reads_per_pass: int = READS_PER_PASS,
    ) -> None:
        self.jobs = jobs
        self.store = store
        self.checkpoints = checkpoints
        self.clock = clock
        self.location_policy = location_policy
        self.default_days = default_days
        self.reads_per_pass = reads_per_pass
        self._due: dict[str, datetime] = {}  # ended job -> when its checkpoints expire, until it is settled
        self._seen: set[str] = set()  # ended jobs read this term
        self._failing: dict[str, _Failing] = {}  # due jobs whose last pass failed: not tried again before retry_at

    def restart(self) -> None:
        """Forget what this process saw: a new term of leadership reads everything again."""
        self._due.clear()
        self._seen.clear()
        self._failing.clear()

    def reconcile_once(self) -> None:
        if not self.jobs.leads():
            return
        ended = self.store.job_versions(TERMINAL)
        for job_id in [j for j in ended if j not in self._seen][: self.reads_per_pass]:
            self._seen.add(job_id)
            record = self.store.get(job_id)
            due = expiry_due_at(record, self.default_days) if record is not None else None
            if due is not None and not (record is not None and record.checkpoint_expiry and record.checkpoint_expiry.settled):
                self._due[job_id] = due
        now = self.clock()
        for job_id, due in sorted(self._due.items(), key=lambda item: item[1]):
            if due > now:
                break
            failing = self._failing.get(job_id)
            if failing is not None and failing.retry_at > now:
                continue
            try:
                done = self.expire(job_id)
            except Exception as e:  # noqa: BLE001 - one run's trouble (its storage unreachable) must not hold up the others'
                self._failed(job_id, e, failing)
                continue
            if failing is not None:
                del self._failing[job_id]
                log.info("job %s: its expired checkpoints are deleted after %d failed passes", job_id, failing.failures)
            if done:
                del self._due[job_id]

    def _failed(self, job_id: str, error: Exception, before: _Failing | None) -> None:
        failures = 1 if before is None else before.failures + 1
        wait_s = expiry_retry_delay_s(failures)
        self._failing[job_id] = _Failing(failures, self.clock() + timedelta(seconds=wait_s))
        log.debug("expiring the checkpoints of %s failed (pass %d in a row)", job_id, failures, exc_info=error)
        if before is None:
            log.warning(
                "job %s: its expired checkpoints could not be deleted (%s: %s); the service must reach and delete under "
                "its run directory. Tried again in %.0f s, the wait doubling up to %.0f s; not reported again until it succeeds",
                job_id,
                error.__class__.__name__,
                error,
                wait_s,
                EXPIRY_RETRY_MAX_S,
            )

    def expire(self, job_id: str) -> bool:
        """Plan, then delete, the job's expired checkpoints; True once nothing is left to do."""
        record = self.store.get(job_id)
        if record is None or expiry_due_at(record, self.default_days) is None:
            return True
        expiry = record.checkpoint_expiry
        if expiry is not None and expiry.settled:
            return True
        if (problem := self._location_problem(record)) is not None:
            self._write(job_id, _refusal(problem, record, self.default_days, self.clock()))
            log.warning("job %s: checkpoints not expired: %s", job_id, problem)
            return True
        if expiry is None:
            try:
                expiry = self._plan(record)
            except DomainError as e:  # a link or a FIFO where the checkpoints' directory should be: the job's doing
                self._write(job_id, _refusal(str(e), record, self.default_days, self.clock()))
                return True
            record = self._write(job_id, _store_plan(expiry))
        for checkpoint in expiry.planned:
            if checkpoint.deleted_at is None and checkpoint.path == checkpoint_path(record, checkpoint.step):
                done = self.checkpoints.delete(record, checkpoint.path)
                record = self._write(job_id, _mark_deleted(checkpoint.step, done.left, self.clock()))
        return True

    def _plan(self, record: JobRecord) -> CheckpointExpiry:
        steps = self.checkpoints.list_steps(record)
        in_use = steps_in_use(record, self.store.list_active()) if steps else {}
        plan = plan_retention(record, steps, referenced=self.checkpoints.referenced(record) if steps else {}, in_use=in_use)
        planned = []
        for step in plan.expiring:
            path = checkpoint_path(record, step)
            size = self.checkpoints.measure(record, path)
            planned.append(ExpiringCheckpoint(step=step, path=path, size_bytes=size.size_bytes, files=size.files))
        now = self.clock()
        return CheckpointExpiry(
            days=retention_days(record, self.default_days),
            planned_at=now,
            planned=planned,
            kept=plan.kept,
            finished_at=None if planned else now,
        )

    def _location_problem(self, record: JobRecord) -> str | None:
        policy = self.location_policy
        if not policy.enforced:
            return None
        problem = location_problem(record.layout.root, policy.prefixes_for(record.team))
        return None if problem is None else f"the run directory {record.layout.root} {problem}"

    def _write(self, job_id: str, change: Callable[[JobRecord, JobTx], None]) -> JobRecord:
        return self.jobs.write_as_leader(job_id, change)


def _refusal(problem: str, record: JobRecord, default_days: int, now: datetime) -> Callable[[JobRecord, JobTx], None]:
    def change(rec: JobRecord, tx: JobTx) -> None:
        if rec.checkpoint_expiry is not None and rec.checkpoint_expiry.settled:
            return
        planned = rec.checkpoint_expiry.planned if rec.checkpoint_expiry else []
        rec.checkpoint_expiry = CheckpointExpiry(
            days=retention_days(record, default_days), planned_at=now, planned=planned, refused=problem
        )
        tx.append_event(rec, EXPIRY_EVENT, {"refused": problem}, now)

    return change


def _store_plan(expiry: CheckpointExpiry) -> Callable[[JobRecord, JobTx], None]:
    def change(rec: JobRecord, tx: JobTx) -> None:
        if rec.checkpoint_expiry is not None:  # another pass (a replica's last term) planned first: its plan stands
            return
        rec.checkpoint_expiry = expiry
        data = {
            "days": expiry.days,
            "planned": [c.path for c in expiry.planned],
            "planned_bytes": sum(c.size_bytes for c in expiry.planned),
            "kept": [k.model_dump() for k in expiry.kept],
        }
        tx.append_event(rec, EXPIRY_EVENT, data, expiry.planned_at)

    return change


def _mark_deleted(step: int, left: int, now: datetime) -> Callable[[JobRecord, JobTx], None]:
    def change(rec: JobRecord, tx: JobTx) -> None:
        expiry = rec.checkpoint_expiry
        if expiry is None:
            return
        entry = next((c for c in expiry.planned if c.step == step), None)
        if entry is None or entry.deleted_at is not None:
            return
        deleted = entry.model_copy(update={"deleted_at": now, "left": left})
        planned = [deleted if c.step == step else c for c in expiry.planned]
        finished = all(c.deleted_at is not None for c in planned)
        rec.checkpoint_expiry = expiry.model_copy(update={"planned": planned, "finished_at": now if finished else None})
        tx.append_event(rec, DELETED_EVENT, {"step": step, "path": entry.path, "bytes": entry.size_bytes, "files": entry.files}, now)
        if rec.report.storage is not None:
            storage = _less(rec.report.storage, entry)
            rec.report = dataclasses.replace(rec.report, storage=storage)
            tx.append_event(rec, "storage", {"stage": None, "after": DELETED_EVENT, **storage.model_dump(mode="json")}, now)
        if finished:
            tx.append_event(rec, EXPIRY_EVENT, {"finished": True, "freed_bytes": rec.checkpoint_expiry.freed_bytes}, now)

    return change


def _less(storage: RunStorage, checkpoint: ExpiringCheckpoint) -> RunStorage:
    """The run directory's newest measurement without the deleted checkpoint's bytes (clamped: the measurement may
    predate part of it)."""
    freed = min(checkpoint.size_bytes, storage.parts.get("checkpoints", 0))
    parts = {**storage.parts, "checkpoints": storage.parts.get("checkpoints", 0) - freed}
    return storage.model_copy(
        update={"total_bytes": max(0, storage.total_bytes - freed), "parts": parts, "files": max(0, storage.files - checkpoint.files)}
    )
