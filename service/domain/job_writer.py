"""JobWriter: the one write path of job state, held by the job service and the observation intake alike.

`write` takes this process's write lock, re-reads the record inside a store transaction (SELECT ... FOR UPDATE on
PostgreSQL), applies the change, re-judges the job's learning health (a `health` entry when the verdict changed,
job_health.py) and commits. Re-reading first is what keeps a late observation or a duplicate progress event from
undoing a terminal phase.

A write of the leader's work (`as_leader`: launches, observations, progress) checks this replica's leadership term in
its own transaction once the replica has led (fencing, service/leadership.py); a refused one calls `on_fenced` and
raises LeaderFenced. After a commit that changed a job with a workload (outside the lock), the leader's status mirror
is offered the new phase/stage/progress (status_mirror.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from service.domain.health.job_health import log_health_change
from service.domain.health.learning_health import HealthPolicy
from service.domain.records.errors import JobNotFound, LeaderFenced
from service.domain.records.models import JobRecord
from service.domain.records.ports import Clock, JobStore, JobTx

from .status_mirror import MirroredStatus, StatusMirrorWorker
from .write_wait import held_within


def _leads_always() -> bool:
    return True


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class WriteRules:
    """How this replica writes: whether it leads now (only the leader talks to the launcher; another replica stores
    the job or the cancel, and the leader's take-over carries it out), what a write refused by a newer term does
    (service/leadership.py), and how long an API request's write waits for the locks (None: as long as it takes,
    write_wait.py)."""

    leads: Callable[[], bool] = _leads_always
    on_fenced: Callable[[], None] = _nothing
    request_write_wait_s: float | None = None


class JobWriter:
    def __init__(
        self,
        store: JobStore,
        *,
        clock: Clock,
        health_policy: HealthPolicy,
        rules: WriteRules = WriteRules(),
        notify: Callable[[], None] = _nothing,
        status_mirror: StatusMirrorWorker | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.health_policy = health_policy
        self.rules = rules
        self._notify = notify
        self.status_mirror = status_mirror
        self.lock = threading.RLock()  # serialises this process's writes (write_wait.py bounds an API write's wait)
        # Fencing (service/leadership.py): once a replica has led, every write it makes as leader checks its term in
        # the write's own transaction.
        self._fencing = False
        self._term: int | None = None

    def leads(self) -> bool:
        return self.rules.leads()

    def begin_term(self, term: int) -> None:
        """This replica leads for `term`: its leader writes carry it from now on."""
        self._fencing, self._term = True, term

    def end_term(self) -> None:
        """This replica no longer leads: a leader write still under way here is refused."""
        self._term = None

    def write_as_leader(self, job_id: str, change: Callable[[JobRecord, JobTx], Any]) -> JobRecord:
        """A change of the leader's own work (launches, observations, progress, the rounds' writes)."""
        return self.write(job_id, change)

    def write_for_request(self, job_id: str, change: Callable[[JobRecord, JobTx], Any]) -> JobRecord:
        """An API request's change, which any replica may write, within the request's wait (write_wait.py)."""
        return self.write(job_id, change, as_leader=False, wait_s=self.rules.request_write_wait_s)

    def write(
        self, job_id: str, change: Callable[[JobRecord, JobTx], Any], *, as_leader: bool = True, wait_s: float | None = None
    ) -> JobRecord:
        """The one write path. `as_leader`: a write of the leader's work, refused with LeaderFenced once another
        replica has taken a newer term. `wait_s`: see write_wait.py."""
        try:
            return self._write(job_id, change, fenced=as_leader and self._fencing, wait_s=wait_s)
        except LeaderFenced:
            self.rules.on_fenced()
            raise

    def _write(self, job_id: str, change: Callable[[JobRecord, JobTx], Any], *, fenced: bool, wait_s: float | None) -> JobRecord:
        with held_within(self.lock, wait_s) as database_wait_s:
            with self.store.transaction(wait_s=database_wait_s) as tx:
                if fenced:
                    tx.require_term(self._term)
                record = tx.get(job_id, for_update=True)
                if record is None:
                    raise JobNotFound(job_id)
                before = (record.phase, record.last_event_seq)
                change(record, tx)
                log_health_change(record, tx, self.clock(), self.health_policy)
                changed = (record.phase, record.last_event_seq) != before
                record.updated_at = self.clock() if changed else record.updated_at
                tx.update(record)
        if changed:
            self._notify()
            # The leader's mirror only: a follower's would hold statuses that are stale by the time it leads.
            if self.status_mirror is not None and record.object_name is not None and self.leads():
                self.status_mirror.offer(record.id, MirroredStatus.of(record))  # committed: safe to show
        return record
