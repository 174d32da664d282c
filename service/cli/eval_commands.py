"""`rljob eval CHECKPOINT --suite NAME|FILE` and `rljob eval-compare A B`: evaluate a checkpoint in an eval job, and
compare two evals paired by row. Client side: HTTP only (tests/test_import_contract.py).

A suite file is a SuiteSpec in YAML or JSON, read as spec files are (trainer/contract/spec/file.py: a safe loader,
${VAR} from the environment) and checked here first, so a bad suite is a message naming its fields before anything
is sent.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from service.domain.records.eval_models import EvalComparisonPublic, EvalPublic, EvalSummaryPublic
from service.domain.records.phases import JobPhase
from trainer.contract.run.eval_report import SCORES, ScoreDifference
from trainer.contract.spec.eval_suite import SuiteSpec
from trainer.contract.spec.file import SpecFileError, read_spec_data, validation_problems

from .client import CliContext, CliError, CliExit, handles_errors
from .follow import follow_job
from .output import OutputOption, console, emit, err_console, print_submitted

SUITE_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def _context(ctx: typer.Context) -> CliContext:
    obj: CliContext = ctx.obj  # set by main._global for every command
    return obj


def suite_body(suite: str) -> dict[str, Any]:
    """A suite's name, or the SuiteSpec in a YAML/JSON file, checked; CliError (bad input) naming its problems."""
    if not suite.endswith(SUITE_FILE_SUFFIXES):
        return {"name": suite}
    try:
        data = read_spec_data(suite)
        SuiteSpec.model_validate(data)
    except SpecFileError as e:
        problems = e.problems
    except ValidationError as e:
        problems = validation_problems(e)
    else:
        return data
    lines = "\n".join(f"  {field}: {reason}" for field, reason in problems)
    raise CliError(f"invalid suite {suite}:\n{lines}", CliExit.BAD_INPUT)


def _percent(value: float, ci95: tuple[float, float]) -> str:
    return f"{value * 100:.1f}% [{ci95[0] * 100:.1f}, {ci95[1] * 100:.1f}]"


def difference_text(found: ScoreDifference, n: int) -> str:
    """`pass@1 +12.5 points [+4.2, +20.8] 95% CI, McNemar p=0.0042, n=120`."""
    low, high = found.ci95
    text = f"{found.score} {found.difference * 100:+.1f} points [{low * 100:+.1f}, {high * 100:+.1f}] 95% CI"
    if found.mcnemar_p is not None:
        text += f", McNemar p={found.mcnemar_p:.3g}"
    return f"{text}, n={n}"


def suite_text(summary: EvalSummaryPublic) -> str:
    suite = summary.suite
    version = f"v{suite.version}" if suite.version is not None else "unversioned"
    hashed = f", hash {suite.content_hash}" if suite.content_hash else ""
    return f"{suite.name} {version} ({suite.scope}{hashed})"


def print_scores(found: EvalPublic) -> None:
    summary = found.eval_job
    console.print(
        f"{found.id} ({escape(found.name)}): {found.phase}; {escape(summary.checkpoint.label)} "
        f"{escape(summary.model_source)} on {escape(suite_text(summary))}, n={summary.n}, k={summary.k} ({summary.engine})",
        highlight=False,
    )
    # A row per score and a column per reward function: a suite has one or a few functions, and four columns of
    # intervals would wrap on a terminal.
    table = Table(title="scores (95% CI)", title_justify="left")
    table.add_column("score")
    for function in summary.scores:
        table.add_column(escape(f"{function} (primary)" if function == summary.primary else function), no_wrap=True)
    for score in SCORES:
        table.add_row(score, *(_percent(scores.get(score).value, scores.get(score).ci95) for scores in summary.scores.values()))
    console.print(table)
    console.print(
        f"usage: {found.usage.billed_chip_hours:g} chip-hours, cost "
        f"{'no price' if found.usage.cost_usd is None else f'${found.usage.cost_usd:,.2f}'}",
        highlight=False,
    )


