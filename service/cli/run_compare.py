"""`rljob diff A B` and `rljob rerun ID --set key=value`: compare two jobs, or submit a job again with changes.

Client side: HTTP only (tests/test_import_contract.py, CLI_CLIENT_SIDE). A --set value is data: it is parsed as one
YAML scalar (yaml.safe_load), never evaluated, and the server validates the new spec as it does any submit.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Annotated, Any

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from service.domain.records.job_eval_models import EvalPoint

from .client import CliContext, CliError, CliExit, handles_errors
from .eval_commands import print_comparison
from .output import OutputOption, console, emit, err_console, eval_point_text, fmt_metric, print_submitted

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY=VALUE", help="a spec key to change, e.g. grpo.learning_rate=1e-5 (repeatable)"),
]
# Set by the service (team from the token) or naming the run rather than shaping it.
NOT_SETTABLE = frozenset({"team"})
OUTCOME_ROWS = (
    ("phase", "phase"),
    ("final reward", "final_reward"),
    ("best reward", "best_reward"),
    ("best reward step", "best_reward_step"),
    ("eval before", "eval_before"),
    ("eval after", "eval_after"),
    ("steps", "steps"),
    ("wall time (s)", "wall_s"),
    ("chip-hours", "chip_hours"),
    ("cost (USD)", "cost_usd"),
)


def _context(ctx: typer.Context) -> CliContext:
    obj: CliContext = ctx.obj  # set by main._global for every command
    return obj


def _value_text(value: Any) -> str:
    return "(absent)" if value is None else escape(json.dumps(value) if not isinstance(value, str) else value)


@handles_errors
def diff(
    ctx: typer.Context,
    a: Annotated[str, typer.Argument(help="a job id")],
    b: Annotated[str, typer.Argument(help="the job id to compare it with")],
    output: OutputOption = None,
) -> None:
    """What differs between two jobs (spec, versions, data, reward code, hardware) and both outcomes side by side; two
    eval jobs also with their paired difference (rljob eval-compare)."""
    client = _context(ctx).client()
    found = client.diff(a, b)
    # Two evals: their scores side by side and the paired difference; a pair that cannot be compared says why.
    evals = client.job(a).eval_job is not None and client.job(b).eval_job is not None
    compared, refused = None, None
    if evals:
        try:
            compared = client.eval_compare(a, b)
        except CliError as e:
            refused = e.message
    if output:
        answer = found.model_dump(mode="json")
        if evals:
            answer["eval_comparison"] = compared.model_dump(mode="json") if compared else {"refused": refused}
        emit(answer, output, [a, b])
        return
    changes = [("spec", item) for item in found.spec]
    changes += [(section, item) for section, items in found.record.items() for item in items]
    table = Table(title=f"{a} vs {b}", title_justify="left")
    for column in ("what", "key", a, b):
        table.add_column(column)
    for section, item in changes:
        table.add_row(section, escape(item.key), _value_text(item.a), _value_text(item.b))
    if changes:
        console.print(table)
    else:
        console.print("no differences in spec or repro record")
    for job_id in found.missing_records:
        err_console.print(f"[yellow]{job_id} has no repro record:[/] versions, data and hardware not compared", highlight=False)
    outcomes = Table(title="outcome", title_justify="left")
    outcomes.add_column("")
    for outcome in found.outcomes:
        outcomes.add_column(f"{outcome.job_id} ({escape(outcome.name)})")
    for label, key in OUTCOME_ROWS:
        outcomes.add_row(label, *(_outcome_text(getattr(outcome, key)) for outcome in found.outcomes))
    console.print(outcomes)
    if compared is not None:
        print_comparison(compared)
    elif refused is not None:
        err_console.print(f"[yellow]evals not compared:[/] {escape(refused)}", highlight=False)


def _outcome_text(value: Any) -> str:
    if isinstance(value, EvalPoint):
        return eval_point_text(value)
    if isinstance(value, float):
        return fmt_metric(value)
    return "-" if value is None else escape(str(value))


def parse_scalar(key: str, text: str) -> Any:
    """One JSON or YAML value, as data (never evaluated). JSON first: YAML 1.1 reads 1e-5 (no dot) as a string."""
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise CliError(f"--set {key}: {text!r} is not a YAML value ({e.__class__.__name__})", CliExit.BAD_INPUT) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise CliError(f"--set {key}: {text!r} is not a finite number", CliExit.BAD_INPUT)
    return value


def apply_setting(spec: dict[str, Any], assignment: str) -> tuple[str, Any, Any]:
    """spec with one `key=value` applied in place; returns (key, old, new). CliError (BAD_INPUT) for a key the spec
    lacks, a section rather than a value, or a value that is not one YAML scalar."""
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise CliError(f"--set {assignment!r}: expected KEY=VALUE, e.g. grpo.learning_rate=1e-5", CliExit.BAD_INPUT)
    parts = key.split(".")
    if parts[0] in NOT_SETTABLE:
        raise CliError(f"--set {key}: set by the service from your token, not by the spec", CliExit.BAD_INPUT)
    parent: Any = spec
    for depth, part in enumerate(parts[:-1]):
        parent = parent.get(part) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            raise CliError(f"--set {key}: the spec has no section {'.'.join(parts[: depth + 1])!r}", CliExit.BAD_INPUT)
    if parts[-1] not in parent:
        raise CliError(f"--set {key}: the spec has no key {key!r} (see `rljob status ID -o json` for its keys)", CliExit.BAD_INPUT)
    old = parent[parts[-1]]
    if isinstance(old, dict):
        raise CliError(f"--set {key}: names a section, not a value; set one of its keys", CliExit.BAD_INPUT)
    new = parse_scalar(key, text)
    if isinstance(new, (dict, list)) or not isinstance(new, (str, int, float, bool, type(None))):
        raise CliError(f"--set {key}: {text!r} is not one scalar (a number, string, true/false or null)", CliExit.BAD_INPUT)
    parent[parts[-1]] = new
    return key, old, new


@handles_errors
def rerun(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="the job to run again")],
    setting: SetOption = None,
    output: OutputOption = None,
) -> None:
    """Submit a job again from its spec, with each --set change; prints the new id and the changes."""
    changes = []
    client = _context(ctx).client()
    spec = client.stored_spec(job_id)
    spec.pop("team", None)  # the service sets it from the token
    for assignment in setting or []:
        changes.append(apply_setting(spec, assignment))
    job = client.submit(spec, uuid.uuid4().hex)
    lines = [f"{key}: {json.dumps(old)} -> {json.dumps(new)}" for key, old, new in changes] or ["no changes"]
    if output:
        emit(job.model_dump(mode="json"), output, [job.id])
        for line in lines:
            err_console.print(escape(line), highlight=False)
        return
    print_submitted(job.id, job.name, job.phase, output, of=job_id)
    for line in lines:
        console.print(f"  {escape(line)}", highlight=False)
