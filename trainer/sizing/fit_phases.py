"""What one chip holds in each phase of a GRPO step (MaxText 0.2.5's train_rl over Tunix), part by part.

A chip's need is the largest phase: what stays resident all run, plus what that phase adds. Two kinds of addition,
kept apart because TPU counts them apart: the phase's JAX arrays (what `memory_stats()`'s `bytes_in_use` counts) and
its compiled program's temporaries (XLA's scratch, which libtpu books as *reserved* memory, not as bytes in use: on
the v5e chip, `largest_alloc_size` never exceeded the largest parameter array, while the 4x8 Qwen3-0.6B log-prob
program alone asked for ~14 GB). bench/results/tpu_grpo.json's measured peaks are `peak_bytes_in_use`, so they are
checked against the resident part plus the phases' arrays (tests/trainer/test_fit_calibration.py); the temporaries
are what refused that 4x8 job.

Paths below are in the installed site-packages (maxtext 0.2.5, tunix and flax 0.12.9 as pinned); lines as installed.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from trainer.contract.spec import JobSpec
from trainer.contract.tpu import rollout_devices, tpu_slice

from .model_shapes import ModelShape

FP32_BYTES = 4


class PerChipBytes(BaseModel):
    """One chip's share of each part, in bytes. Not all parts are live at once: see `PhaseBytes`."""

    model_config = ConfigDict(frozen=True)

    params: int
    optimizer: int = Field(description="AdamW's first and second moments")
    gradients: int
    reference: int = Field(description="the frozen reference model (0 with grpo.beta 0)")
    activations: int = Field(description="the update's temporaries: fp32 logits, their gradient, one layer's recompute")
    rollout_weights: int = Field(description="the vLLM engine's copy of the weights (0 with the jax engine)")
    kv_cache: int
    decode_weights: int = Field(0, description="the jax engine's decoding layout of the weights (0 with vLLM)")
    logprobs: int = Field(0, description="the reference (and old policy) log-prob pass's temporaries: fp32 logits")

    def parts(self) -> list[tuple[str, int]]:
        return [
            ("params", self.params),
            ("optimizer", self.optimizer),
            ("gradients", self.gradients),
            ("reference", self.reference),
            ("activations", self.activations),
            ("log-prob logits", self.logprobs),
            ("rollout weights", self.rollout_weights),
            ("decode weights", self.decode_weights),
            ("KV cache", self.kv_cache),
        ]


