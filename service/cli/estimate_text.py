"""A job's estimate (JobEstimate) for `rljob submit --estimate`, and beside the actuals (EstimateActuals) for
`rljob status` of an ended job: each figure as `expected [low-high]`, an actual with whether it fell inside."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from service.domain.records.estimate_models import ActualFigure, EstimateActuals, EstimateRange, JobEstimate
from service.domain.records.models import JobPublic


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.1f}m"
    return f"{seconds:.0f}s"


def _gib(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def range_text(figure: EstimateRange | None, unit: str = "s") -> str:
    if figure is None:
        return "-"
    if unit == "s":
        return escape(f"{_duration(figure.expected)} [{_duration(figure.low)}-{_duration(figure.high)}]")
    if unit == "$":
        return escape(f"${figure.expected:.2f} [${figure.low:.2f}-${figure.high:.2f}]")
    return escape(f"{figure.expected:.3f} [{figure.low:.3f}-{figure.high:.3f}]")


def estimate_rows(estimate: JobEstimate) -> list[tuple[str, str]]:
    position = estimate.queue_position
    place = "-" if position is None else ("admitted at once" if position == 0 else f"{position} in line")
    rows = [
        (
            "basis",
            escape(
                estimate.basis_detail if estimate.basis_detail.startswith(estimate.basis) else f"{estimate.basis}: {estimate.basis_detail}"
            ),
        ),
        ("queue", place),
        ("wait", f"{range_text(estimate.wait_s)}  [dim]{escape(estimate.wait_detail)}[/]"),
        ("run", range_text(estimate.run_s)),
        ("wall", range_text(estimate.wall_s)),
        ("chip-hours", range_text(estimate.chip_hours, "")),
        ("cost", range_text(estimate.cost_usd, "$") if estimate.cost_usd else "- (no price for this capacity)"),
        (
            "storage",
            f"{_gib(estimate.storage_bytes) if estimate.storage_bytes is not None else '-'}  [dim]{escape(estimate.storage_detail)}[/]",
        ),
    ]
    if estimate.history_job_ids:
        rows.append(("history jobs", ", ".join(estimate.history_job_ids)))
    return rows


def print_estimate(estimate: JobEstimate, console: Console) -> None:
    table = Table(show_header=False, box=None)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in estimate_rows(estimate):
        table.add_row(f"[bold]{key}[/]", value)
    console.print(table)


def _actual(figure: ActualFigure, unit: str) -> str:
    if figure.actual is None:
        return "-"
    value = {"s": _duration(figure.actual), "$": f"${figure.actual:.2f}", "B": _gib(figure.actual)}.get(unit, f"{figure.actual:.3f}")
    verdict = {True: "[green]inside[/]", False: "[red]outside[/]", None: "[dim]no range[/]"}[figure.within]
    return f"{value} ({verdict})"


def versus_rows(estimate: JobEstimate, actuals: EstimateActuals) -> list[tuple[str, str]]:
    """`rljob status` of an ended job: estimate, then actual, for each figure."""
    storage = _gib(estimate.storage_bytes) if estimate.storage_bytes is not None else "-"
    return [
        (
            "estimate vs actual",
            f"{estimate.basis} ({len(estimate.history_job_ids)} history jobs)" if estimate.basis == "history" else "formula",
        ),
        ("  wait", f"{range_text(estimate.wait_s)} -> {_actual(actuals.wait_s, 's')}"),
        ("  run", f"{range_text(estimate.run_s)} -> {_actual(actuals.run_s, 's')}"),
        ("  wall", f"{range_text(estimate.wall_s)} -> {_actual(actuals.wall_s, 's')}"),
        ("  chip-hours", f"{range_text(estimate.chip_hours, '')} -> {_actual(actuals.chip_hours, '')}"),
        ("  cost", f"{range_text(estimate.cost_usd, '$')} -> {_actual(actuals.cost_usd, '$')}"),
        ("  storage", f"{storage} -> {_actual(actuals.storage_bytes, 'B')}"),
    ]


def job_estimate_rows(job: JobPublic) -> list[tuple[str, str]]:
    """`rljob status`: an ended job's estimate beside its actuals; a job still going, its estimate in one line."""
    if job.estimate is None:
        return []
    if job.estimate_actuals is not None:
        return versus_rows(job.estimate, job.estimate_actuals)
    return [
        ("estimate", f"wall {range_text(job.estimate.wall_s)}, {range_text(job.estimate.chip_hours, '')} chip-hours ({job.estimate.basis})")
    ]
