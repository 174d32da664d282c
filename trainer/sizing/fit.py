"""Will a job fit in its accelerator's memory? A per-chip estimate, made at submit before any TPU is taken.

A chip needs the most that any phase of a GRPO step (MaxText 0.2.5's train_rl over Tunix) holds at once
(fit_phases.py, each term with the installed code it follows):
- resident all run: the actor's parameters and AdamW's two moments (in weight_dtype), sharded (FSDP) over the
  trainer's devices; with `grpo.beta > 0` the frozen reference copy; the rollout engine's weights (vLLM's own copy
  split over a replica's tensor-parallel chips, or the jax engine's decoding layout in the compute dtype);
- rollout: the KV cache of batch x generations sequences of max_target_length + kv_cache_buffer tokens (Tunix's
  kv_cache_size), split over the data-parallel replicas and over at most num_kv_heads tensor-parallel chips;
  with the jax engine, the distinct prompts' prefill cache beside it; before it, the jax engine's fresh decoding
  layout beside the old one, the update's new parameters not yet freed, and the re-deriving program's temporaries;
- log-probs (reference, and the old policy with num_iterations > 1): the fp32 logits of every sequence and position;
- update: the step's new parameters (the gradients are written into their buffer) and the fp32 logits kept for the
  backward pass (one layer's recompute with dot-product attention's fp32 scores, where that is larger; each layer's
  input and q/k/v are offloaded to host by rl.yml on TPU, or with `layers_in_hbm` kept in HBM beside them); sharded
  over the batch, so over at most batch x generations devices.
On one VM (and on cpu) the trainer and the rollout share every device, so each phase also holds the other side's
resident part; on several VMs each side has its own chips.

Not covered: vLLM's own reservation (`hbm_utilization_vllm`, 0.72 of HBM, caps what it takes rather than what the
job needs), the rollout's prefill and sampling temporaries, evaluation beyond its KV cache, checkpoint saving, and
fragmentation. A phase holds its arrays and its own programs' temporaries (libtpu's reservation, in the same HBM:
fit_phases.py), and the verdict weighs the largest phase against what XLA may allocate of a chip, JAX's `bytes_limit`
where it was read on a chip (v5e: 16,909,336,064 of 16 GiB), the whole HBM elsewhere. Against the v5e chip
(bench/results/tpu_grpo.json, bench/estimate/fit_calibration_tpu.py, tests/trainer/sizing/test_fit_calibration.py) it comes within
15% of the arrays plus temporaries the chip held, and refuses both shapes that ran out of memory there.
Pure: the spec and the model's shape in, an estimate out.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainer.contract.accelerators.tpu import CPU_ACCELERATOR, TPU_SLICES, tpu_slice
from trainer.contract.spec.job import JobSpec

from .eval_fit import eval_phase
from .fit_phases import PerChipBytes, PhaseBytes, layout_program_bytes, per_chip_bytes, step_phases
from .job_shape import model_shape, read_local_model_config
from .model_shapes import ModelShape
from .tpu_memory import GIB, allocatable_bytes_per_chip, hbm_bytes_per_chip

TIGHT_FRACTION = 0.9  # above this share of a chip's memory a job is accepted with a warning
Verdict = Literal["fits", "tight", "does-not-fit", "unchecked"]
__all__ = [
    "FitEstimate",
    "PerChipBytes",
    "PhaseBytes",
    "estimate_fit",
    "estimate_job_fit",
    "keeps_layers_in_hbm",
    "per_chip_bytes",
]


class FitEstimate(BaseModel):
    """The submit-time memory estimate of one job on its accelerator (trainer/sizing/fit.py)."""

    model_config = ConfigDict(frozen=True)

    accelerator: str
    model_source: str = Field(description="where the model's shape came from: config.json, model.dims or maxtext <name>")
    parameters: int
    trainer_devices: int = Field(description="devices the training state is sharded over")
    rollout_devices: int
    per_chip: PerChipBytes
    phases: list[PhaseBytes] = Field(default_factory=list, description="what each phase of a step holds on one chip")
    peak_phase: str = Field("", description="the phase that needs the most")
    total_bytes_per_chip: int
    capacity_bytes_per_chip: int | None = Field(description="HBM per chip; null on cpu (host memory is not checked)")
    verdict: Verdict
    message: str = Field(description="the numbers, and what to do when it does not fit")
    # Not serialised: the submit's 422 names this field (service/domain/submission.py); the message says the rest.
    refused_field: str | None = Field(None, exclude=True, description="the spec field a does-not-fit verdict refuses")


def gib(n: int) -> str:
    return f"{n / GIB:.1f}"


def _allocatable_note(allocatable: int, capacity: int) -> str:
    return "" if allocatable == capacity else f" (XLA may allocate {gib(allocatable)} of them)"


def phases_of(spec: JobSpec, shape: ModelShape, parts: PerChipBytes) -> list[PhaseBytes]:
    return step_phases(parts, spec.hardware.accelerator, layout_program_bytes(spec, shape))


def _breakdown(parts: PerChipBytes, peak: PhaseBytes) -> str:
    return ", ".join(f"{name} {gib(n)}" for name, n in parts.parts() if n) + f"; the most during the {peak.name}"


def _fits_on(spec: JobSpec, shape: ModelShape, accelerator: str) -> bool:
    tpu = TPU_SLICES[accelerator]
    hardware = spec.hardware.model_copy(
        update={
            "accelerator": accelerator,
            "chips_per_vm": tpu.chips_per_vm,
            "rollout_data_parallelism": 1,
            "rollout_tensor_parallelism": -1,
        }
    )
    resized = spec.model_copy(update={"hardware": hardware})
    parts, _, _ = per_chip_bytes(resized, shape)
    return max(p.total for p in phases_of(resized, shape, parts)) <= allocatable_bytes_per_chip(tpu)


def smallest_fitting_slice(spec: JobSpec, shape: ModelShape) -> str | None:
    """The slice with the fewest chips of the spec's TPU generation this job would fit on, if any."""
    current = tpu_slice(spec.hardware.accelerator)
    if current is None:
        return None
    same_generation = sorted((s for s in TPU_SLICES.values() if s.generation == current.generation), key=lambda s: s.chips)
    return next((s.name for s in same_generation if _fits_on(spec, shape, s.name)), None)


