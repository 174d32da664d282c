"""The leader's `rljob-budgets` loop: team budgets enforced on running jobs.

Each pass recomputes every team's spend this month from what is stored (budget_ledger.py), so a restarted
service, or a replica that becomes leader, finishes whatever a killed one started:
- a team at or over a budget: each of its active TPU jobs (a cpu job costs nothing) gets a hold (JobRecord.hold,
  logged as a `hold` event) and its workload is stopped the way a preemption stops it, through the launcher's stop
  (SIGTERM: the trainer saves a checkpoint at its step and exits 75). It stays RUNNING, billed, until its workload is
  seen gone; the observation policy then makes it QUEUED with queue reason BudgetExhausted (no resume spent). A job
  never handed over is parked so at once;
- a team with room again (its budget raised and the service restarted, or the month turned), or no budget any
  more: each held job whose workload is gone has its hold cleared (a `hold` event) and is launched again; the
  trainer resumes from its last checkpoint (stage markers and the actor checkpoints in the same run directory).
  A job still stopping keeps its hold until it is seen gone. A kill between the release and the launch leaves a
  QUEUED job with no hold, which recovery launches like any other.
Held jobs are launched by nothing else: JobService.launch leaves a held QUEUED job where it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from service.domain.cost.budget_ledger import BudgetLedger
from service.domain.cost.budgets import hold_message, release_message
from service.domain.cost.usage import chips_of
from service.domain.job_service import JobService
from service.domain.record_writes import write_held
from service.domain.records.budget_models import JobHold, TeamBudgetStatus
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import Clock, JobStore, JobTx

log = logging.getLogger(__name__)

HOLDABLE: frozenset[JobPhase] = frozenset({JobPhase.QUEUED, JobPhase.LAUNCHING, JobPhase.RUNNING})  # not CANCELLING: ending anyway


def _hold(hold: JobHold) -> Callable[[JobRecord, JobTx], Any]:
    def change(rec: JobRecord, tx: JobTx) -> None:
        if rec.hold is not None or rec.phase not in HOLDABLE:
            return
        rec.hold = hold
        stopping = rec.phase is not JobPhase.QUEUED or rec.handed_over
        rec.message = f"stopping for its budget: {hold.message}" if stopping else hold.message
        tx.append_event(rec, "hold", {"held": True, "reason": hold.reason, "message": hold.message}, hold.since)
        if not stopping:
            write_held(tx, rec, lambda: hold.since)

    return change


def _park(rec: JobRecord, tx: JobTx) -> None:
    if rec.hold is not None and rec.phase is JobPhase.QUEUED and not rec.handed_over:
        write_held(tx, rec, lambda: rec.hold.since if rec.hold else rec.updated_at)


def _release(message: str, now: datetime) -> Callable[[JobRecord, JobTx], Any]:
    def change(rec: JobRecord, tx: JobTx) -> None:
        if rec.hold is None or rec.phase is not JobPhase.QUEUED or rec.handed_over:
            return  # not held, or still stopping: looked at again next pass
        rec.hold, rec.queue, rec.message = None, None, message
        tx.append_event(rec, "hold", {"held": False, "message": message}, now)

    return change


class BudgetReconciler:
    """Reads the active jobs from `store` and each team's spend from `ledger`; holds, stops, releases and launches
    through `jobs` (write_as_leader, stop_workload, launch)."""

    def __init__(self, jobs: JobService, store: JobStore, ledger: BudgetLedger, *, clock: Clock) -> None:
        self.jobs = jobs
        self.store = store
        self.ledger = ledger
        self.clock = clock
        self._stops_sent: set[str] = set()  # held jobs whose stop this process sent (a new term sends again)

    def restart(self) -> None:
        self._stops_sent.clear()

    def reconcile_once(self) -> None:
        if not self.jobs.leads():
            return
        now = self.clock()
        active = self.store.list_active()
        teams = set(self.ledger.budgets) | {record.team for record in active if record.hold is not None}
        for team in sorted(teams):
            try:
                mine = [record for record in active if record.team == team]
                self.reconcile_team(team, self.ledger.status(team, now, active), mine, now)
            except Exception:  # one team's trouble must not keep the others' budgets from being enforced
                log.exception("enforcing team %s's budget failed; tried again next pass", team)
        self._stops_sent &= {record.id for record in active}

    def reconcile_team(self, team: str, status: TeamBudgetStatus | None, active: Sequence[JobRecord], now: datetime) -> None:
        spent = status is not None and bool(status.exhausted)
        for record in active:
            if chips_of(record.hardware.accelerator) == 0:
                continue
            if spent and status is not None and record.hold is None and record.phase in HOLDABLE:
                hold = JobHold(reason="budget", since=now, message=hold_message(status, started=record.handed_over))
                record = self.jobs.write_as_leader(record.id, _hold(hold))
                log.info("holding %s: %s", record.id, hold.message)
            if record.hold is None:
                continue
            if record.phase is JobPhase.QUEUED and not record.handed_over:
                if spent:
                    self.jobs.write_as_leader(record.id, _park)  # parked already: no write
                else:
                    self._relaunch(record, release_message(status), now)
            elif record.phase in HOLDABLE:
                self._stop(record)

    def _stop(self, record: JobRecord) -> None:
        """The launcher's stop, once per term: the workload's end comes back as an observation (Decision.HOLD)."""
        if record.id in self._stops_sent:
            return
        self._stops_sent.add(record.id)
        log.info("stopping %s for its team's budget", record.id)
        self.jobs.stop_workload(record.id)

    def _relaunch(self, record: JobRecord, message: str, now: datetime) -> None:
        released = self.jobs.write_as_leader(record.id, _release(message, now))
        if released.hold is None and released.phase is JobPhase.QUEUED:
            log.info("releasing %s: %s", record.id, message)
            self.jobs.launch(record.id)
