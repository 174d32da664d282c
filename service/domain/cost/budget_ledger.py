"""Team budgets against the store: which jobs of a team may have billed time this month, what they spent
(budgets.py does the sums), and the submit-time check (budget_admission.py weighs it). Read by the submit path,
GET /v1/usage and the leader's budget loop (budget_reconciler.py); it writes nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from service.domain.records.budget_models import TeamBudget, TeamBudgetStatus
from service.domain.records.errors import InvalidRequest
from service.domain.records.estimate_models import JobEstimate
from service.domain.records.models import Caller, JobEvent, JobFilters, JobRecord
from service.domain.records.ports import Clock, JobStore
from trainer.contract import JobSpec

from .budget_admission import admission_refusal, commitment
from .budgets import month_spend, month_start, previous_month_start, team_status
from .usage import PriceTable, chips_of, family_of, price_of

log = logging.getLogger(__name__)

PAGE_SIZE = 200
MAX_MONTH_JOBS = 20_000  # a team's jobs read for one month's spend; beyond it the oldest are left out (logged)
PHASE_EVENT = "phase"


class BudgetLedger:
    def __init__(self, store: JobStore, budgets: Mapping[str, TeamBudget], prices: PriceTable) -> None:
        self.store = store
        self.budgets = dict(budgets)
        self.prices = prices

    def budget_of(self, team: str) -> TeamBudget | None:
        return self.budgets.get(team)

    def status(self, team: str, now: datetime, active: Sequence[JobRecord] | None = None) -> TeamBudgetStatus | None:
        """The team's budget this month, its spend and what is left; None when it has no budget. `active`: every
        active job (the store's list_active), when the caller has read it already."""
        budget = self.budget_of(team)
        if budget is None:
            return None
        records = self.month_jobs(team, now, active)
        start = month_start(now)
        older = [record.id for record in records if record.created_at < start]
        events: dict[str, list[JobEvent]] = {}
        for event in self.store.events_of_kind(PHASE_EVENT, older) if older else ():
            events.setdefault(event.job_id, []).append(event)
        spent = month_spend(records, events, now, self.prices)
        held = sorted(record.id for record in records if record.hold is not None and not record.phase.is_terminal())
        return team_status(team, budget, spent, now, held)

    def month_jobs(self, team: str, now: datetime, active: Sequence[JobRecord] | None = None) -> list[JobRecord]:
        """The team's jobs that may have billed time in `now`'s month: every active one, and those submitted since
        the previous month began that ended in this one (a job submitted earlier that ran past this month's start
        and ended in it is not counted: a run of over a month is not what the budget loop meets)."""
        start, oldest = month_start(now), previous_month_start(now)
        found = {record.id: record for record in (self.store.list_active() if active is None else active) if record.team == team}
        before: int | None = None
        scanned = 0
        while scanned < MAX_MONTH_JOBS:
            page = self.store.list_jobs(JobFilters(team=team), before_pk=before, limit=PAGE_SIZE)
            for _, record in page:
                if record.created_at < oldest:
                    return list(found.values())
                if record.id not in found and (record.finished_at is None or record.finished_at >= start):
                    found[record.id] = record
            scanned += len(page)
            if len(page) < PAGE_SIZE:
                return list(found.values())
            before = page[-1][0]
        log.warning("team %s has more than %d jobs since %s: the oldest are left out of its budget", team, MAX_MONTH_JOBS, oldest)
        return list(found.values())

    def admission(
        self, caller: Caller, spec: JobSpec, estimate: JobEstimate | None, clock: Clock, *, override: bool = False
    ) -> Callable[[], None] | None:
        """The budget check a submission must pass, to run inside the transaction that stores it, after the team's
        admission lock (submission.py); None when no budget applies: the team has none, a cpu job, or an admin's
        override. InvalidRequest (422) now for an override asked by anyone but an admin."""
        if override and not caller.admin:
            raise InvalidRequest(
                ("query", "override_budget"),
                f"only an admin's token may override a team budget; your token is team {caller.team}'s: leave override_budget out",
            )
        team, chips = spec.team or caller.team, chips_of(spec.hardware.accelerator)
        if override or chips == 0 or self.budget_of(team) is None:
            return None
        family = family_of(spec.hardware.accelerator)
        unpriced = tuple(kind for kind in spec.hardware.capacities if price_of(self.prices, family, kind) is None)
        return lambda: self.check_admission(team, estimate, chips, clock(), unpriced=unpriced)

    def check_admission(self, team: str, estimate: JobEstimate | None, chips: int, now: datetime, *, unpriced: Sequence[str] = ()) -> None:
        """InvalidRequest (422) for a job that would take its team past a budget (budget_admission.py), naming the
        budget, the spend, what is committed and the job's estimate. Reads what is committed now: its caller holds
        the team's admission lock, so no other admission of the team commits meanwhile."""
        active = self.store.list_active()
        status = self.status(team, now, active)
        if status is None:
            return
        held = commitment(status.spent, (record for record in active if record.team == team), now, self.prices)
        refused = admission_refusal(status, held, estimate, chips, unpriced=unpriced)
        if refused is not None:
            name, message = refused
            raise InvalidRequest(("body", "budget", name), message)
