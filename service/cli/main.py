"""`rljob`: submit, watch and cancel RL jobs; `serve` the embedded default; manage tokens.

Every failure the user can cause (bad spec, unreachable service, rejected token) ends with a
one-paragraph message and a non-zero exit code (client.ExitCode, listed by `rljob --help`), never a
traceback.
"""

from __future__ import annotations

import importlib.metadata
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from service.domain.phases import TERMINAL, JobPhase
from trainer.contract import JobSpec
from trainer.contract.fit import estimate_job_fit
from trainer.contract.spec_file import SpecFileError, load_spec_file, read_spec_data

from . import admin, doctor, samples, usage
from .client import EXIT_CODE_MEANINGS, CliError, ExitCode, RljobClient, handles_errors, load_client_config
from .follow import follow_job
from .manifests import render_k8s_manifests
from .output import (
    OutputFormat,
    OutputOption,
    console,
    emit,
    err_console,
    fmt_metric,
    health_text,
    print_job,
    queue_text,
)

# Typer's help reflows paragraphs; "\b" on its own line keeps the lines below it as written.
EXIT_CODES_HELP = "Exit codes:\n\b\n" + "\n".join(f"{code.value}  {text}" for code, text in EXIT_CODE_MEANINGS.items())

app = typer.Typer(name="rljob", help="Run GRPO post-training jobs through the rljob control service.", no_args_is_help=True,
                  epilog=EXIT_CODES_HELP, pretty_exceptions_enable=False, add_completion=False)  # fmt: skip


class _Ctx:
    def __init__(self, url: str | None, token: str | None, config: Path | None) -> None:
        self.url, self.token, self.config = url, token, config

    def client(self) -> RljobClient:
        return RljobClient(load_client_config(self.url, self.token, self.config))


def _print_version(wanted: bool) -> None:
    if not wanted:
        return
    try:
        version = importlib.metadata.version("rljob")
    except importlib.metadata.PackageNotFoundError:
        err_console.print("[red]error:[/] rljob is not installed as a package (scripts/bootstrap.sh installs it)")
        raise typer.Exit(ExitCode.FAILED) from None
    typer.echo(f"rljob {version}")
    raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(envvar="RLJOB_URL", help="service URL (default http://127.0.0.1:8765)")] = None,
    token: Annotated[str | None, typer.Option(envvar="RLJOB_TOKEN", help="API token", show_default=False)] = None,
    config: Annotated[Path | None, typer.Option(envvar="RLJOB_CONFIG", help="config file with url and token")] = None,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_print_version, help="print the installed rljob version and exit")
    ] = False,
) -> None:
    ctx.obj = _Ctx(url, token, config)


def _client(ctx: typer.Context) -> RljobClient:
    obj: _Ctx = ctx.obj  # set by _global for every command
    return obj.client()


def _spec_problems(e: SpecFileError, path: Path) -> CliError:
    lines = "\n".join(f"  {field}: {reason}" for field, reason in e.problems)
    return CliError(f"invalid job spec {path} ({len(e.problems)} problem{'s' * (len(e.problems) != 1)}):\n{lines}",
                    ExitCode.BAD_INPUT)  # fmt: skip


