"""How the CLI prints: the two consoles, `-o json|yaml|name` and a job's status table, shared by
every command module. A job's evaluations are written as the dashboard writes them (whole percents,
95% intervals in brackets; dashboard/src/evaltext.js), with ASCII dashes and arrows."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from service.domain.records.attached_eval_models import AttachedEvalPublic
from service.domain.records.job_eval_models import EvalPoint, JobEval
from service.domain.records.models import JobPublic, QueueStatus
from service.domain.records.run_report import Artifact
from service.domain.records.usage_models import JobUsage
from trainer.contract.run.evaluation import PairedDifference

from .estimate_text import job_estimate_rows
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


def print_submitted(item_id: str, name: str, phase: str, output: OutputFormat | None, *, of: str | None = None) -> None:
    """The line a submit, an eval or a rerun prints for what it created (`of`: the job a rerun repeats). On stderr when
    stdout carries -o's document, so the two never mix; names escaped, as they are the user's words."""
    rerun = f", a rerun of {escape(of)}" if of else ""
    line = f"submitted [bold]{escape(item_id)}[/] ({escape(name)}){rerun}: {phase}"
    (err_console if output else console).print(line, highlight=False)


def fmt_metric(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}"


def api_time(moment: datetime | None) -> str:
    """A time as the API's JSON writes it (pydantic: ISO 8601, `Z` for UTC); `-` for none."""
    return "-" if moment is None else moment.isoformat().replace("+00:00", "Z")


def _artifact_text(artifact: Artifact) -> str:
    details = []
    if artifact.size_bytes is not None:
        details.append(f"{artifact.size_bytes:,} bytes")
    if (artifact.file_count or 0) > 1:
        details.append(f"{artifact.file_count} files")
    if artifact.checksum:
        details.append(artifact.checksum)
    return artifact.uri + (f" ({', '.join(details)})" if details else "")


# Colours for the learning-health verdicts (service/domain/health/learning_health.py).
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


def queue_text(queue: QueueStatus | None) -> str:
    """A QUEUED job's place in its backend's queue for the list: `#2 TeamJobLimit`; `-` when none."""
    if queue is None:
        return "-"
    place = f"#{queue.position} " if queue.position is not None else ""
    return f"{place}{queue.reason}"


def _queue_line(queue: QueueStatus) -> str:
    place = f"#{queue.position} in " if queue.position is not None else "in "
    words = f" ({queue.message})" if queue.message else ""
    return escape(f"{place}{queue.name}: {queue.reason}{words}")  # the backend's words: not markup


def usage_text(usage: JobUsage) -> str:
    """One line of a job's JobPublic.usage: what is charged, then the time that is not."""
    phases = usage.phases
    waited_h = (phases["QUEUED"].seconds + phases["LAUNCHING"].seconds) / 3600
    cost = "no price" if usage.cost_usd is None else f"${usage.cost_usd:,.2f}"
    return (
        f"{usage.billed_chip_hours:,.2f} billed chip-hours on {usage.chips} chip(s) "
        f"({usage.accelerator} {usage.capacity}), {cost}; waited {waited_h:,.2f} h (not charged)"
    )


def whole_percent(fraction: float) -> int:
    """0.34 -> 34, half up like the dashboard's Math.round (Python's round() takes 12.5 to 12, Math.round to 13)."""
    return math.floor(fraction * 100 + 0.5)


def _signed(points: int, plus: str = "") -> str:
    return f"-{-points}" if points < 0 else f"{plus}{points}"


def eval_point_text(point: EvalPoint) -> str:
    """An EvalPoint as `34% [29-39]`: whole percents, as precise as a few hundred rows allow."""
    if point.accuracy is None:
        return "-"
    low, high = point.ci95
    return f"{whole_percent(point.accuracy)}% [{whole_percent(low)}-{whole_percent(high)}]"


def _latest_eval(evaluation: JobEval) -> EvalPoint | None:
    """What `before` is compared with: `after`, else the newest step-N evaluation (points are oldest first)."""
    if evaluation.after is not None:
        return evaluation.after
    steps = [p for p in evaluation.points if p.label not in ("before", "after")]
    return steps[-1] if steps else None


def eval_text(evaluation: JobEval) -> str:
    """JobPublic.train_evals in one line: `34% [29-39] -> 51% [45-57], n=300`, or `- (why there is none)`."""
    points = evaluation.points
    if evaluation.status != "available" or not points:
        return f"- ({evaluation.reason or 'no evaluation'})"
    before, later = evaluation.before, _latest_eval(evaluation)
    if before and later:
        at = "" if later.label == "after" else f" at step {later.step}"
        n = f"n={before.n}" if before.n == later.n else f"n={before.n} -> {later.n}"
        return f"{eval_point_text(before)} -> {eval_point_text(later)}{at}, {n}{_scored_by_text(later)}"
    only = later or before or points[-1]
    when = {"before": "before training", "after": "after training"}.get(only.label, f"at step {only.step}")
    return f"{eval_point_text(only)} {when}, n={only.n}{_scored_by_text(only)}"


def _scored_by_text(point: EvalPoint) -> str:
    """MaxText's score needs no words; a job scored by its own reward functions says so (as the dashboard does)."""
    return ", scored by the job's rewards" if point.scored_by == "rewards" else ""


def eval_difference_text(evaluation: JobEval) -> str | None:
    """The paired change: `+17 points [11, 23] (60 improved, 9 regressed), after - before over 300 rows`."""
    diff = evaluation.difference
    if diff is None:
        return None
    of = "after" if diff.of == "after" else diff.of.replace("-", " ")
    return f"{_change_text(diff)} ({diff.improved} improved, {diff.regressed} regressed), {of} - before over {diff.n} rows"


