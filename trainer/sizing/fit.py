"""Will a job fit in its accelerator's memory? A per-chip estimate, made at submit before any TPU is taken.

What each chip holds while MaxText 0.2.5's train_rl runs GRPO (Tunix's RL cluster):
- the actor's parameters, its gradients and AdamW's two moments, sharded (FSDP) over the trainer's
  devices. The moments are in the parameters' dtype: MaxText's optimizer (utils_rl.get_optimizer) is
  `optax.adamw` without `mu_dtype`, and rl.yml/`model.dtype` set `weight_dtype` (activations and the
  jax engine's KV cache are in the compute dtype, `model.compute_dtype`);
- with `grpo.beta > 0`, a frozen reference copy of the parameters, sharded the same way (beta 0 drops it);
- training activations: the fp32 logits and their gradient over the whole batch (batch x generations x
  max_target_length x vocab), each layer's input kept for the backward pass (rl.yml offloads these to
  host memory on TPU; counted here, so an upper bound), and one layer's recomputed working set with
  dot-product attention's fp32 scores; sharded over the batch, so over at most batch x generations devices;
- the rollout: vLLM holds its own copy of the weights, split over a replica's tensor-parallel chips
  (the jax engine samples from the actor's own weights: no copy), and the KV cache of
  batch x generations sequences of max_target_length + kv_cache_buffer tokens (Tunix's kv_cache_size),
  split over the data-parallel replicas and over at most num_kv_heads tensor-parallel chips.
On one VM (and on cpu) the trainer and the rollout share every device, so the parts add up; on several
VMs they have half of the chips each, and a chip holds the larger of the two sides.

Not covered: XLA's temporary buffers and fragmentation, vLLM's own reservation (`hbm_utilization_vllm`,
0.72 of HBM, caps what it takes rather than what the job needs), the reference model's forward pass,
evaluation, and checkpoint saving. bench/fit_calibration.py compares the estimate with a measured run.
Pure: the spec and the model's shape in, an estimate out.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainer.contract.spec import JobSpec
from trainer.contract.tpu import CPU_ACCELERATOR, TPU_SLICES, rollout_devices, tpu_slice

from .job_shape import model_shape, read_local_model_config
from .model_shapes import ModelShape
from .tpu_memory import GIB, hbm_bytes_per_chip

TIGHT_FRACTION = 0.9  # above this share of a chip's memory a job is accepted with a warning
FP32_BYTES = 4
Verdict = Literal["fits", "tight", "does-not-fit", "unchecked"]


class PerChipBytes(BaseModel):
    """One chip's share of each part, in bytes."""

    model_config = ConfigDict(frozen=True)

    params: int
    optimizer: int = Field(description="AdamW's first and second moments")
    gradients: int
    reference: int = Field(description="the frozen reference model (0 with grpo.beta 0)")
    activations: int
    rollout_weights: int = Field(description="the vLLM engine's copy of the weights (0 with the jax engine)")
    kv_cache: int

    def trainer_side(self) -> int:
        return self.params + self.optimizer + self.gradients + self.reference + self.activations

    def rollout_side(self) -> int:
        return self.rollout_weights + self.kv_cache

    def parts(self) -> list[tuple[str, int]]:
        return [
            ("params", self.params),
            ("optimizer", self.optimizer),
            ("gradients", self.gradients),
            ("reference", self.reference),
            ("activations", self.activations),
            ("rollout weights", self.rollout_weights),
            ("KV cache", self.kv_cache),
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
    total_bytes_per_chip: int
    capacity_bytes_per_chip: int | None = Field(description="HBM per chip; null on cpu (host memory is not checked)")
    verdict: Verdict
    message: str = Field(description="the numbers, and what to do when it does not fit")


def gib(n: int) -> str:
    return f"{n / GIB:.1f}"


def _rollout_split(data: int, tensor: int, devices: int) -> tuple[int, int]:
    """(replicas, chips per replica), deriving a -1 from the other as MaxText does (trainer/contract/tpu.py)."""
    if data == -1:
        data = max(1, devices // max(1, tensor))
    if tensor == -1:
        tensor = max(1, devices // data)
    return data, tensor


def per_chip_bytes(spec: JobSpec, shape: ModelShape) -> tuple[PerChipBytes, int, int]:
    """(each part's bytes on one chip, trainer devices, rollout devices)."""
    tpu = tpu_slice(spec.hardware.accelerator)
    trainer = tpu.trainer_devices if tpu else 1
    rollout = rollout_devices(spec.hardware.accelerator)
    weight_bytes = 2 if spec.model.dtype == "bfloat16" else FP32_BYTES
    # Activations are in MaxText's compute `dtype`; the jax engine's KV cache too, vLLM's in weight_dtype.
    compute_bytes = 2 if spec.model.resolved_compute_dtype(spec.hardware.accelerator) == "bfloat16" else FP32_BYTES
    g, h = spec.grpo, spec.hardware
    state = math.ceil(shape.parameters * weight_bytes / trainer)

    sequences = g.batch_size * g.num_generations
    tokens = sequences * g.max_target_length
    logits = 2 * tokens * shape.vocab_size * FP32_BYTES  # the logits and their gradient
    layer_inputs = shape.num_layers * tokens * shape.emb_dim * compute_bytes
    q_width = shape.num_query_heads * shape.head_dim
    one_layer = tokens * (3 * shape.emb_dim + q_width + 3 * shape.mlp_dim) * compute_bytes
    scores = sequences * shape.num_query_heads * g.max_target_length**2 * FP32_BYTES
    activations = math.ceil((logits + layer_inputs + one_layer + scores) / min(trainer, sequences))

    replicas, tensor = _rollout_split(h.rollout_data_parallelism, h.rollout_tensor_parallelism, rollout)
    rollout_weights = math.ceil(shape.parameters * weight_bytes / tensor) if h.rollout_engine == "vllm" else 0
    # An evaluation's rollout batch is eval_batch_size prompts (one completion each per pass): above the train
    # rollout's batch_size * num_generations, it is the larger cache.
    rollout_sequences = max(sequences, g.eval_batch_size or 0) if g.num_test_batches else sequences
    cache_tokens = math.ceil(rollout_sequences / replicas) * (g.max_target_length + g.kv_cache_buffer)
    cache_bytes = weight_bytes if h.rollout_engine == "vllm" else compute_bytes
    kv_per_token = shape.num_layers * 2 * shape.num_kv_heads * shape.head_dim * cache_bytes
    kv_cache = math.ceil(cache_tokens * kv_per_token / min(tensor, shape.num_kv_heads))
    parts = PerChipBytes(
        params=state,
        optimizer=2 * state,
        gradients=state,
        reference=state if g.beta > 0 else 0,
        activations=activations,
        rollout_weights=rollout_weights,
        kv_cache=kv_cache,
    )
    return parts, trainer, rollout


def _total(parts: PerChipBytes, accelerator: str) -> int:
    tpu = tpu_slice(accelerator)
    if tpu is not None and tpu.multi_host:
        return max(parts.trainer_side(), parts.rollout_side())  # separate chips
    return parts.trainer_side() + parts.rollout_side()


def _breakdown(parts: PerChipBytes) -> str:
    return ", ".join(f"{name} {gib(n)}" for name, n in parts.parts() if n)


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
    parts, _, _ = per_chip_bytes(spec.model_copy(update={"hardware": hardware}), shape)
    return _total(parts, accelerator) <= hbm_bytes_per_chip(tpu)


def smallest_fitting_slice(spec: JobSpec, shape: ModelShape) -> str | None:
    """The slice with the fewest chips of the spec's TPU generation this job would fit on, if any."""
    current = tpu_slice(spec.hardware.accelerator)
    if current is None:
        return None
    same_generation = sorted((s for s in TPU_SLICES.values() if s.generation == current.generation), key=lambda s: s.chips)
    return next((s.name for s in same_generation if _fits_on(spec, shape, s.name)), None)


def estimate_fit(spec: JobSpec, shape: ModelShape) -> FitEstimate:
    accelerator = spec.hardware.accelerator
    parts, trainer, rollout = per_chip_bytes(spec, shape)
    total = _total(parts, accelerator)
    tpu = tpu_slice(accelerator)
    capacity = hbm_bytes_per_chip(tpu) if tpu else None
    needs = f"needs ~{gib(total)} GiB per chip ({_breakdown(parts)})"
    verdict: Verdict
    if capacity is None:
        verdict = "unchecked"
        message = f"{needs}; on {CPU_ACCELERATOR} this is host memory, which is not checked at submit"
    elif total > capacity:
        verdict = "does-not-fit"
        message = f"{needs}, {accelerator} has {capacity / GIB:g} GiB per chip"
        larger = smallest_fitting_slice(spec, shape)
        message += (
            f"; it would fit on {larger}"
            if larger and larger != accelerator
            else "; no slice of this generation holds it: lower batch_size, num_generations or the lengths, or use bfloat16"
        )
    else:
        share = total / capacity
        verdict = "tight" if share > TIGHT_FRACTION else "fits"
        message = f"{needs}, {share:.0%} of {accelerator}'s {capacity / GIB:g} GiB per chip"
        if verdict == "tight":
            message += "; close to the limit (the estimate leaves out XLA's temporary buffers): it may run out of memory"
    return FitEstimate(
        accelerator=accelerator,
        model_source=shape.source,
        parameters=shape.parameters,
        trainer_devices=trainer,
        rollout_devices=rollout,
        per_chip=parts,
        total_bytes_per_chip=total,
        capacity_bytes_per_chip=capacity,
        verdict=verdict,
        message=message,
    )


def estimate_job_fit(spec: JobSpec, hf_config: dict[str, Any] | None = None) -> FitEstimate | None:
    """The estimate for `spec` (None when its model's shape is unknown). Without `hf_config`, the
    checkpoint's config.json is read when `model.source` is a local directory."""
    if hf_config is None:
        hf_config = read_local_model_config(spec.model.source)
    dims = spec.model.dims.model_dump() if spec.model.dims else None
    shape = model_shape(spec.model.name, dims, hf_config)
    return None if shape is None else estimate_fit(spec, shape)
