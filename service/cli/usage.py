"""`rljob usage [--team T] [--since D] [-o json|yaml|name]`: a team's chip-hours, storage GiB-months and
cost (GET /v1/usage)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from service.domain.records.budget_models import TeamBudgetStatus
from service.domain.records.usage_models import UsageGroup, UsagePublic, UsageSum

from .client import handles_errors
from .output import OutputOption, api_time, console, emit


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _gib_months(value: float | None) -> str:
    """Two decimals; a small amount (a short run's directory) in two significant digits rather than 0.00."""
    return "-" if value is None else f"{value:.2g}" if 0 < value < 0.01 else f"{value:,.2f}"


def _usd(value: float | None) -> str:
    return "no price" if value is None else f"${value:,.2f}"


def _slice(accelerator: str, capacity: str) -> str:
    return f"{accelerator} {capacity}"


def _sum_row(label: list[str], amounts: UsageSum) -> list[str]:
    waiting = amounts.chip_hours["QUEUED"] + amounts.chip_hours["LAUNCHING"]
    return [
        *label,
        str(amounts.jobs),
        _hours(waiting),
        _hours(amounts.billed_chip_hours),
        _usd(amounts.cost_usd),
        _gib_months(amounts.storage_gib_months),
        _usd(amounts.storage_cost_usd),
    ]


def _table(title: str, left: tuple[str, ...], right: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)  # fits 80 columns
    for name in left:
        table.add_column(name, overflow="fold", min_width=15 if name == "ID" else None)  # ids are copied: whole
    for name in right:
        table.add_column(name, justify="right")
    return table


def _parts_by_team(groups: list[UsageGroup]) -> dict[str, dict[str, float]]:
    teams: dict[str, dict[str, float]] = {}
    for group in groups:
        parts = teams.setdefault(group.team, {})
        for name, hours in group.chip_hours_by_part.items():
            parts[name] = parts.get(name, 0.0) + hours
    return teams


def print_parts(groups: list[UsageGroup]) -> None:
    """Where each team's chip-hours went (the goodput parts), largest first; cpu jobs hold no chips."""
    table = _table("chip-hours by part (where the time went)", ("TEAM", "PART"), ("CHIP-H", "SHARE"))
    for team, parts in sorted(_parts_by_team(groups).items()):
        total = sum(parts.values())
        if total <= 0:
            continue
        for name, hours in sorted(parts.items(), key=lambda item: -item[1]):
            if hours > 0:
                table.add_row(team, name, _hours(hours), f"{hours / total:.0%}")
        table.add_section()
    if table.row_count:
        console.print(table)
    else:
        console.print("[dim]chip-hours by part: none to split (cpu jobs hold no chips; rljob status shows their goodput)[/]")


def print_budgets(budgets: list[TeamBudgetStatus]) -> None:
    """Each team's monthly budget: what it is, spent this month, left; a spent one says its TPU jobs are held."""
    table = _table("monthly budgets (calendar month, UTC)", ("TEAM", "MONTH"), ("CHIP-H", "SPENT", "LEFT", "USD", "SPENT $", "LEFT $"))
    for status in budgets:
        held = f" [red]spent: {len(status.held_jobs)} job(s) held[/]" if status.exhausted else ""
        table.add_row(
            status.team + held,
            status.month,
            _hours(status.budget.chip_hours),
            _hours(status.spent.chip_hours),
            _hours(status.left_chip_hours),
            _usd(status.budget.usd),
            _usd(status.spent.usd),
            _usd(status.left_usd),
        )
    console.print(table)


def print_usage(report: UsagePublic) -> None:
    scope = f"team {report.team}" if report.team else "every team"
    console.print(f"[bold]usage of {escape(scope)}[/]: jobs submitted since {api_time(report.since)} (as of {api_time(report.as_of)})")
    groups = _table(
        "chip-hours and storage by team and slice", ("TEAM", "SLICE"), ("JOBS", "WAITING", "BILLED", "COST", "GIB-MO", "STORED $")
    )
    for group in report.groups:
        groups.add_row(*_sum_row([group.team, _slice(group.accelerator, group.capacity)], group))
    groups.add_section()
    groups.add_row(*_sum_row(["[bold]total[/]", ""], report.total))
    console.print(groups)
    print_parts(report.groups)
    if report.budgets:
        print_budgets(report.budgets)
    jobs = _table("jobs (-o json: every phase and stage)", ("ID", "NAME", "PHASE", "SLICE"), ("RUN H", "BILLED", "COST", "GIB-MO"))
    for row in report.jobs:
        usage, phases = row.usage, row.usage.phases
        ran_s = phases["RUNNING"].seconds + phases["CANCELLING"].seconds
        jobs.add_row(
            row.job_id,
            row.name,
            row.phase,
            _slice(usage.accelerator, usage.capacity),
            _hours(ran_s / 3600),
            _hours(usage.billed_chip_hours),
            _usd(usage.cost_usd),
            _gib_months(row.storage.gib_months),
        )
    console.print(jobs)
    console.print(
        "[dim]WAITING: queued and launching chip-hours, shown, not charged; BILLED: running and "
        "cancelling chip-hours; COST at the service's list prices (RLJOB_USAGE_PRICES_USD_PER_CHIP_HOUR); "
        "GIB-MO: run-directory GiB-months, each job's measured size up to now (ended jobs' files stay "
        f"until deleted); STORED $ at ${report.storage_price_usd_per_gib_month:.3f}/GiB-month "
        "(RLJOB_USAGE_STORAGE_PRICE_USD_PER_GIB_MONTH)[/]"
    )
    if report.total.unpriced_chip_hours:
        console.print(
            f"[yellow]{_hours(report.total.unpriced_chip_hours)} billed chip-hours have no price in the table and are not in the cost[/]"
        )
    if report.truncated:
        console.print("[yellow]more jobs matched than one report holds: use a later --since[/]")


@handles_errors
def usage(
    ctx: typer.Context,
    team: Annotated[str | None, typer.Option(help="admins: one team (default every team); others see their own")] = None,
    since: Annotated[
        str | None, typer.Option(help="ISO 8601 date or time, e.g. 2026-11-01 (UTC unless it names a zone); default 30 days ago")
    ] = None,
    output: OutputOption = None,
) -> None:
    """Chip-hours, storage GiB-months and cost of the jobs submitted since a date: totals and one row per job."""
    params = {key: value for key, value in (("team", team), ("since", since)) if value}
    report = ctx.obj.client().usage(params)
    if output:
        emit(report.model_dump(mode="json"), output, [row.job_id for row in report.jobs])
        return
    print_usage(report)
