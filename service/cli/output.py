"""How the CLI prints: the two consoles, `-o json|yaml|name` and a job's status table, shared by
every command module."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


class OutputFormat(enum.StrEnum):
    """Machine-readable output; without `-o` a command prints its table for people."""

    JSON = "json"  # the API's object(s), as the service returned them
    YAML = "yaml"  # the same, as YAML
    NAME = "name"  # one id per line, for `xargs` and shell loops


OutputOption = Annotated[
    OutputFormat | None,
    typer.Option("--output", "-o", case_sensitive=False, show_default=False,
                 help="json or yaml: the API's object(s); name: one id per line (default: a table)"),
]  # fmt: skip


def emit(obj: Any, output: OutputFormat, ids: Iterable[str]) -> None:
    """Print `obj` (json, yaml) or `ids` (name) on stdout, plain: no colour, no wrapping."""
    if output is OutputFormat.NAME:
        for item_id in ids:
            typer.echo(item_id)
    elif output is OutputFormat.JSON:
        typer.echo(json.dumps(obj, indent=2))
    else:
        typer.echo(yaml.safe_dump(obj, sort_keys=False, allow_unicode=True), nl=False)


def fmt_metric(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}"


def _artifact_text(artifact: dict[str, Any]) -> str:
    details = []
    if artifact.get("size_bytes") is not None:
        details.append(f"{artifact['size_bytes']:,} bytes")
    if (artifact.get("file_count") or 0) > 1:
        details.append(f"{artifact['file_count']} files")
    if artifact.get("checksum"):
        details.append(artifact["checksum"])
    uri: str = artifact["uri"]
    return uri + (f" ({', '.join(details)})" if details else "")


# Colours for the learning-health verdicts (service/domain/learning_health.py).
_HEALTH_STYLE = {"learning": "green", "no-signal": "yellow", "stalled": "yellow", "diverging": "red"}


def health_text(verdict: str | None) -> str:
    if not verdict:
        return "-"
    return f"[{_HEALTH_STYLE.get(verdict, 'default')}]{escape(verdict)}[/]"


def queue_text(job: dict[str, Any]) -> str:
    """A QUEUED job's place in its backend's queue for the list: `#2 TeamJobLimit`; `-` when none."""
    queue = job.get("queue")
    if not queue:
        return "-"
    place = f"#{queue['position']} " if queue.get("position") is not None else ""
    return f"{place}{queue['reason']}"


def _queue_line(queue: dict[str, Any]) -> str:
    place = f"#{queue['position']} in " if queue.get("position") is not None else "in "
    words = f" ({queue['message']})" if queue.get("message") else ""
    return escape(f"{place}{queue['name']}: {queue['reason']}{words}")  # the backend's words: not markup


def usage_text(usage: dict[str, Any]) -> str:
    """One line of a job's JobPublic.usage: what is charged, then the time that is not."""
    phases = usage["phases"]
    waited_h = (phases["QUEUED"]["seconds"] + phases["LAUNCHING"]["seconds"]) / 3600
    cost = "no price" if usage["cost_usd"] is None else f"${usage['cost_usd']:,.2f}"
    return (f"{usage['billed_chip_hours']:,.2f} billed chip-hours on {usage['chips']} chip(s) "
            f"({usage['accelerator']} {usage['capacity']}), {cost}; waited {waited_h:,.2f} h (not charged)")  # fmt: skip


def print_job(job: dict[str, Any]) -> None:
    table = Table(show_header=False, box=None)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")  # paths and messages in full: users copy them
    rows = [
        ("id", job["id"]), ("name", job["name"]), ("team", job["team"]),
        ("submitted by", job.get("submitted_by") or "-"), ("phase", job["phase"]),
        *([("queue", _queue_line(job["queue"]))] if job.get("queue") else []),
        ("message", job["message"]), ("stage", job.get("stage") or "-"),
        ("step", f"{job['step']}/{job['total_steps']}" if job.get("total_steps") else "-"),
        ("eta", f"{job['eta_s']:.0f}s" if job.get("eta_s") is not None else "-"),
        ("runs on", f"{job.get('backend') or '-'} {job.get('object_name') or ''}".strip()),
        ("run dir", job["run_uri"]),
    ]  # fmt: skip
    metrics = job.get("metrics") or {}
    rows.append(("metrics", "  ".join(f"{k}={fmt_metric(v)}" for k, v in metrics.items())))
    fit = job.get("fit_estimate")
    rows.append(("memory", f"{fit['verdict']}: {escape(fit['message'])}" if fit else "-"))
    health = job.get("health")
    rows.append(("health", f"{health_text(health['verdict'])}: {escape(health['message'])}" if health else "-"))
    if job.get("usage"):
        rows.append(("usage", usage_text(job["usage"])))
    for stage, times in (job.get("stage_times") or {}).items():
        rows.append((f"stage {stage}", f"{times.get('started_at') or '-'} -> {times.get('finished_at') or '...'}"))
    for artifact in job.get("artifacts") or []:
        rows.append((f"artifact {artifact['name']}", _artifact_text(artifact)))
    if job.get("failure"):
        rows.append(("failure", f"[red]{job['failure'].get('reason')}[/]: {job['failure'].get('message')}"))
    for key, value in rows:
        table.add_row(f"[bold]{key}[/]", str(value))
    console.print(table)
