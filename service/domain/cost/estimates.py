"""What a job is expected to take, before it is created: pure functions of its spec, stored records, a time and the
price table (the service gathers those: estimate_source.py).

- Queue: the place in line the launcher says a job submitted now would take (QueuePreview), and the wait from
  the QUEUED seconds of recent admissions on the same accelerator and kind of capacity (estimate_history.py):
  their median, in the range they spanned. Null when neither says anything.
- Run (admission to the end): from the caller's team's SUCCEEDED jobs of the same shape (model, steps, tokens per
  step, accelerator): their geometric mean, in a 95% prediction interval for one more job on log(seconds) with
  Student's t (estimate_stats.py), split by goodput part as those jobs' time was. Without such jobs, a formula:
  on TPU from rates measured on one v5e chip, scaled to other generations by their documented peak FLOP/s and HBM
  bandwidth (tpu_step_time.py); on cpu from the tokens the job will process at an assumed rate; in a wide range
  either way. The estimate says which, what was measured and what was assumed.
- wall = wait + run; chip-hours = chips x run hours (a cpu job holds no chips); dollars at the price table for
  the spec's kind of capacity (a set: low at the cheapest kind, high at the dearest, expected at the first);
  storage from those jobs' measured run directories, else from the parameters.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from service.domain.records.estimate_models import EstimateRange, JobEstimate
from service.domain.records.models import JobRecord
from trainer.contract import JobSpec
from trainer.contract.accelerators.tpu import tpu_slice
from trainer.contract.run.goodput import LOGPROBS, OTHER, ROLLOUT, UPDATE
from trainer.contract.spec.hardware import capacity_text
from trainer.sizing.job_shape import read_local_model_config
from trainer.sizing.model_shapes import ModelShape

from .estimate_history import (
    ConfigReader,
    JobShapeKey,
    admission_waits,
    cached_reader,
    matching_history,
    run_parts,
    run_seconds,
    shape_key,
    shape_of,
    tokens_per_step,
    train_steps,
)
from .estimate_stats import prediction_interval
from .tpu_step_time import CHECKPOINT_STATE_COPIES, tpu_train_time
from .usage import PriceTable, chips_of, family_of, price_of

# The formula's assumptions, stated in every estimate made with it (a TPU job's measured rates: tpu_step_time.py).
ASSUMED_CPU_FLOPS_PER_CORE = 10e9  # float32 matmuls through XLA on one host core
ASSUMED_STARTUP_S = {"cpu": 60.0, "tpu": 600.0}  # process start, convert, compile, export: not per token
# The formula's range: its figure / 4 to x 4. Kept on TPU too: the rates reproduce two small models on one v5e chip
# with completions at full length; larger models, slices, other generations (scaled, not measured), completions that
# stop early and the assumed start-up are not measured.
FORMULA_FACTOR = 4.0
ASSUMED_EVAL_S, EVAL_LOW_S, EVAL_HIGH_S = 600.0, 60.0, 3600.0  # an eval job's rows are not counted at submit


@dataclass(frozen=True)
class EstimateInputs:
    spec: JobSpec  # as check_submission returns it (its team set)
    now: datetime
    prices: PriceTable
    finished: Sequence[JobRecord] = ()  # the caller's team's SUCCEEDED jobs, newest first
    recent: Sequence[JobRecord] = ()  # the newest jobs of every team, newest first (their waits)
    queue_position: int | None = None  # QueuePreview's answer: 0 = admitted at once
    cpu_cores: int = 1  # the cores a cpu job gets (the formula's rate)
    read_config: ConfigReader = read_local_model_config


@dataclass(frozen=True)
class _Run:
    run: EstimateRange
    parts: dict[str, float]
    basis: str
    detail: str
    history_ids: list[str]
    storage_bytes: int | None
    storage_detail: str


def _range(expected: float, low: float, high: float, digits: int = 3) -> EstimateRange:
    return EstimateRange(expected=round(expected, digits), low=round(low, digits), high=round(high, digits))


def _scaled(parts: dict[str, float], total: float) -> dict[str, float]:
    measured = sum(parts.values())
    if measured <= 0:
        return {OTHER: round(total, 3)}
    return {name: round(seconds * total / measured, 3) for name, seconds in parts.items()}


def _from_history(history: list[JobRecord], key: JobShapeKey) -> _Run:
    interval = prediction_interval([run_seconds(r) for r in history])
    mean_parts: dict[str, float] = {}
    for record in history:
        for name, seconds in run_parts(record).items():
            mean_parts[name] = mean_parts.get(name, 0.0) + seconds / len(history)
    sizes = [r.report.storage.total_bytes for r in history if r.report.storage is not None]
    storage = int(statistics.median(sizes)) if sizes else None
    jobs = "1 finished job" if len(history) == 1 else f"{len(history)} finished jobs"
    return _Run(
        run=_range(interval.expected, interval.low, interval.high),
        parts=_scaled(mean_parts, interval.expected),
        basis="history",
        detail=f"{jobs} of the same shape ({key.says()}): run time {interval.method}",
        history_ids=[r.id for r in history],
        storage_bytes=storage,
        storage_detail=f"the median measured run directory of {len(sizes)} of those jobs" if sizes else "unknown: none was measured",
    )


def _formula_storage(spec: JobSpec, parameters: int | None) -> tuple[int | None, str]:
    if parameters is None:
        return None, "unknown: the model's size is not known at submit"
    if spec.is_eval:
        return 0, "an eval job writes its report and outcomes only"
    weight_bytes = 4 if spec.model.dtype == "float32" else 2
    copies = CHECKPOINT_STATE_COPIES * spec.grpo.keep_last_checkpoints + 1 + (1 if spec.export.enabled else 0)
    return parameters * weight_bytes * copies, (
        f"formula: {parameters:,} parameters x {weight_bytes} bytes ({spec.model.dtype}) x {copies} copies "
        f"({spec.grpo.keep_last_checkpoints} checkpoint(s) kept x {CHECKPOINT_STATE_COPIES} for the optimizer's moments, "
        f"the converted checkpoint{', the export' if spec.export.enabled else ''})"
    )


def _from_formula(spec: JobSpec, shape: ModelShape | None, cpu_cores: int) -> _Run:
    parameters = shape.parameters if shape else None
    storage, storage_detail = _formula_storage(spec, parameters)
    if spec.is_eval:
        return _Run(
            run=_range(ASSUMED_EVAL_S, EVAL_LOW_S, EVAL_HIGH_S),
            parts={OTHER: ASSUMED_EVAL_S},
            basis="formula",
            detail=f"formula: no finished eval job of this shape; an eval job's rows are not counted at submit, so an "
            f"assumed {ASSUMED_EVAL_S:g} s, in {EVAL_LOW_S:g}-{EVAL_HIGH_S:g} s",
            history_ids=[],
            storage_bytes=storage,
            storage_detail=storage_detail,
        )
    tpu = tpu_slice(spec.hardware.accelerator)
    startup = ASSUMED_STARTUP_S["tpu" if tpu else "cpu"]
    tokens = tokens_per_step(spec) * train_steps(spec)
    words = (
        f"formula, no finished job of this shape: {tokens_per_step(spec)} tokens per step (max_target_length x batch_size "
        f"x num_generations) x {train_steps(spec)} steps = {tokens:,} tokens"
    )
    parts = {OTHER: startup}
    startup_words = f"plus an assumed {startup:g} s of start-up, convert and export"
    if shape is None:
        words += f"; the model's size is unknown at submit, so only an assumed {startup:g} s of start-up, convert and export"
    elif tpu is not None:
        train = tpu_train_time(spec, shape, tpu)
        parts.update(train.parts)
        words += f"; {train.words}; {startup_words}"
    else:
        rate, n = cpu_cores * ASSUMED_CPU_FLOPS_PER_CORE, shape.parameters
        reference = 2 if spec.grpo.beta > 0 else 0  # the frozen reference model's forward pass
        per_token = {ROLLOUT: 2.0 * n, LOGPROBS: (2.0 + reference) * n, UPDATE: 6.0 * n}
        parts.update({name: tokens * flops / rate for name, flops in per_token.items()})
        words += (
            f", each {sum(per_token.values()) / n:g} x {n:,} parameters FLOPs (sampling, log-probs, update), "
            f"at an assumed {ASSUMED_CPU_FLOPS_PER_CORE / 1e9:g} GFLOP/s per cpu core x {cpu_cores} cores; {startup_words}"
        )
    words += f"; the range is that / {FORMULA_FACTOR:g} to x {FORMULA_FACTOR:g}"
    total = sum(parts.values())
    return _Run(
        run=_range(total, total / FORMULA_FACTOR, total * FORMULA_FACTOR),
        parts={name: round(seconds, 3) for name, seconds in parts.items()},
        basis="formula",
        detail=words,
        history_ids=[],
        storage_bytes=storage,
        storage_detail=storage_detail,
    )


def _wait(inputs: EstimateInputs) -> tuple[EstimateRange | None, str]:
    hardware = inputs.spec.hardware
    waits = admission_waits(hardware.accelerator, hardware.capacities, inputs.recent)
    where = f"{hardware.accelerator} on {capacity_text(hardware.capacities)}"
    if waits:
        return _range(statistics.median(waits), min(waits), max(waits)), (
            f"the QUEUED seconds of the {len(waits)} newest admission(s) of {where}: their median, in the range they spanned"
        )
    if inputs.queue_position == 0:
        return _range(0.0, 0.0, 0.0), "the launcher would admit it at once; no recent admission of " + where
    return None, f"unknown: no recent admission of {where}" + (
        f", and the launcher puts it at place {inputs.queue_position} in line" if inputs.queue_position else ""
    )


def _cost(spec: JobSpec, chip_hours: EstimateRange, prices: PriceTable) -> EstimateRange | None:
    family = family_of(spec.hardware.accelerator)
    kinds = spec.hardware.capacities
    priced = [p for p in (price_of(prices, family, kind) for kind in kinds) if p is not None]
    if not priced:
        return None
    first = price_of(prices, family, kinds[0])
    expected = chip_hours.expected * (first if first is not None else statistics.median(priced))
    return _range(expected, chip_hours.low * min(priced), chip_hours.high * max(priced), digits=6)


def estimate_job(inputs: EstimateInputs) -> JobEstimate:
    spec = inputs.spec
    read = cached_reader(inputs.read_config)
    key = shape_key(spec, read)
    history = matching_history(key, inputs.finished, read)
    shape = shape_of(spec, read)
    parameters = shape.parameters if shape else None
    run = _from_history(history, key) if history else _from_formula(spec, shape, inputs.cpu_cores)
    storage, storage_detail = run.storage_bytes, run.storage_detail
    if storage is None and history:  # none of those jobs measured its run directory: the formula's figure
        storage, storage_detail = _formula_storage(spec, parameters)
    wait, wait_detail = _wait(inputs)
    start = wait or EstimateRange(expected=0.0, low=0.0, high=0.0)
    wall = _range(start.expected + run.run.expected, start.low + run.run.low, start.high + run.run.high)
    chips = chips_of(spec.hardware.accelerator)
    chip_hours = _range(chips * run.run.expected / 3600, chips * run.run.low / 3600, chips * run.run.high / 3600, digits=6)
    return JobEstimate(
        made_at=inputs.now,
        basis="history" if run.basis == "history" else "formula",
        basis_detail=run.detail,
        history_job_ids=run.history_ids,
        queue_position=inputs.queue_position,
        wait_s=wait,
        run_s=run.run,
        run_parts_s=run.parts,
        wall_s=wall,
        chip_hours=chip_hours,
        cost_usd=_cost(spec, chip_hours, inputs.prices),
        storage_bytes=storage,
        wait_detail=wait_detail if wait is not None else wait_detail + " (the wall time counts no wait)",
        storage_detail=storage_detail,
    )