def estimate_fit(spec: JobSpec, shape: ModelShape, layers_in_hbm: bool = False) -> FitEstimate:
    """`layers_in_hbm`: the update keeping each layer's input and q/k/v in HBM (MaxText's `device` for rl.yml's
    offloaded four; fit_phases.saved_layer_activations) instead of rl.yml's offload to host."""
    accelerator = spec.hardware.accelerator
    if spec.is_eval:  # the JAX evaluation engine on one chip (eval_fit.py), nothing of a GRPO step
        parts, phase = eval_phase(spec, shape)
        trainer, rollout, phases = 1, 1, [phase]
    else:
        parts, trainer, rollout = per_chip_bytes(spec, shape, layers_in_hbm)
        phases = phases_of(spec, shape, parts)
    peak = max(phases, key=lambda p: p.total)
    total = peak.total
    tpu = tpu_slice(accelerator)
    capacity = hbm_bytes_per_chip(tpu) if tpu else None
    needs = f"needs ~{gib(total)} GiB per chip ({_breakdown(parts, peak)})"
    if layers_in_hbm and tpu is not None and not spec.is_eval:
        needs += " with each layer's input and q/k/v kept in HBM for the backward pass"
    verdict: Verdict
    refused_field = None
    if tpu is None or capacity is None:
        verdict = "unchecked"
        message = f"{needs}; on {CPU_ACCELERATOR} this is host memory, which is not checked at submit"
    elif total > (allocatable := allocatable_bytes_per_chip(tpu)):
        verdict = "does-not-fit"
        message = f"{needs}, {accelerator} has {capacity / GIB:g} GiB per chip{_allocatable_note(allocatable, capacity)}"
        offloaded = estimate_fit(spec, shape) if layers_in_hbm and not spec.is_eval else None
        fits_offloaded = offloaded if offloaded is not None and offloaded.verdict != "does-not-fit" else None
        refused_field = "hardware.accelerator" if fits_offloaded is None else "hardware.layer_activations"
        larger = None if spec.is_eval else smallest_fitting_slice(spec, shape)  # the engine uses one chip of any slice
        message += (
            f"; keeping each layer's activations in HBM is what does not fit: with hardware.layer_activations auto or "
            f"offload it needs ~{gib(fits_offloaded.total_bytes_per_chip)} GiB"
            if fits_offloaded is not None
            else f"; it would fit on {larger}"
            if larger and larger != accelerator
            else "; evaluate it on cpu (accelerator: cpu), or with fewer samples or new tokens"
            if spec.is_eval
            else "; no slice of this generation holds it: lower batch_size, num_generations or the lengths, or use bfloat16"
        )
    else:
        share = total / allocatable
        verdict = "tight" if share > TIGHT_FRACTION else "fits"
        chip = f"{accelerator}'s {capacity / GIB:g} GiB per chip"
        of_what = chip if allocatable == capacity else f"the {gib(allocatable)} GiB XLA may allocate of {chip}"
        message = f"{needs}, {share:.0%} of {of_what}"
        if verdict == "tight":
            message += "; close to the limit (the estimate leaves out fragmentation and sampling temporaries): it may run out of memory"
    return FitEstimate(
        accelerator=accelerator,
        model_source=shape.source,
        parameters=shape.parameters,
        trainer_devices=trainer,
        rollout_devices=rollout,
        per_chip=parts,
        phases=phases,
        peak_phase=peak.name,
        total_bytes_per_chip=total,
        capacity_bytes_per_chip=capacity,
        verdict=verdict,
        message=message,
        refused_field=refused_field,
    )


def estimate_job_fit(spec: JobSpec, hf_config: dict[str, Any] | None = None) -> FitEstimate | None:
    """The estimate for `spec` (None when its model's shape is unknown). Without `hf_config`, the
    checkpoint's config.json is read when `model.source` is a local directory."""
    if hf_config is None:
        hf_config = read_local_model_config(spec.model.source)
    dims = spec.model.dims.model_dump() if spec.model.dims else None
    shape = model_shape(spec.model.name, dims, hf_config)
    return None if shape is None else estimate_fit(spec, shape, keeps_layers_in_hbm(spec, shape))


def keeps_layers_in_hbm(spec: JobSpec, shape: ModelShape | None) -> bool:
    """Whether this job's update keeps each layer's saved activations in HBM (trainer/sizing/layer_activations.py).
    `auto` keeps them only where the estimate with them kept says "fits" (not "tight"); with no shape to estimate from,
    rl.yml's offload stands. On cpu the host is the device: nothing to choose."""
    choice = spec.hardware.layer_activations
    if tpu_slice(spec.hardware.accelerator) is None or spec.is_eval or choice == "offload":
        return False
    if choice == "hbm":
        return True
    return shape is not None and estimate_fit(spec, shape, layers_in_hbm=True).verdict == "fits"
