"""`rljob`: the CLI's assembly. The job commands (job_commands.py, samples.py, usage.py, export_commands.py) talk
to the service over HTTP and import no adapter; the operator commands (operator_commands.py: `serve`, `token`,
`render`, `demo`; doctor.py) run on the operator's machine against the database, settings and cluster.

Every failure the user can cause (bad spec, unreachable service, rejected token) ends with a
one-paragraph message and a non-zero exit code (client.CliExit, listed by `rljob --help`), never a
traceback.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Annotated

import typer

from . import doctor, eval_commands, export_commands, job_commands, operator_commands, run_compare, samples, usage, webhooks
from .client import CLI_EXIT_MEANINGS, DEFAULT_TIMEOUT_S, CliContext, CliExit
from .manifests import render_k8s_manifests
from .output import err_console
from .tensorboard_sync import sync_event_files

# Typer's help reflows paragraphs; "\b" on its own line keeps the lines below it as written.
EXIT_CODES_HELP = "Exit codes:\n\b\n" + "\n".join(f"{code.value}  {text}" for code, text in CLI_EXIT_MEANINGS.items())

app = typer.Typer(
    name="rljob",
    help="Run GRPO post-training jobs through the rljob control service.",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(wanted: bool) -> None:
    if not wanted:
        return
    try:
        version = importlib.metadata.version("rljob")
    except importlib.metadata.PackageNotFoundError:
        err_console.print("[red]error:[/] rljob is not installed as a package (scripts/bootstrap.sh installs it)")
        raise typer.Exit(CliExit.FAILED) from None
    typer.echo(f"rljob {version}")
    raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(envvar="RLJOB_URL", help="service URL (default http://127.0.0.1:8765)")] = None,
    token: Annotated[str | None, typer.Option(envvar="RLJOB_TOKEN", help="API token", show_default=False)] = None,
    config: Annotated[Path | None, typer.Option(envvar="RLJOB_CONFIG", help="config file with url and token")] = None,
    timeout: Annotated[
        float,
        typer.Option(
            envvar="RLJOB_TIMEOUT_S",
            min=0.1,
            max=3600,
            help=(
                "seconds a request may wait for the service (a log read 3x, an event stream's silence 2x; follows wait for "
                "news as long as the connection lives)"
            ),
        ),
    ] = DEFAULT_TIMEOUT_S,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_print_version, help="print the installed rljob version and exit")
    ] = False,
) -> None:
    ctx.obj = CliContext(url, token, config, render_manifests=render_k8s_manifests, sync_event_files=sync_event_files, timeout_s=timeout)


app.command()(job_commands.submit)
app.command("list")(job_commands.list_jobs)
app.command()(job_commands.status)
app.command()(job_commands.logs)
app.command()(job_commands.cancel)
app.command()(run_compare.diff)
app.command()(run_compare.rerun)
app.command("eval")(eval_commands.evaluate)
app.command("eval-compare")(eval_commands.eval_compare)
app.command()(operator_commands.serve)
app.add_typer(operator_commands.token_app, name="token")
app.command()(operator_commands.render)
app.command()(operator_commands.demo)
app.command()(samples.samples)
app.command()(usage.usage)
app.command()(doctor.doctor)
app.add_typer(export_commands.export_app, name="export")
app.add_typer(webhooks.webhooks_app, name="webhooks")
app.command()(export_commands.tensorboard)


def main() -> None:
    try:
        app()
    except Exception as e:  # noqa: BLE001 - anything unexpected: one line, not a traceback (usage errors are click's)
        err_console.print(f"[red]error:[/] unexpected {e.__class__.__name__}: {e}", highlight=False)
        raise SystemExit(CliExit.FAILED) from None


if __name__ == "__main__":
    main()
