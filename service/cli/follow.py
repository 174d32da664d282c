"""Follows a job's event stream with a rich progress bar (step/total and reward)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from service.domain.records.models import JobPublic
from service.domain.records.phases import TERMINAL
from trainer.contract import RunStorage

from .client import RljobClient, read_answer
from .output import eval_event_text
from .storage_text import storage_text


def _storage_of(body: dict[str, Any]) -> RunStorage | None:
    """A `storage` event's measurement (the event adds the stage it was taken at)."""
    return RunStorage.model_validate({k: v for k, v in body.items() if k != "stage"}) if body else None


def follow_job(client: RljobClient, job_id: str, console: Console) -> JobPublic:
    """Stream until the job is terminal; returns the final job. Reconnects resume by event id."""
    columns = (
        TextColumn("[bold]{task.fields[phase]:<10}[/] {task.fields[stage]:<7}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]}"),
        TimeElapsedColumn(),
    )
    last_id: int | None = None
    phase = ""
    stored = ""  # the run directory's size as last printed: a measurement is printed when it changed
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(job_id, total=None, phase="", stage="", reward="-")
        while phase not in TERMINAL:
            for event, event_id, raw in client.sse(f"/v1/jobs/{job_id}/events", last_event_id=last_id):
                last_id = event_id if event_id is not None else last_id
                data = json.loads(raw)
                if event == "snapshot":
                    snapshot = read_answer(JobPublic, data)
                    phase = snapshot.phase
                    stored = storage_text(snapshot.storage)
                    _update(
                        progress,
                        task,
                        phase=phase,
                        stage=snapshot.stage,
                        step=snapshot.step,
                        total=snapshot.total_steps,
                        reward=snapshot.metrics.reward_mean,
                    )
                    continue
                body = data.get("data", {})
                if event == "phase":
                    phase = body["phase"]
                    progress.console.print(f"{job_id}: {phase} - {body.get('message', '')}")
                    _update(progress, task, phase=phase)
                elif event == "stage":
                    _update(progress, task, stage=body.get("stage"))
                    if body.get("status") == "finished":
                        progress.console.print(
                            f"{job_id}: stage {body['stage']} finished" + (" (skipped: already done)" if body.get("skipped") else "")
                        )
                elif event == "progress":
                    _update(
                        progress,
                        task,
                        stage="train",
                        step=body.get("step"),
                        total=body.get("total_steps"),
                        reward=(body.get("metrics") or {}).get("reward_mean"),
                    )
                elif event == "health":
                    progress.console.print(
                        f"{job_id}: health {body.get('verdict')} - {body.get('message', '')}", markup=False, highlight=False
                    )
                elif event == "eval" and body.get("point"):
                    progress.console.print(f"{job_id}: {eval_event_text(body)}", markup=False, highlight=False)
                elif event == "storage" and storage_text(_storage_of(body)) != stored:
                    stored = storage_text(_storage_of(body))
                    progress.console.print(f"{job_id}: storage {stored}", markup=False, highlight=False)
                elif event == "artifact":
                    progress.console.print(f"{job_id}: artifact {body.get('name')} -> {body.get('uri')}")
    return client.job(job_id)


def _update(
    progress: Progress,
    task: Any,
    *,
    phase: str | None = None,
    stage: str | None = None,
    step: int | None = None,
    total: int | None = None,
    reward: float | None = None,
) -> None:
    fields: dict[str, Any] = {}
    if phase:
        fields["phase"] = phase
    if stage:
        fields["stage"] = stage
    if reward is not None:
        fields["reward"] = f"{reward:.3f}"
    progress.update(task, completed=step if step is not None else None, total=total if total else None, **fields)
