"""How the CLI prints: the two consoles, `-o json|yaml|name` and a job's status table, shared by
every command module. A job's evaluations are written as the dashboard writes them (whole percents,
95% intervals in brackets; dashboard/src/evaltext.js), with ASCII dashes and arrows."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .goodput_text import goodput_text
from .storage_text import storage_text

console = Console()
err_console = Console(stderr=True)


class OutputFormat(enum.StrEnum):
    """Machine-readable output; without `-o` a command prints its table for people."""

    JSON = "json"  # the API's object(s), as the service returned them
    YAML = "yaml"  # the same, as YAML
    NAME = "name"  # one id per line, for `xargs` and shell loops


OutputOption = Annotated[
    OutputFormat | None,
    typer.Option(
        "--output",
        "-o",
        case_sensitive=False,
        show_default=False,
        help="json or yaml: the API's object(s); name: one id per line (default: a table)",
    ),
]


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
_HEALTH_STYLE = {
    "improving": "green",
    "flat": "default",
    "signal": "cyan",  # evidence of learning, none, too early to tell
    "no-signal": "yellow",
    "stalled": "yellow",
    "collapsed": "red",
    "diverging": "red",
}


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
    return (
        f"{usage['billed_chip_hours']:,.2f} billed chip-hours on {usage['chips']} chip(s) "
        f"({usage['accelerator']} {usage['capacity']}), {cost}; waited {waited_h:,.2f} h (not charged)"
    )


def whole_percent(fraction: float) -> int:
    """0.34 -> 34, half up like the dashboard's Math.round (Python's round() takes 12.5 to 12, Math.round to 13)."""
    return math.floor(fraction * 100 + 0.5)


def _signed(points: int, plus: str = "") -> str:
    return f"-{-points}" if points < 0 else f"{plus}{points}"


def eval_point_text(point: dict[str, Any]) -> str:
    """An EvalPoint as `34% [29-39]`: whole percents, as precise as a few hundred rows allow."""
    if point.get("accuracy") is None:
        return "-"
    ci = point.get("ci95")
    return f"{whole_percent(point['accuracy'])}%" + (f" [{whole_percent(ci[0])}-{whole_percent(ci[1])}]" if ci else "")


def _latest_eval(evaluation: dict[str, Any]) -> dict[str, Any] | None:
    """What `before` is compared with: `after`, else the newest step-N evaluation (points are oldest first)."""
    if evaluation.get("after"):
        return dict(evaluation["after"])
    steps = [p for p in evaluation.get("points") or [] if p.get("label") not in ("before", "after")]
    return dict(steps[-1]) if steps else None


def eval_text(job: dict[str, Any]) -> str:
    """JobPublic.eval in one line: `34% [29-39] -> 51% [45-57], n=300`, or `- (why there is none)`."""
    evaluation = job.get("eval")
    if not evaluation:
        return "-"  # a service older than JobPublic.eval
    points = evaluation.get("points") or []
    if evaluation.get("status") != "available" or not points:
        return f"- ({evaluation.get('reason') or 'no evaluation'})"
    before, later = evaluation.get("before"), _latest_eval(evaluation)
    if before and later:
        at = "" if later["label"] == "after" else f" at step {later['step']}"
        n = f"n={before['n']}" if before["n"] == later["n"] else f"n={before['n']} -> {later['n']}"
        return f"{eval_point_text(before)} -> {eval_point_text(later)}{at}, {n}{_scored_by_text(later)}"
    only = later or before or points[-1]
    when = {"before": "before training", "after": "after training"}.get(only["label"], f"at step {only['step']}")
    return f"{eval_point_text(only)} {when}, n={only['n']}{_scored_by_text(only)}"


def _scored_by_text(point: dict[str, Any]) -> str:
    """MaxText's score needs no words; a job scored by its own reward functions says so (as the dashboard does)."""
    return ", scored by the job's rewards" if point.get("scored_by") == "rewards" else ""


def eval_difference_text(job: dict[str, Any]) -> str | None:
    """The paired change: `+17 points [11, 23] (60 improved, 9 regressed), after - before over 300 rows`."""
    diff = (job.get("eval") or {}).get("difference")
    if not diff:
        return None
    of = "after" if diff["of"] == "after" else str(diff["of"]).replace("-", " ")
    return f"{_change_text(diff)} ({diff['improved']} improved, {diff['regressed']} regressed), {of} - before over {diff['n']} rows"


def _change_text(diff: dict[str, Any]) -> str:
    """A PairedDifference as `+17 points [11, 23]`."""
    low, high = (whole_percent(v) for v in diff["ci95"])
    return f"{_signed(whole_percent(diff['difference']), '+')} points [{_signed(low)}, {_signed(high)}]"


def eval_event_text(body: dict[str, Any]) -> str:
    """An `eval` event of the job stream: `eval after (step 3): 51% [45-57], n=300; +17 points [11, 23] vs before`."""
    point = body["point"]
    text = f"eval {point['label']} (step {point['step']}): {eval_point_text(point)}, n={point['n']}"
    if body.get("difference"):
        text += f"; {_change_text(body['difference'])} vs before"
    return text


def print_job(job: dict[str, Any]) -> None:
    table = Table(show_header=False, box=None)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")  # paths and messages in full: users copy them
    rows = [
        ("id", job["id"]),
        ("name", job["name"]),
        ("team", job["team"]),
        ("submitted by", job.get("submitted_by") or "-"),
        ("phase", job["phase"]),
        *([("queue", _queue_line(job["queue"]))] if job.get("queue") else []),
        ("message", job["message"]),
        ("stage", job.get("stage") or "-"),
        ("step", f"{job['step']}/{job['total_steps']}" if job.get("total_steps") else "-"),
        ("eta", f"{job['eta_s']:.0f}s" if job.get("eta_s") is not None else "-"),
        ("runs on", f"{job.get('backend') or '-'} {job.get('object_name') or ''}".strip()),
        ("run dir", job["run_uri"]),
    ]
    metrics = job.get("metrics") or {}
    rows.append(("metrics", "  ".join(f"{k}={fmt_metric(v)}" for k, v in metrics.items())))
    rows.append(("goodput", goodput_text(job.get("goodput"))))  # where the job's time went
    fit = job.get("fit_estimate")
    rows.append(("memory", f"{fit['verdict']}: {escape(fit['message'])}" if fit else "-"))
    health = job.get("health")
    rows.append(("health", f"{health_text(health['verdict'])}: {escape(health['message'])}" if health else "-"))
    if health and health.get("warning"):
        rows.append(("warning", escape(health["warning"])))
    rows.append(("eval", escape(eval_text(job))))  # the reason is the service's words: not markup
    if (difference := eval_difference_text(job)) is not None:
        rows.append(("eval change", difference))
    if job.get("usage"):
        rows.append(("usage", usage_text(job["usage"])))
    rows.append(("storage", storage_text(job.get("storage"))))  # the run directory, as last measured
    for stage, times in (job.get("stage_times") or {}).items():
        rows.append((f"stage {stage}", f"{times.get('started_at') or '-'} -> {times.get('finished_at') or '...'}"))
    for artifact in job.get("artifacts") or []:
        rows.append((f"artifact {artifact['name']}", _artifact_text(artifact)))
    if job.get("failure"):
        rows.append(("failure", f"[red]{job['failure'].get('reason')}[/]: {job['failure'].get('message')}"))
    for key, value in rows:
        table.add_row(f"[bold]{key}[/]", str(value))
    console.print(table)