class PhaseBytes(BaseModel):
    """One phase of a step on one chip: resident + arrays + program is what the chip must hold then."""

    model_config = ConfigDict(frozen=True)

    name: str
    resident: int = Field(description="what stays on the chip all run (weights, moments, reference, decode layout)")
    arrays: int = Field(description="the phase's own JAX arrays: what memory_stats' bytes_in_use also counts")
    program: int = Field(description="its compiled program's temporaries: reserved memory on TPU, not bytes_in_use")

    @property
    def total(self) -> int:
        return self.resident + self.arrays + self.program

    @property
    def in_use(self) -> int:
        """What `peak_bytes_in_use` can see of this phase (no program temporaries)."""
        return self.resident + self.arrays


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
    # Activations are in MaxText's compute `dtype`; the jax engine's KV cache and decode layout too, vLLM's in weight_dtype.
    compute_bytes = 2 if spec.model.resolved_compute_dtype(spec.hardware.accelerator) == "bfloat16" else FP32_BYTES
    g, h = spec.grpo, spec.hardware
    # Parameters, gradients and AdamW's moments in weight_dtype (utils_rl.py:654 optax.adamw without mu_dtype).
    state = math.ceil(shape.parameters * weight_bytes / trainer)

    # No micro-batching: train_rl passes mini_batch_size=batch_size and train_micro_batch_size=None (train_rl.py:378,
    # 448), and Tunix then takes the rollout and log-prob micro-batches equal to it (rl_learner.py:533-541), so every
    # pass runs over all batch x generations sequences of max_target_length tokens (prompt padded to
    # max_prefill_predict_length, completion to the rest: grpo_learner.py:244 pad_to_length).
    sequences = g.batch_size * g.num_generations
    tokens = sequences * g.max_target_length
    batch_split = min(trainer, sequences)  # the batch axis is sharded over the trainer's devices
    # MaxText casts the logits to fp32 over every position (nnx_decoders.py:1618 cast_logits_to_fp32) before Tunix
    # keeps the completion's (common.py:378): the 4x8 Qwen3-0.6B log-prob program asked ~14 GB = 32 x 768 x 151936 x 4.
    logits = tokens * shape.vocab_size * FP32_BYTES
    q_width = shape.num_query_heads * shape.head_dim
    one_layer = tokens * (3 * shape.emb_dim + q_width + 3 * shape.mlp_dim) * compute_bytes
    scores = sequences * shape.num_query_heads * g.max_target_length**2 * FP32_BYTES  # rl.yml:89 dot_product attention
    forward = one_layer + scores
    logprobs = math.ceil((logits + forward) / batch_split)
    # The update keeps the fp32 logits for the backward pass and their gradient, cast back to the compute dtype by the
    # cast's transpose. rl.yml:90-94 (remat 'custom') offloads each layer's input and q/k/v to host memory: off the chip
    # on TPU, but on cpu the host is the device, so there they count.
    layer_inputs = shape.num_layers * tokens * shape.emb_dim * compute_bytes if tpu is None else 0
    update = logits + tokens * shape.vocab_size * compute_bytes + layer_inputs + forward
    activations = math.ceil(update / batch_split)

    replicas, tensor = _rollout_split(h.rollout_data_parallelism, h.rollout_tensor_parallelism, rollout)
    vllm = h.rollout_engine == "vllm"
    rollout_weights = math.ceil(shape.parameters * weight_bytes / tensor) if vllm else 0
    # The jax engine decodes from its own layout of the actor's weights (cached_llama.py:126 arrange_weights): every
    # matrix in the compute dtype, the tied table copied as the output projection, an untied input table not copied.
    untied_table = 0 if shape.tied_embeddings else shape.vocab_size * shape.emb_dim
    decode_weights = 0 if vllm else math.ceil((shape.parameters - untied_table) * compute_bytes / trainer)
    # An evaluation's rollout batch is eval_batch_size prompts (one completion each per pass): above the train
    # rollout's batch_size * num_generations, it is the larger cache.
    rollout_sequences = max(sequences, g.eval_batch_size or 0) if g.num_test_batches else sequences
    cache_tokens = math.ceil(rollout_sequences / replicas) * (g.max_target_length + g.kv_cache_buffer)
    cache_bytes = weight_bytes if vllm else compute_bytes  # cached_llama.py:222 init_cache: the model's dtype
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
        decode_weights=decode_weights,
        logprobs=logprobs,
    )
    return parts, trainer, rollout


def step_phases(parts: PerChipBytes, accelerator: str) -> list[PhaseBytes]:
    """Each phase of a step with what it holds on one chip. On one VM (and on cpu) the trainer and the rollout share
    every device, so both sides' resident parts are on each chip; on several VMs each side has its own chips."""
    tpu = tpu_slice(accelerator)
    separate = tpu is not None and tpu.multi_host
    trainer_resident = parts.params + parts.optimizer + parts.reference
    rollout_resident = parts.rollout_weights + parts.decode_weights
    shared = trainer_resident + rollout_resident
    on_trainer = trainer_resident if separate else shared
    on_rollout = rollout_resident if separate else shared
    return [
        # The sampler's KV cache lives across the whole generation (its prefill and decode take it as donated state).
        PhaseBytes(name="rollout", resident=on_rollout, arrays=parts.kv_cache, program=0),
        PhaseBytes(name="log-probs", resident=on_trainer, arrays=0, program=parts.logprobs),
        # Before the first update Tunix re-shards the moments eagerly (peft_trainer.py:420 -> 395 _shard_optimizer:
        # with_sharding_constraint outside jit), so a second copy of them is live for a moment.
        PhaseBytes(name="optimizer sharding", resident=on_trainer, arrays=parts.optimizer, program=0),
        # The step writes new parameters beside the old (peft_trainer.py:422 donates only the optimizer; flax 0.12's
        # Optimizer holds no model), and its program holds the gradients and the activations.
        PhaseBytes(name="update", resident=on_trainer, arrays=parts.params, program=parts.gradients + parts.activations),
    ]
