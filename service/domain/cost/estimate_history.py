"""Which earlier jobs an estimate learns from, and what each one took: pure functions of stored records.

A job's run time is learnt from SUCCEEDED jobs of the caller's team that are the same job as far as time goes
(`JobShapeKey`): the same model shape (its dimensions, from config.json, model.dims or the MaxText name, as the
fit check reads them), the same number of train steps, the same tokens per step (prompt and completion tokens x
batch x generations) and the same accelerator. A job of another shape, step count, batch or hardware is not
used. Only the caller's team's jobs: the estimate names the jobs it used, and another team's are not its to see.

The wait is learnt from recent admissions of any team's jobs on the same accelerator and kind of capacity: the
seconds each spent QUEUED (job_clock.py) before it was admitted. Only a number leaves them, no id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from trainer.contract import JobSpec
from trainer.contract.run.goodput import QUEUED
from trainer.sizing.job_shape import model_shape, read_local_model_config
from trainer.sizing.model_shapes import ModelShape

from .goodput import goodput_parts
from .job_clock import phase_seconds

RUN_PHASES = (JobPhase.LAUNCHING, JobPhase.RUNNING, JobPhase.CANCELLING)  # admission to the end
MAX_HISTORY_JOBS = 20  # the newest matching jobs an estimate uses: recent hosts and code, not last year's
MAX_ADMISSIONS = 20  # the newest admissions the wait is learnt from

ConfigReader = Callable[[str], dict[str, Any] | None]


@dataclass(frozen=True)
class JobShapeKey:
    """What makes two jobs the same job for their run time."""

    model: str  # the model's dimensions in words, or its source when no shape is known
    kind: str  # train or eval
    steps: int  # train steps (num_batches x num_iterations); 0 for an eval job
    tokens_per_step: int  # max_target_length (prompt + completion) x batch_size x num_generations; 0 for an eval job
    accelerator: str

    def says(self) -> str:
        if self.kind == "eval":
            return f"eval jobs of model {self.model} on {self.accelerator}"
        return f"model {self.model}, {self.steps} steps of {self.tokens_per_step} tokens, on {self.accelerator}"


def shape_of(spec: JobSpec, read_config: ConfigReader = read_local_model_config) -> ModelShape | None:
    dims = spec.model.dims.model_dump() if spec.model.dims else None
    return model_shape(spec.model.name, dims, read_config(spec.model.source))


def _shape_text(shape: ModelShape | None, spec: JobSpec) -> str:
    if shape is None:
        return f"source {spec.model.source}"
    return (
        f"emb {shape.emb_dim}, heads {shape.num_query_heads}/{shape.num_kv_heads}, layers {shape.num_layers}, "
        f"mlp {shape.mlp_dim}, head {shape.head_dim}, vocab {shape.vocab_size}"
    )


def train_steps(spec: JobSpec) -> int:
    return spec.grpo.num_batches * spec.grpo.num_iterations


def tokens_per_step(spec: JobSpec) -> int:
    return spec.grpo.max_target_length * spec.grpo.batch_size * spec.grpo.num_generations


def shape_key(spec: JobSpec, read_config: ConfigReader = read_local_model_config) -> JobShapeKey:
    shape = _shape_text(shape_of(spec, read_config), spec)
    if spec.is_eval:
        return JobShapeKey(shape, "eval", 0, 0, spec.hardware.accelerator)
    return JobShapeKey(shape, "train", train_steps(spec), tokens_per_step(spec), spec.hardware.accelerator)


def cached_reader(read_config: ConfigReader = read_local_model_config) -> ConfigReader:
    """One read of each model source's config.json per estimate (history repeats the same few sources)."""
    seen: dict[str, dict[str, Any] | None] = {}

    def read(source: str) -> dict[str, Any] | None:
        if source not in seen:
            seen[source] = read_config(source)
        return seen[source]

    return read


def run_seconds(record: JobRecord) -> float:
    """Seconds from admission to the end: the phases after QUEUED (a requeued job's QUEUED time is not run)."""
    by_phase = phase_seconds(record, record.finished_at or record.updated_at)
    return sum(by_phase[p.value] for p in RUN_PHASES)


def run_parts(record: JobRecord) -> dict[str, float]:
    """The run's seconds by goodput part, the queued part left out (goodput.py)."""
    _, parts = goodput_parts(record, record.finished_at or record.updated_at)
    return {name: max(0.0, seconds) for name, seconds in parts.items() if name != QUEUED}


def matching_history(
    key: JobShapeKey, finished: Iterable[JobRecord], read_config: ConfigReader, limit: int = MAX_HISTORY_JOBS
) -> list[JobRecord]:
    """The newest SUCCEEDED jobs (given newest first) of the same shape key that ran for a measurable time."""
    found = []
    for record in finished:
        if record.phase is not JobPhase.SUCCEEDED or record.finished_at is None:
            continue
        if shape_key(record.spec, read_config) != key or run_seconds(record) <= 0:
            continue
        found.append(record)
        if len(found) == limit:
            break
    return found


def admission_waits(accelerator: str, capacities: tuple[str, ...], recent: Sequence[JobRecord], limit: int = MAX_ADMISSIONS) -> list[float]:
    """QUEUED seconds of the newest jobs (given newest first) admitted on this accelerator and kind of capacity:
    a job that has started, admitted into one of `capacities` (its placement, else the first kind of its spec)."""
    waits = []
    for record in recent:
        if record.started_at is None or record.hardware.accelerator != accelerator:
            continue
        admitted_into = record.placement.capacity if record.placement else record.hardware.capacities[0]
        if admitted_into not in capacities:
            continue
        waits.append(float(record.phase_seconds.get(JobPhase.QUEUED.value, 0.0)))
        if len(waits) == limit:
            break
    return waits