def _change_text(diff: PairedDifference) -> str:
    """A PairedDifference as `+17 points [11, 23]`."""
    low, high = (whole_percent(v) for v in diff.ci95)
    return f"{_signed(whole_percent(diff.difference), '+')} points [{_signed(low)}, {_signed(high)}]"


def eval_event_text(body: dict[str, Any]) -> str:
    """An `eval` event of the job stream: `eval after (step 3): 51% [45-57], n=300; +17 points [11, 23] vs before`."""
    point = EvalPoint.model_validate(body["point"])
    text = f"eval {point.label} (step {point.step}): {eval_point_text(point)}, n={point.n}"
    if body.get("difference"):
        text += f"; {_change_text(PairedDifference.model_validate(body['difference']))} vs before"
    return text


def attached_eval_text(entry: AttachedEvalPublic) -> str:
    """One eval job of JobPublic.attached_evals: `rl-... SUCCEEDED, pass@1 62% [31-86] (exact), +38 points [12, 62] vs base, p=0.25`."""
    if entry.eval_id is None:
        return f"- ({entry.note or 'not submitted yet'})"
    text = f"{entry.eval_id} {entry.phase.value if entry.phase else '-'}"
    if entry.scores is not None:
        estimate = entry.scores.pass_at_1
        low, high = estimate.ci95
        text += f", pass@1 {whole_percent(estimate.value)}% [{whole_percent(low)}-{whole_percent(high)}] ({entry.function})"
    pass1 = next((s for s in entry.vs_base.scores if s.score == "pass@1"), None) if entry.vs_base else None
    if pass1 is not None:
        low_p, high_p = (whole_percent(v) for v in pass1.ci95)
        p_value = f", McNemar p={pass1.mcnemar_p:.2g}" if pass1.mcnemar_p is not None else ""
        text += f", {_signed(whole_percent(pass1.difference), '+')} points [{_signed(low_p)}, {_signed(high_p)}] vs base{p_value}"
    elif entry.note:
        text += f" ({entry.note})"
    return text


def hung_text(job: JobPublic) -> str:
    """How many attempts hung, and where the newest did, with the log that holds its stacks."""
    last = job.hangs[-1]
    where = f"{last.stage or 'before its first stage'}" + (f" after step {last.step}" if last.step is not None else "")
    return (
        f"{len(job.hangs)} attempt(s) hung, restarted {job.hung_restarts} time(s); the last (attempt {last.attempt}) in "
        f"{where}, no progress for {last.idle_s:.0f} s (limit {last.limit_s:.0f} s); stacks in {last.stacks}"
    )


def print_job(job: JobPublic) -> None:
    table = Table(show_header=False, box=None)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")  # paths and messages in full: users copy them
    rows = [
        ("id", job.id),
        ("name", job.name),
        ("team", job.team),
        ("submitted by", job.submitted_by or "-"),
        ("phase", job.phase),
        *([("queue", _queue_line(job.queue))] if job.queue else []),
        *([("held", f"[yellow]{job.hold.reason}[/] since {api_time(job.hold.since)}: {escape(job.hold.message)}")] if job.hold else []),
        ("message", job.message),
        *([("hung", escape(hung_text(job)))] if job.hangs else []),
        ("stage", job.stage or "-"),
        ("step", f"{job.step}/{job.total_steps}" if job.total_steps else "-"),
        ("eta", f"{job.eta_s:.0f}s" if job.eta_s is not None else "-"),
        ("runs on", f"{job.backend or '-'} {job.object_name or ''}".strip()),
        *([("capacity", escape(job.placement.says()))] if job.placement else []),
        ("run dir", job.run_uri),
    ]
    metrics = job.metrics.model_dump()
    rows.append(("metrics", "  ".join(f"{k}={fmt_metric(v)}" for k, v in metrics.items())))
    if job.reward_calls is not None:  # the job's own reward functions, run in the sandbox
        rows.append(("rewards", escape(job.reward_calls.says())))
    rows.append(("goodput", goodput_text(job.goodput)))  # where the job's time went
    fit = job.fit_estimate
    rows.append(("memory", f"{fit.verdict}: {escape(fit.message)}" if fit else "-"))
    health = job.health
    rows.append(("health", f"{health_text(health.verdict)}: {escape(health.message)}" if health else "-"))
    if health and health.warning:
        rows.append(("warning", escape(health.warning)))
    rows.append(("eval", escape(eval_text(job.train_evals))))  # the reason is the service's words: not markup
    if (difference := eval_difference_text(job.train_evals)) is not None:
        rows.append(("eval change", difference))
    rows += [(f"eval job {entry.label}", escape(attached_eval_text(entry))) for entry in job.attached_evals]  # spec.eval's eval jobs
    rows.append(("usage", usage_text(job.usage)))
    rows.append(("storage", storage_text(job.storage)))  # the run directory, as last measured
    rows += job_estimate_rows(job)  # the estimate made at submit, beside the actuals once it has ended
    for stage, times in job.stage_times.items():
        rows.append((f"stage {stage}", f"{api_time(times.started_at)} -> {api_time(times.finished_at) if times.finished_at else '...'}"))
    for artifact in job.artifacts:
        rows.append((f"artifact {artifact.name}", _artifact_text(artifact)))
    if job.failure:
        rows.append(("failure", f"[red]{job.failure.reason}[/]: {job.failure.message}"))
    for key, value in rows:
        table.add_row(f"[bold]{key}[/]", str(value))
    console.print(table)