@app.command()
@handles_errors
def submit(
    ctx: typer.Context,
    spec: Annotated[Path, typer.Argument(help="job spec file (YAML or JSON); ${VAR} expands from the environment")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="show progress until the job ends")] = False,
    dry_run: Annotated[bool, typer.Option(help="validate, print the memory estimate and the Kubernetes manifests; submit nothing")] = False,
    idempotency_key: Annotated[str | None, typer.Option(help="retries with the same key return the same job")] = None,
    output: OutputOption = None,
) -> None:
    """Submit a job spec; prints the job id (and with -f follows it to the end)."""
    if dry_run and output is not None:
        raise CliError("--dry-run prints Kubernetes manifests, not a job: leave out -o/--output", ExitCode.BAD_INPUT)
    try:
        job_spec = load_spec_file(spec)
    except SpecFileError as e:
        raise _spec_problems(e, spec) from e
    if dry_run:
        _dry_run(job_spec, spec)
        return
    client = _client(ctx)
    key = idempotency_key or uuid.uuid4().hex  # one key per invocation: a retried POST never makes two jobs
    body = read_spec_data(spec)
    job = client.request("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key})
    _warn_if_tight(job.get("fit_estimate"))
    if follow:
        (err_console if output else console).print(f"submitted [bold]{job['id']}[/] ({job['name']}): {job['phase']}")
        _follow_to_end(client, job["id"], output)
    elif output:
        emit(job, output, [job["id"]])
    else:
        console.print(f"submitted [bold]{job['id']}[/] ({job['name']}): {job['phase']}")


def _warn_if_tight(fit: dict[str, Any] | None) -> None:
    if fit and fit.get("verdict") == "tight":
        err_console.print(f"[yellow]warning: memory[/] {escape(fit['message'])}", highlight=False)


def _dry_run(job_spec: JobSpec, path: Path) -> None:
    """Manifests on stdout (ready for `kubectl apply -f -`), the memory estimate and notes on stderr.

    A job the service would refuse for memory is refused here too (exit 2), with the same numbers.
    A spec that cannot be rendered for Kubernetes (a cpu job, no RLJOB_K8S_IMAGE) is still a valid
    spec for the local launcher, so that is a note with the reason and the spec itself, not an error.
    """
    fit = estimate_job_fit(job_spec)
    if fit is None:
        err_console.print("[dim]memory: not estimated (the model's shape is unknown: set model.name or model.dims, "
                          "or use a local checkpoint)[/]", highlight=False)  # fmt: skip
    elif fit.verdict == "does-not-fit":
        raise CliError(f"{path} would be refused: hardware.accelerator: {fit.message}", ExitCode.BAD_INPUT)
    else:
        style = "yellow" if fit.verdict == "tight" else "dim"
        err_console.print(f"[{style}]memory ({fit.verdict}): {escape(fit.message)}[/]", highlight=False)
    try:
        manifests = render_k8s_manifests(job_spec, None, str(path))
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
        emit(final, output, [final["id"]])
    else:
        print_job(final)
    if final["phase"] != JobPhase.SUCCEEDED:
        raise CliError(f"job {job_id} ended {final['phase']}", ExitCode.FAILED)


PhaseOption = Annotated[
    JobPhase | None,
    typer.Option(case_sensitive=False, metavar="PHASE", show_default=False, help=f"one of {', '.join(JobPhase)} (any case)"),
]


@app.command("list")
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
    page = _client(ctx).request("GET", "/v1/jobs", params=params)
    if output:
        emit(page, output, [job["id"] for job in page["data"]])
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
    for job in page["data"]:
        step = f"{job['step']}/{job['total_steps']}" if job.get("total_steps") else "-"
        health = health_text((job.get("health") or {}).get("verdict"))
        table.add_row(
            job["id"],
            job["name"],
            job["team"],
            job["phase"],
            escape(queue_text(job)),
            health,
            job.get("stage") or "-",
            step,
            fmt_metric(job["metrics"].get("reward_mean")),
            job["created_at"][5:16].replace("T", " "),
        )
    console.print(table)
    if page.get("next_cursor"):
        console.print("[dim]more jobs exist; use --limit or filters[/]")


@app.command()
@handles_errors
def status(
    ctx: typer.Context,
    job_id: str,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="show progress until the job ends")] = False,
    output: OutputOption = None,
) -> None:
    """Show one job: phase, stage, progress, metrics, learning health, artifacts, failure."""
    client = _client(ctx)
    job = client.request("GET", f"/v1/jobs/{job_id}")
    if follow and job["phase"] not in TERMINAL:
        _follow_to_end(client, job_id, output)
    elif output:
        emit(job, output, [job["id"]])
    else:
        print_job(job)


@app.command()
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
    for line in _client(ctx).stream_lines(f"/v1/jobs/{job_id}/logs", params=params):
        typer.echo(line)


@app.command()
@handles_errors
def cancel(ctx: typer.Context, job_id: str, output: OutputOption = None) -> None:
    """Cancel a job: it shows CANCELLING until the workload has really stopped, then CANCELLED."""
    job = _client(ctx).request("POST", f"/v1/jobs/{job_id}/cancel")
    if output:
        emit(job, output, [job["id"]])
    else:
        console.print(f"{job['id']}: {job['phase']} - {job['message']}")


app.command()(admin.serve)
app.add_typer(admin.token_app, name="token")
app.command()(admin.render)
app.command()(admin.demo)
app.command()(samples.samples)
app.command()(usage.usage)
app.command()(doctor.doctor)


def main() -> None:
    try:
        app()
    except Exception as e:  # noqa: BLE001 - anything unexpected: one line, not a traceback (usage errors are click's)
        err_console.print(f"[red]error:[/] unexpected {e.__class__.__name__}: {e}", highlight=False)
        raise SystemExit(ExitCode.FAILED) from None


if __name__ == "__main__":
    main()
