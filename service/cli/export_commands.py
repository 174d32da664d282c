"""Getting a job out of rljob into the tools teams compare runs with: `rljob export mlflow` and `rljob tensorboard`.

Client side like the job commands: the job's data comes over the REST API (RljobClient), so this module
imports no adapter, settings or storage code (tests/test_import_contract.py). The MLflow mapping is in
mlflow_export.py; MLflow itself is an optional extra, imported only when an export runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from service.domain.records.models import JobPublic
from trainer.contract import RunLayout

from .client import CliContext, CliError, CliExit, RljobClient, handles_errors
from .mlflow_export import JobExport, mlflow_client, write_export
from .output import console, err_console

MAX_METRIC_POINTS = 100_000  # the service's own cap on GET /metrics
# MLflow retries an unreachable HTTP tracking server for minutes by default; an export says so in seconds.
MLFLOW_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}

export_app = typer.Typer(help="Export a job's params, metrics, evaluations, samples and repro record to a tracker.", no_args_is_help=True)


def _client(ctx: typer.Context) -> RljobClient:
    context: CliContext = ctx.obj  # set by main._global for every command
    return context.client()


def read_job_export(client: RljobClient, job_id: str, sample_steps: int) -> JobExport:
    """Everything one export writes, read from the service first, so a service error changes nothing in MLflow.
    The export itself (service/domain/mlflow_runs.py, shared with the service's live export) takes the API's JSON."""
    job = client.job(job_id)
    points = client.metrics(job_id, limit=MAX_METRIC_POINTS).points
    samples: list[dict[str, Any]] = []
    newest = client.samples_or_none(job_id) if sample_steps else None
    if newest is not None:
        wanted = newest.steps_available[-sample_steps:]
        samples = [(client.samples(job_id, step) if step != newest.step else newest).model_dump(mode="json") for step in wanted]
    repro = client.repro(job_id)  # a service without repro records answers 404
    return JobExport(
        job=job.model_dump(mode="json"),
        metric_points=[p.model_dump(mode="json") for p in points],
        samples=samples,
        repro=repro.model_dump(mode="json") if repro is not None else None,
    )


@export_app.command("mlflow")
@handles_errors
def export_mlflow(
    ctx: typer.Context,
    job_id: str,
    tracking_uri: Annotated[str, typer.Option(envvar="MLFLOW_TRACKING_URI", help="an MLflow server (http(s)://) or database (sqlite:///)")],
    experiment: Annotated[str, typer.Option(help="MLflow experiment, created when missing")] = "rljob",
    artifact_location: Annotated[
        str | None, typer.Option(help="where a new experiment keeps artifacts (default: the tracking store's choice)")
    ] = None,
    sample_steps: Annotated[int, typer.Option(min=0, max=100, help="the newest N steps' samples as an artifact")] = 5,
) -> None:
    """Export one job to MLflow; exporting it again updates the same run and adds only new metric points."""
    export = read_job_export(_client(ctx), job_id, sample_steps)
    for name, value in MLFLOW_HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    try:
        result = write_export(mlflow_client(tracking_uri), export, experiment, artifact_location)
    except CliError:
        raise
    except Exception as e:  # MlflowException, a refused connection, an unknown URI scheme: all one message
        raise CliError(f"cannot export {job_id} to MLflow at {tracking_uri}: {e.__class__.__name__}: {str(e)[:500]}", CliExit.FAILED) from e
    verb = "created" if result.created else "updated"
    console.print(
        f"{verb} MLflow run [bold]{result.run_id}[/] in experiment {escape(experiment)} "
        f"({result.experiment_id}): {result.metrics_logged} metric points logged, "
        f"{result.metrics_already_there} already there",
        highlight=False,
    )


def tensorboard_logdir(job: JobPublic) -> str:
    """Where Tunix writes the job's TensorBoard event files: train_rl's run under the job's run directory."""
    return RunLayout(job.spec.output, job.id).tensorboard_dir


@handles_errors
def tensorboard(
    ctx: typer.Context,
    job_id: str,
    sync: Annotated[
        Path | None, typer.Option(file_okay=False, help="copy the event files into this local directory (again: only new bytes)")
    ] = None,
) -> None:
    """Print the job's TensorBoard logdir (a path or gs:// URI) for `tensorboard --logdir`, or copy it with --sync."""
    context: CliContext = ctx.obj
    job = context.client().job(job_id)
    logdir = tensorboard_logdir(job)
    if sync is None:
        typer.echo(logdir)
        if job.stage in (None, "convert") and job.phase != "SUCCEEDED":
            err_console.print("[dim]training has not started: the directory may not exist yet[/]", highlight=False)
        return
    copied = context.sync_event_files(job.run_uri, logdir, sync)
    err_console.print(f"{len(copied)} event file(s) with new bytes from {escape(logdir)}", highlight=False)
    typer.echo(sync)
