"""Admission against a team's budget, the pure part: what the team is committed to this month and the verdict on one
more job. budget_ledger.py reads the jobs; submission.py runs the check and the job's insert as one unit per team, so
submissions made at the same moment are weighed one after another, each against the ones admitted before it.

- A team's committed amount is what it spent this month (budgets.month_spend) plus, for each of its queued, launching
  and running TPU jobs, what that job may still bill: its estimate's upper bound less what it has billed so far,
  never below 0 (chip-hours and dollars each). A held job is QUEUED and counts: it comes back when the budget has
  room. A CANCELLING job is stopping: only what it bills counts, through the spend.
- A job stored without an estimate commits nothing beyond what it bills (the budget loop holds it once the spend
  reaches the budget); an estimate with no dollar figure (the price table has no price) commits no dollars.
- A new TPU job is admitted while the committed amount plus its own estimate's upper bound stays within each budget:
  so long as every job ends within its estimate's range, the jobs admitted cannot take the team past its budget. A
  new job without an estimate is refused only once the committed amount has reached the budget. A cpu job costs
  nothing: never refused, never counted.
- An admin's override (budget_ledger.py) skips the check; once stored, the job commits its upper bound like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from service.domain.records.budget_models import BudgetAmounts, BudgetName, TeamBudgetStatus
from service.domain.records.estimate_models import EstimateRange, JobEstimate
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase

from .budgets import BUDGET_SETTING, amount_text
from .usage import PriceTable, chips_of, job_usage

# The phases whose jobs still have their estimate ahead of them. Not CANCELLING: it is being stopped.
COMMITTING: frozenset[JobPhase] = frozenset({JobPhase.QUEUED, JobPhase.LAUNCHING, JobPhase.RUNNING})
_DIGITS = 6
_BUDGETS: tuple[BudgetName, ...] = ("chip_hours", "usd")


@dataclass(frozen=True)
class Commitment:
    """A team's spend this month and what its active TPU jobs may still bill (`pending`, from `jobs` jobs)."""

    spent: BudgetAmounts
    pending: BudgetAmounts
    jobs: int

    def committed(self, name: BudgetName) -> float:
        return round(_of(self.spent, name) + _of(self.pending, name), _DIGITS)


def _of(amounts: BudgetAmounts, name: BudgetName) -> float:
    return amounts.chip_hours if name == "chip_hours" else amounts.usd


def _figure(estimate: JobEstimate, name: BudgetName) -> EstimateRange | None:
    return estimate.chip_hours if name == "chip_hours" else estimate.cost_usd


def still_to_bill(record: JobRecord, now: datetime, prices: PriceTable) -> BudgetAmounts | None:
    """What an active TPU job may still bill by its estimate's upper bound; None when it commits nothing more."""
    estimate = record.estimate
    if estimate is None or record.phase not in COMMITTING or chips_of(record.hardware.accelerator) == 0:
        return None
    usage = job_usage(record, now, prices)
    usd = 0.0 if estimate.cost_usd is None else max(0.0, estimate.cost_usd.high - (usage.cost_usd or 0.0))
    return BudgetAmounts(chip_hours=max(0.0, estimate.chip_hours.high - usage.billed_chip_hours), usd=usd)


def commitment(spent: BudgetAmounts, active: Iterable[JobRecord], now: datetime, prices: PriceTable) -> Commitment:
    """`active`: the team's active jobs (the others commit nothing)."""
    chip_hours = usd = 0.0
    jobs = 0
    for record in active:
        left = still_to_bill(record, now, prices)
        if left is not None:
            chip_hours, usd, jobs = chip_hours + left.chip_hours, usd + left.usd, jobs + 1
    return Commitment(spent=spent, pending=BudgetAmounts(chip_hours=round(chip_hours, _DIGITS), usd=round(usd, _DIGITS)), jobs=jobs)


def admission_refusal(
    status: TeamBudgetStatus, held: Commitment, estimate: JobEstimate | None, chips: int, *, unpriced: Sequence[str] = ()
) -> tuple[BudgetName, str] | None:
    """Which budget refuses one more job, and why in numbers; None when it fits. `status`: the team's budget this month;
    `unpriced`: the kinds of capacity the job may land on that the price table has no price for."""
    if chips == 0:
        return None
    for name in _BUDGETS:
        ceiling = status.budget.chip_hours if name == "chip_hours" else status.budget.usd
        if ceiling is None:
            continue
        left = round(max(0.0, ceiling - held.committed(name)), _DIGITS)
        if estimate is None:
            if left > 0:
                continue
            this_job = "this job was not estimated, and nothing is left"
        else:
            figure = _figure(estimate, name)
            if name == "usd" and (figure is None or unpriced):
                # No price for a capacity it may run on: admitted, it could spend dollars no budget counts (usage
                # prices a job only where every capacity it ran on has a price).
                which = f" ({', '.join(unpriced)})" if unpriced else ""
                return name, (
                    f"team {status.team} has a dollar budget, and rljob has no price for this job's accelerator and "
                    f"capacity{which} (its estimate and `rljob usage` say 'no price'), so the budget cannot bound it. An "
                    "admin adds the price (RLJOB_USAGE_PRICES_USD_PER_CHIP_HOUR) or submits it anyway with "
                    "override_budget=true (rljob submit --override-budget)"
                )
            if figure is None or figure.high <= left:
                continue
            this_job = (
                f"this job's estimate is {amount_text(name, figure.expected)} ({amount_text(name, figure.low)} to "
                f"{amount_text(name, figure.high)}): up to {amount_text(name, figure.high)}, more than the "
                f"{amount_text(name, left)} left"
            )
        return name, f"{_committed_text(status, held, name, ceiling)}; {this_job}. {_what_to_do()}"
    return None


def _committed_text(status: TeamBudgetStatus, held: Commitment, name: BudgetName, ceiling: float) -> str:
    kind = "chip-hour" if name == "chip_hours" else "dollar"
    jobs = f"{held.jobs} queued or running job{'s' * (held.jobs != 1)}"
    return (
        f"team {status.team}'s {kind} budget for {status.month} (UTC) is {amount_text(name, ceiling)}, and "
        f"{amount_text(name, held.committed(name))} of it is committed: {amount_text(name, _of(held.spent, name))} spent "
        f"and up to {amount_text(name, _of(held.pending, name))} more for its {jobs} (each one's estimate's upper "
        "bound less what it has billed)"
    )


def _what_to_do() -> str:
    return (
        "Wait for the team's jobs to end or for the next month, cancel a queued job, ask an admin to raise the budget "
        f"({BUDGET_SETTING}), or an admin may submit it anyway with override_budget=true (rljob submit --override-budget)"
    )
