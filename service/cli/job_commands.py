"""The job commands, `submit`, `list`, `status`, `logs` and `cancel`: the HTTP client side of `rljob`.

They talk to the service over its REST API only, so this module imports no adapter, no settings and no
database code (tests/test_import_contract.py holds that). The one local step, `submit --dry-run`'s
Kubernetes manifests, goes through the renderer the CLI's assembly (main.py) puts in the context.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from service.domain.records.estimate_models import JobEstimate
from service.domain.records.phases import TERMINAL, JobPhase
from trainer.contract import JobSpec
from trainer.contract.spec.file import SpecFileError, load_spec_file, read_spec_data
from trainer.sizing.fit import FitEstimate, estimate_job_fit

from .client import CliContext, CliError, CliExit, RljobClient, handles_errors
from .estimate_text import print_estimate
from .follow import follow_job
from .output import (
    OutputFormat,
    OutputOption,
    console,
    emit,
    err_console,
    fmt_metric,
    health_text,
    print_job,
    print_submitted,
    queue_text,
)


def _context(ctx: typer.Context) -> CliContext:
    obj: CliContext = ctx.obj  # set by main._global for every command
    return obj


def _client(ctx: typer.Context) -> RljobClient:
    return _context(ctx).client()


def _spec_problems(e: SpecFileError, path: Path) -> CliError:
    lines = "\n".join(f"  {field}: {reason}" for field, reason in e.problems)
    return CliError(f"invalid job spec {path} ({len(e.problems)} problem{'s' * (len(e.problems) != 1)}):\n{lines}", CliExit.BAD_INPUT)


@handles_errors
def submit(
    ctx: typer.Context,
    spec: Annotated[Path, typer.Argument(help="job spec file (YAML or JSON); ${VAR} expands from the environment")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="show progress until the job ends")] = False,
    dry_run: Annotated[bool, typer.Option(help="validate, print the memory estimate and the Kubernetes manifests; submit nothing")] = False,
    idempotency_key: Annotated[str | None, typer.Option(help="retries with the same key return the same job")] = None,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate",
            help="ask the service what the job would take (queue, wait, run, wall, chip-hours, cost, storage); submit nothing",
        ),
    ] = False,
    override_budget: Annotated[
        bool, typer.Option(help="admins: submit even when the job would take the team past its monthly budget")
    ] = False,
    output: OutputOption = None,
) -> None:
    """Submit a job spec; prints the job id (and with -f follows it to the end)."""
    if dry_run and output is not None:
        raise CliError("--dry-run prints Kubernetes manifests, not a job: leave out -o/--output", CliExit.BAD_INPUT)
    try:
        job_spec = load_spec_file(spec)
    except SpecFileError as e:
        raise _spec_problems(e, spec) from e
    if dry_run:
        _dry_run(_context(ctx), job_spec, spec)
        return
    client = _client(ctx)
    if estimate:
        _print_estimate(client.estimate(read_spec_data(spec)), output)
        return
    key = idempotency_key or uuid.uuid4().hex  # one key per invocation: a retried POST never makes two jobs
    body = read_spec_data(spec)
    job = client.submit(body, key, override_budget=override_budget)
    _warn_if_tight(job.fit_estimate)
    if follow:
        print_submitted(job.id, job.name, job.phase, output)
        _follow_to_end(client, job.id, output)
    elif output:
        emit(job.model_dump(mode="json"), output, [job.id])
    else:
        print_submitted(job.id, job.name, job.phase, output)


def _print_estimate(estimate: JobEstimate, output: OutputFormat | None) -> None:
    if output:
        emit(estimate.model_dump(mode="json"), output, [estimate.basis])
    else:
        print_estimate(estimate, console)
        err_console.print("[dim]estimate only: nothing submitted[/]", highlight=False)


def _warn_if_tight(fit: FitEstimate | None) -> None:
    if fit is not None and fit.verdict == "tight":
        err_console.print(f"[yellow]warning: memory[/] {escape(fit.message)}", highlight=False)


def _dry_run(context: CliContext, job_spec: JobSpec, path: Path) -> None:
    """Manifests on stdout (ready for `kubectl apply -f -`), the memory estimate and notes on stderr.

    A job the service would refuse for memory is refused here too (exit 2), with the same numbers.
    A spec that cannot be rendered for Kubernetes (a cpu job, no RLJOB_K8S_IMAGE) is still a valid
    spec for the local launcher, so that is a note with the reason and the spec itself, not an error.
    """
    fit = estimate_job_fit(job_spec)
    if fit is None:
        err_console.print(
            "[dim]memory: not estimated (the model's shape is unknown: set model.name or model.dims, or use a local checkpoint)[/]",
            highlight=False,
        )
    elif fit.verdict == "does-not-fit":
        raise CliError(f"{path} would be refused: hardware.accelerator: {fit.message}", CliExit.BAD_INPUT)
    else:
        style = "yellow" if fit.verdict == "tight" else "dim"
        err_console.print(f"[{style}]memory ({fit.verdict}): {escape(fit.message)}[/]", highlight=False)
    try:
        manifests = context.render_manifests(job_spec, None, str(path))
    except CliError as e:
        console.print_json(job_spec.model_dump_json())
        err_console.print(f"[yellow]Kubernetes manifests not shown:[/] {escape(e.message)}", highlight=False)
    else:
        typer.echo(manifests, nl=False)
    err_console.print(f"[dim]dry run: {path} is a valid job spec; nothing submitted[/]", highlight=False)


def _follow_to_end(client: RljobClient, job_id: str, output: OutputFormat | None) -> None:
    """Progress on the terminal; with -o it goes to stderr, so stdout holds only the final job."""
    final = follow_job(client, job_id, err_console if output else console)
    if output:
        emit(final.model_dump(mode="json"), output, [final.id])
    else:
        print_job(final)
    if final.phase != JobPhase.SUCCEEDED:
        raise CliError(f"job {job_id} ended {final.phase}", CliExit.FAILED)


PhaseOption = Annotated[
    JobPhase | None,
    typer.Option(case_sensitive=False, metavar="PHASE", show_default=False, help=f"one of {', '.join(JobPhase)} (any case)"),
]


@handles_errors
def list_jobs(
    ctx: typer.Context,
    phase: PhaseOption = None,
    name: Annotated[str | None, typer.Option()] = None,
    label: Annotated[list[str] | None, typer.Option(help="key=value (repeatable)")] = None,
    team: Annotated[str | None, typer.Option(help="admins only")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 20,
    output: OutputOption = None,
) -> None:
    """List jobs, newest first."""
    params: dict[str, Any] = {"limit": limit, "label": label or []}
    params.update({k: v for k, v in (("phase", phase.value if phase else None), ("name", name), ("team", team)) if v})
    page = _client(ctx).jobs(params)
    if output:
        emit(page.model_dump(mode="json"), output, [job.id for job in page.data])
        return
    table = Table()
    table.add_column("ID", no_wrap=True, min_width=15)  # ids are what users copy: never truncated
    table.add_column("NAME", overflow="fold")
    table.add_column("TEAM", overflow="fold")
    table.add_column("PHASE", no_wrap=True, min_width=10)
    table.add_column("QUEUE", no_wrap=True)  # a QUEUED job's place and reason: `#2 TeamJobLimit`
    table.add_column("HEALTH", no_wrap=True, min_width=9)
    for title in ("STAGE", "STEP", "REWARD", "CREATED"):
        table.add_column(title, overflow="fold")
    for job in page.data:
        step = f"{job.step}/{job.total_steps}" if job.total_steps else "-"
        table.add_row(
            job.id,
            job.name,
            job.team,
            job.phase,
            escape(queue_text(job.queue)),
            health_text(job.health.verdict if job.health else None),
            job.stage or "-",
            step,
            fmt_metric(job.metrics.reward_mean),
            job.created_at.strftime("%m-%d %H:%M"),
        )
    console.print(table)
    if page.next_cursor:
        console.print("[dim]more jobs exist; use --limit or filters[/]")


@handles_errors
def status(
    ctx: typer.Context,
    job_id: str,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="show progress until the job ends")] = False,
    output: OutputOption = None,
) -> None:
    """Show one job: phase, stage, progress, metrics, learning health, artifacts, failure."""
    client = _client(ctx)
    job = client.job(job_id)
    if follow and job.phase not in TERMINAL:
        _follow_to_end(client, job_id, output)
    elif output:
        emit(job.model_dump(mode="json"), output, [job.id])
    else:
        print_job(job)


@handles_errors
def logs(
    ctx: typer.Context,
    job_id: str,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep streaming until the job stops")] = False,
    tail: Annotated[int | None, typer.Option(min=0, help="only the last N lines")] = None,
) -> None:
    """Print the trainer's output."""
    params: dict[str, Any] = {"follow": follow}
    if tail is not None:
        params["tail_lines"] = tail
    for line in _client(ctx).stream_lines(f"/v1/jobs/{job_id}/logs", params=params, follow=follow):
        typer.echo(line)


@handles_errors
def cancel(ctx: typer.Context, job_id: str, output: OutputOption = None) -> None:
    """Cancel a job: it shows CANCELLING until the workload has really stopped, then CANCELLED."""
    job = _client(ctx).cancel(job_id)
    if output:
        emit(job.model_dump(mode="json"), output, [job.id])
    else:
        console.print(f"{job.id}: {job.phase} - {job.message}")
