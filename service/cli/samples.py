"""`rljob samples ID [--step N] [--json]`: what the policy wrote at a train step and what each
reward function paid for it (GET /v1/jobs/{id}/samples), to see why a job is or is not learning."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from service.domain.job_samples import step_ranges
from service.domain.records.models import SamplesPublic

from .client import handles_errors
from .output import console

MAX_COMPLETION_CHARS = 600  # about a screen per sample; --json has the whole text


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def terminal_safe(text: str, limit: int = MAX_COMPLETION_CHARS) -> str:
    """Model output made safe to print: control characters (a completion can hold terminal escape
    sequences) shown as U+FFFD; a long text keeps its start and its end (where the answer usually
    is) with a note on what was left out between them."""
    clean = "".join(c if c.isprintable() or c in "\n\t" else "\ufffd" for c in text)
    if len(clean) <= limit:
        return clean
    half = limit // 2
    return f"{clean[:half]} … ({len(clean) - 2 * half} characters left out; --json shows all) … {clean[-half:]}"


def print_samples(page: SamplesPublic, console: Console) -> None:
    step_samples = page.samples
    shown = step_samples.samples
    console.print(
        Text(
            f"{page.job_id} step {page.step}: {step_samples.groups_with_signal} of {step_samples.groups} "
            f"prompts with signal (completions with different rewards); {len(shown)} of "
            f"{step_samples.completions} completions shown",
            style="bold",
        )
    )
    console.print(Text(f"steps with samples: {step_ranges(page.steps_available)}", style="dim"))
    for sample in shown:
        scores = "  ".join(f"{name}={_score(value)}" for name, value in sample.rewards.items())
        header = Text(f"\ngroup {sample.group}", style="bold")
        header.append(f"  {scores}  total={_score(sample.total)}")
        if sample.truncated:
            header.append("  (text cut by the trainer)", style="dim")
        console.print(header)
        console.print(Padding(Text(terminal_safe(sample.completion)), (0, 0, 0, 2)))


@handles_errors
def samples(
    ctx: typer.Context,
    job_id: str,
    step: Annotated[int | None, typer.Option(min=1, max=10**9, help="a train step (default: the newest with samples)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the whole answer, texts uncut")] = False,
) -> None:
    """Show a train step's completions with each reward function's score."""
    page = ctx.obj.client().samples(job_id, step)
    if as_json:
        typer.echo(json.dumps(page.model_dump(mode="json"), indent=2))
        return
    print_samples(page, console)