def print_comparison(found: EvalComparisonPublic) -> None:
    comparison = found.comparison
    console.print(
        f"{found.a.eval_id} vs {found.b.eval_id} on {escape(found.suite.name)} v{found.suite.version} "
        f"(hash {found.suite.content_hash}), reward function {escape(comparison.function)}:",
        highlight=False,
    )
    table = Table(title_justify="left")
    for column in (
        "score",
        f"{found.a.eval_id} ({escape(found.a.checkpoint.label)})",
        f"{found.b.eval_id} ({escape(found.b.checkpoint.label)})",
    ):
        table.add_column(column)
    for score in comparison.scores:
        table.add_row(score.score, f"{score.a * 100:.1f}%", f"{score.b * 100:.1f}%")
    for label, side in (("chip-hours", "chip_hours"), ("cost (USD)", "cost_usd")):
        values = [getattr(found.a, side), getattr(found.b, side)]
        table.add_row(label, *("-" if v is None else f"{v:g}" for v in values))
    console.print(table)
    for score in comparison.scores:
        console.print(difference_text(score, comparison.n), highlight=False)
    for cost in found.cost_per_point:
        console.print(f"training {cost.training_job_id}: {escape(cost.verdict)}", highlight=False)
    if found.cost_note:
        console.print(f"[dim]{escape(found.cost_note)}[/]", highlight=False)


@handles_errors
def evaluate(
    ctx: typer.Context,
    checkpoint: Annotated[
        str,
        typer.Argument(help="JOB:export, JOB:best, JOB:last, JOB:step-N or JOB:base, or a Hugging Face checkpoint (hub id, dir, gs://)"),
    ],
    suite: Annotated[str, typer.Option("--suite", help="a built-in suite (arith, arith-a, arith-b, gsm8k) or a suite file (.yaml/.json)")],
    baseline: Annotated[str | None, typer.Option(help="an earlier eval on the same suite to compare with")] = None,
    name: Annotated[str | None, typer.Option(help="the eval job's name (default eval-<suite>-<label>)")] = None,
    run_output: Annotated[
        str | None, typer.Option("--run-output", help="where the eval's run directory goes (default: the referenced job's output)")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="follow the eval to its end and print its scores (and the comparison)")
    ] = False,
    wait: Annotated[bool, typer.Option("--wait", hidden=True, help="the old name of --follow")] = False,
    idempotency_key: Annotated[str | None, typer.Option(help="retries with the same key return the same eval")] = None,
    accelerator: Annotated[
        str | None,
        typer.Option(help="where it runs: cpu (default; transformers on the host) or a single-VM TPU slice, e.g. v5e-1 (the JAX engine)"),
    ] = None,
    output: OutputOption = None,
) -> None:
    """Evaluate a checkpoint on a suite in an eval job of its own; prints the eval id (with --follow, its scores)."""
    if wait:  # one verb for "stay until it ends" across the CLI, as submit's --follow; --wait still works
        err_console.print("[yellow]--wait is now --follow (-f)[/]", highlight=False)
    body: dict[str, Any] = {"checkpoint": checkpoint, "suite": suite_body(suite)}
    for key, value in (("baseline", baseline), ("name", name), ("output", run_output), ("accelerator", accelerator)):
        if value is not None:
            body[key] = value
    client = _context(ctx).client()
    found = client.submit_eval(body, idempotency_key or uuid.uuid4().hex)  # one key per invocation: a retry makes no second eval
    print_submitted(found.id, found.name, found.phase, output)
    if not (follow or wait):
        if output:
            emit(found.model_dump(mode="json"), output, [found.id])
        return
    follow_job(client, found.id, err_console if output else console)
    found = client.eval(found.id)
    if output:
        emit(found.model_dump(mode="json"), output, [found.id])
    else:
        print_scores(found)
        if found.comparison is not None:
            print_comparison(found.comparison)
        elif found.comparison_note:
            err_console.print(f"[yellow]no comparison:[/] {escape(found.comparison_note)}", highlight=False)
    if found.phase != JobPhase.SUCCEEDED:
        raise CliError(f"eval {found.id} ended {found.phase}: {found.message}", CliExit.FAILED)


@handles_errors
def eval_compare(
    ctx: typer.Context,
    a: Annotated[str, typer.Argument(help="an eval id")],
    b: Annotated[str, typer.Argument(help="the eval to compare it with (the baseline)")],
    function: Annotated[str | None, typer.Option(help="the reward function (default: a's primary)")] = None,
    output: OutputOption = None,
) -> None:
    """Eval a minus eval b, paired by row: each score's difference with its 95% CI and McNemar p, and cost per point."""
    found = _context(ctx).client().eval_compare(a, b, function)
    if output:
        emit(found.model_dump(mode="json"), output, [a, b])
    else:
        print_comparison(found)
