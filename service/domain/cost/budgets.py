"""Team budgets, the pure part: a team's spend in a calendar month, what is left, and the verdicts read from them
(a team's jobs held, held jobs released). budget_ledger.py reads the jobs; the leader's loop (budget_reconciler.py)
acts on these verdicts, and the submit check (budget_admission.py) weighs a new job against the spend.

The month is the calendar month in UTC. A job's spend in it is the billed time it accrued in it (RUNNING and
CANCELLING, as usage.py bills): a job that spans the month's start counts in each month the part it ran in it. A job
submitted in the month counts whole; for one submitted before, the billed intervals come from its `phase` events.
Its dollars are its cost (usage.py, each kind of capacity at its price) in proportion to the share of its billed
time in the month; billed time with no price counts nothing in dollars.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from service.domain.records.budget_models import BudgetAmounts, BudgetName, TeamBudget, TeamBudgetStatus
from service.domain.records.models import JobEvent, JobRecord

from .job_clock import phase_seconds, usage_as_of
from .placement import BILLED_PHASES
from .usage import PriceTable, chips_of, job_usage

_BILLED = frozenset(phase.value for phase in BILLED_PHASES)
_DIGITS = 6
BUDGET_SETTING = "RLJOB_TEAM_BUDGETS"
QUEUE_REASON = "BudgetExhausted"


def month_start(now: datetime) -> datetime:
    """The first instant of `now`'s calendar month in UTC."""
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def month_label(now: datetime) -> str:
    return month_start(now).strftime("%Y-%m")


def previous_month_start(now: datetime) -> datetime:
    start = month_start(now)
    return start.replace(year=start.year - 1, month=12) if start.month == 1 else start.replace(month=start.month - 1)


def billed_seconds_since(record: JobRecord, phase_events: Sequence[JobEvent], start: datetime, now: datetime) -> float:
    """Seconds of billed time the job accrued from `start` to `now`. A job created at or after `start` accrued all
    of it then; an older one's billed intervals are read from its `phase` events (each says the phase entered and
    when), the last one open until the job ended or `now`."""
    by_phase = phase_seconds(record, now)
    total = sum(by_phase[name] for name in _BILLED)
    if record.created_at >= start or total <= 0:
        return total
    end = usage_as_of(record, now)
    if end <= start:
        return 0.0
    billed, entered, since = 0.0, None, None
    for event in sorted(phase_events, key=lambda e: e.seq):
        if event.kind != "phase" or not isinstance(event.data.get("phase"), str):
            continue
        if entered in _BILLED and since is not None:
            billed += _overlap_s(since, event.time, start, end)
        entered, since = event.data["phase"], event.time
    if entered in _BILLED and since is not None:
        billed += _overlap_s(since, end, start, end)
    return min(billed, total)


def _overlap_s(a: datetime, b: datetime, start: datetime, end: datetime) -> float:
    return max(0.0, (min(b, end) - max(a, start)).total_seconds())


def month_spend(
    records: Iterable[JobRecord], phase_events: Mapping[str, Sequence[JobEvent]], now: datetime, prices: PriceTable
) -> BudgetAmounts:
    """What these jobs billed in `now`'s month (`phase_events`: by job id, needed for jobs created before it)."""
    start = month_start(now)
    chip_hours = usd = 0.0
    for record in records:
        chips = chips_of(record.hardware.accelerator)
        if chips == 0:
            continue  # a cpu job holds no chips and costs nothing
        seconds = billed_seconds_since(record, phase_events.get(record.id, ()), start, now)
        if seconds <= 0:
            continue
        chip_hours += chips * seconds / 3600
        usage = job_usage(record, now, prices)
        billed_s = usage.billed_chip_hours * 3600 / chips
        if usage.cost_usd is not None and billed_s > 0:
            usd += usage.cost_usd * min(1.0, seconds / billed_s)
    return BudgetAmounts(chip_hours=round(chip_hours, _DIGITS), usd=round(usd, _DIGITS))


def exhausted(budget: TeamBudget, spent: BudgetAmounts) -> list[BudgetName]:
    """The budgets the spend has reached: at or over."""
    found: list[BudgetName] = []
    if budget.chip_hours is not None and spent.chip_hours >= budget.chip_hours:
        found.append("chip_hours")
    if budget.usd is not None and spent.usd >= budget.usd:
        found.append("usd")
    return found


def team_status(team: str, budget: TeamBudget, spent: BudgetAmounts, now: datetime, held: Sequence[str] = ()) -> TeamBudgetStatus:
    return TeamBudgetStatus(
        team=team,
        month=month_label(now),
        budget=budget,
        spent=spent,
        left_chip_hours=None if budget.chip_hours is None else round(max(0.0, budget.chip_hours - spent.chip_hours), _DIGITS),
        left_usd=None if budget.usd is None else round(max(0.0, budget.usd - spent.usd), _DIGITS),
        exhausted=exhausted(budget, spent),
        held_jobs=list(held),
    )


def amount_text(name: BudgetName, value: float) -> str:
    return f"{value:,.2f} chip-hours" if name == "chip_hours" else f"${value:,.2f}"


def _budget_text(status: TeamBudgetStatus, name: BudgetName) -> str:
    ceiling = status.budget.chip_hours if name == "chip_hours" else status.budget.usd
    spent = status.spent.chip_hours if name == "chip_hours" else status.spent.usd
    kind = "chip-hour" if name == "chip_hours" else "dollar"
    return (
        f"team {status.team}'s {kind} budget for {status.month} (UTC) is {amount_text(name, ceiling or 0.0)}, "
        f"{amount_text(name, spent)} spent"
    )


def hold_message(status: TeamBudgetStatus, *, started: bool) -> str:
    """Why a team's job is held, what happens to it now and next, and what its owner can do: a held job's queue
    message is all its owner sees of the hold. `started`: it was handed to a launcher (it has a trainer to stop)."""
    spent = "; ".join(_budget_text(status, name) for name in status.exhausted)
    now = (
        "Its trainer is stopped with a checkpoint at its step, as a preemption stops it, and the job waits in the queue; "
        "it resumes from that checkpoint"
        if started
        else "It has not started, and waits in the queue; it starts"
    )
    return (
        f"held: {spent}. {now} by itself when the budget has room again: on {next_month_label(status.month)}-01 (UTC), "
        f"or as soon as an admin raises {BUDGET_SETTING} and restarts the service. Nothing else starts it; "
        "to give up on it instead, cancel it (rljob cancel JOB_ID)"
    )


def next_month_label(month: str) -> str:
    """The calendar month after `month` ("2030-12" -> "2031-01")."""
    year, number = (int(part) for part in month.split("-"))
    return f"{year + number // 12:04d}-{number % 12 + 1:02d}"


def release_message(status: TeamBudgetStatus | None) -> str:
    if status is None:
        return "released: the team has no budget any more; relaunching from its last checkpoint"
    return f"released: team {status.team}'s budget for {status.month} has room again; relaunching from its last checkpoint"
