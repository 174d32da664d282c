"""Which actor checkpoints of a finished run expire, and when: a pure policy (checkpoint_expiry.py carries it out).

A training job's run keeps every actor checkpoint train_rl left (`grpo.keep_last_checkpoints` of them, Orbax's own
retention while it runs) under `rl/<job-id>/checkpoints/actor/<step>/`. Once the job has ended (SUCCEEDED, FAILED or
CANCELLED), its *intermediate* ones expire `days` after `finished_at`, where days is the spec's
`retention.intermediate_checkpoint_days`, else the service's RLJOB_CHECKPOINT_RETENTION_DAYS; 0 keeps them forever.

Kept, whatever their age:
- the final checkpoint (the highest step): what a resume, a fork or `export.checkpoint: last` reads;
- the checkpoint the export was made from: the export stage records it (`exported_checkpoint` in its stage marker,
  trainer/stages/export.py); `last` is the final one, and `best` reads `checkpoints/best/<step>/`, a directory of its
  own; a `params` under `checkpoints/actor/<step>/` (an export by a trainer that read it from there) keeps that step;
- the best weights' record (`best-checkpoint.json`) likewise, when its params lie under the actor directory;
- a checkpoint an eval job that has not ended reads (`evaluation.checkpoint.params`): deleting it would fail the eval;
- everything that is not an actor checkpoint: `checkpoints/best/`, the export (`hf/`), the converted checkpoint
  (`maxtext/`), logs, samples, evaluations, TensorBoard files. The plan names only `checkpoints/actor/<step>` dirs.

Only directories named by a step number are checkpoints; anything else under `actor/` (an Orbax temporary directory of
a save that was cut short) is left as it is.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.domain.records.checkpoint_expiry_models import KeptCheckpoint
from service.domain.records.models import JobRecord
from trainer.contract import RunLayout

KEEP_FOREVER = 0  # days: never expire


def retention_days(record: JobRecord, default_days: int) -> int:
    """The job's retention: its spec's override, else the service's setting."""
    retention = record.spec.retention
    return retention.intermediate_checkpoint_days if retention is not None else default_days


def expiry_due_at(record: JobRecord, default_days: int) -> datetime | None:
    """When the job's intermediate checkpoints expire; None when they never do (not ended, an eval job, kept forever)."""
    days = retention_days(record, default_days)
    if not record.phase.is_terminal() or record.finished_at is None or record.spec.is_eval or days == KEEP_FOREVER:
        return None
    return record.finished_at + timedelta(days=days)


def checkpoint_path(record: JobRecord, step: int) -> str:
    """The checkpoint's directory relative to the run directory."""
    return relative_to_run(record.layout, actor_step_uri(record.layout, step))


def actor_step_uri(layout: RunLayout, step: int) -> str:
    return f"{layout.actor_checkpoints}/{step}"


def relative_to_run(layout: RunLayout, uri: str) -> str:
    root = layout.root.rstrip("/") + "/"
    if not uri.startswith(root):
        raise ValueError(f"{uri} is not inside the run directory {layout.root}")
    return uri[len(root) :]


def actor_step_of(layout: RunLayout, uri: str) -> int | None:
    """The step of the actor checkpoint `uri` lies in (its directory or a path below it), else None."""
    prefix = layout.actor_checkpoints.rstrip("/") + "/"
    if not uri.startswith(prefix):
        return None
    head = uri[len(prefix) :].split("/", 1)[0]
    return int(head) if head.isdigit() else None


@dataclass(frozen=True)
class RetentionPlan:
    expiring: list[int]  # steps, ascending
    kept: list[KeptCheckpoint]


def plan_retention(
    record: JobRecord, steps: Collection[int], *, referenced: Mapping[str, str] | None = None, in_use: Mapping[int, str] | None = None
) -> RetentionPlan:
    """Split the actor checkpoints found (`steps`) into expiring and kept.

    `referenced`: why -> a URI the run's own records point at (`exported`: the export's params, `best record`: the best
    weights' params); a step it lies in is kept. `in_use`: step -> the eval job (not ended) that reads it."""
    found = sorted(set(steps))
    if not found:
        return RetentionPlan([], [])
    keep: dict[int, list[str]] = {found[-1]: ["final"]}
    for why, uri in (referenced or {}).items():
        step = actor_step_of(record.layout, uri)
        if step is not None and step in found:
            keep.setdefault(step, []).append(why)
    for step, eval_id in (in_use or {}).items():
        if step in found:
            keep.setdefault(step, []).append(f"in use by {eval_id}")
    kept = [KeptCheckpoint(step=step, why=", ".join(whys)) for step, whys in sorted(keep.items())]
    return RetentionPlan([step for step in found if step not in keep], kept)


def steps_in_use(record: JobRecord, active: Collection[JobRecord]) -> dict[int, str]:
    """Steps of this job's actor checkpoints that eval jobs which have not ended read."""
    found: dict[int, str] = {}
    for other in active:
        evaluation = other.spec.evaluation
        if other.phase.is_terminal() or evaluation is None or evaluation.checkpoint.params is None:
            continue
        step = actor_step_of(record.layout, evaluation.checkpoint.params)
        if step is not None:
            found.setdefault(step, other.id)
    return found
