"""What one chip holds in each phase of a GRPO step (MaxText 0.2.5's train_rl over Tunix), part by part.

A chip's need is the largest phase: what stays resident all run, plus what that phase adds. Two kinds of addition,
kept apart because TPU counts them apart: the phase's JAX arrays (what `memory_stats()`'s `bytes_in_use` counts, the
allocator's heap) and its compiled programs' temporaries (XLA's scratch, which libtpu books as `bytes_reserved`: the
StreamExecutor allocator's stack, in the same HBM as the heap). What the chip holds at a moment is the two together:
TinyLlama-1.1B on the v5e chip ran out of memory re-deriving the decoding layout with 13.96e9 B of arrays in use and a
1.02e9 B reservation, where the layout's 2.14e9 B alone would have fitted the 16.91e9 B limit. libtpu keeps a
program's reservation while there is room and gives it back when arrays need it: the same run's moments re-shard
held 16.18e9 B of arrays, more than the limit less the 1.21e9 B reserved before it. So a phase needs its own
programs' temporaries, not every earlier one's (bench/estimate/fit_calibration_tpu.py compares each phase with the chip's
per-part figures; tests/trainer/sizing/test_fit_calibration.py holds them).

Paths below are in the installed site-packages (maxtext 0.2.5, tunix and flax 0.12.9 as pinned); lines as installed.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from trainer.contract.accelerators.tpu import rollout_devices, tpu_slice
from trainer.contract.spec.job import JobSpec

from .model_shapes import ModelShape

FP32_BYTES = 4


class PerChipBytes(BaseModel):
    """One chip's share of each part, in bytes. Not all parts are live at once: see `PhaseBytes`."""

    model_config = ConfigDict(frozen=True)

    params: int
    optimizer: int = Field(description="AdamW's first and second moments")
    gradients: int
    reference: int = Field(description="the frozen reference model (0 with grpo.beta 0)")
    activations: int = Field(description="the update's temporaries: the fp32 logits (or one layer's recompute, if larger)")
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
    """(replicas, chips per replica), deriving a -1 from the other as MaxText does (trainer/contract/accelerators/tpu.py)."""
    if data == -1:
        data = max(1, devices // max(1, tensor))
    if tensor == -1:
        tensor = max(1, devices // data)
    return data, tensor


def saved_layer_activations(spec: JobSpec, shape: ModelShape) -> int:
    """What the update's backward pass keeps of every layer under rl.yml's remat policy ('custom', rl.yml:90-94): each
    layer's input and its query, key and value projections, for every token of the batch, in the compute dtype. On
    TPU rl.yml offloads them to host memory; MaxText's `device` for the four keeps them in HBM, where they are the
    update program's temporaries: the chip's 360M variant (bench/results/tpu_grpo_layers_in_hbm.json) reserved
    4,026,286,080 B more than the same shape offloading, for 4,026,531,840 counted here. Unsharded: the caller
    divides by the batch's split."""
    compute_bytes = 2 if spec.model.resolved_compute_dtype(spec.hardware.accelerator) == "bfloat16" else FP32_BYTES
    tokens = spec.grpo.batch_size * spec.grpo.num_generations * spec.grpo.max_target_length
    per_token = shape.emb_dim + shape.num_query_heads * shape.head_dim + 2 * shape.num_kv_heads * shape.head_dim
    return shape.num_layers * tokens * per_token * compute_bytes


def per_chip_bytes(spec: JobSpec, shape: ModelShape, layers_in_hbm: bool = False) -> tuple[PerChipBytes, int, int]:
    """(each part's bytes on one chip, trainer devices, rollout devices). `layers_in_hbm`: on TPU, the update keeps
    each layer's saved activations (`saved_layer_activations`) in HBM instead of offloading them as rl.yml does."""
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
    # A layer's temporaries are dead before the logits are formed, so XLA lays both in the same space: the larger counts.
    # On the chip the log-prob program reserved the fp32 logits to 0.01% (Qwen3-0.6B 1x8 3.7343e9 for 3.7340e9,
    # TinyLlama 1.2083e9 for 1.2080e9), not the logits plus a layer.
    logprobs = math.ceil(max(logits, forward) / batch_split)
    # The update keeps the logits' worth for the backward pass; their gradient is consumed where it is made (the update
    # reserved Qwen3 <= 3.7435e9, TinyLlama 1.3092e9: one fp32 logits' size, not 1.5). rl.yml:90-94 (remat 'custom')
    # offloads each layer's input and q/k/v to host memory: off the chip on TPU unless kept in HBM, but on cpu the host
    # is the device (the cpu calibration, bench/results/fit_calibration.json, counts the layers' inputs alone there).
    if tpu is None:
        layer_inputs = shape.num_layers * tokens * shape.emb_dim * compute_bytes
    else:
        layer_inputs = saved_layer_activations(spec, shape) if layers_in_hbm else 0
    activations = math.ceil((max(logits, forward) + layer_inputs) / batch_split)

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


def layout_program_bytes(spec: JobSpec, shape: ModelShape) -> int:
    """The temporaries of the program that re-derives the jax engine's decoding layout (cached_llama.py:126
    arrange_weights under jax.jit): at most the fused gate and up matrices of every layer, the largest concatenation
    it builds. TinyLlama-1.1B's run reserved 1.0156e9 for it (22 x 2048 x 11264 x 2 = 1.0150e9); Qwen3-0.6B's 0.18e9,
    less than the 0.35e9 counted. 0 with vLLM, which keeps no such layout."""
    if spec.hardware.rollout_engine == "vllm":
        return 0
    tpu = tpu_slice(spec.hardware.accelerator)
    trainer = tpu.trainer_devices if tpu else 1
    compute_bytes = 2 if spec.model.resolved_compute_dtype(spec.hardware.accelerator) == "bfloat16" else FP32_BYTES
    return math.ceil(shape.num_layers * shape.emb_dim * 2 * shape.mlp_dim * compute_bytes / trainer)


def step_phases(parts: PerChipBytes, accelerator: str, layout_program: int = 0) -> list[PhaseBytes]:
    """Each phase of a step with what it holds on one chip. On one VM (and on cpu) the trainer and the rollout share
    every device, so both sides' resident parts are on each chip; on several VMs each side has its own chips."""
    tpu = tpu_slice(accelerator)
    separate = tpu is not None and tpu.multi_host
    trainer_resident = parts.params + parts.optimizer + parts.reference
    rollout_resident = parts.rollout_weights + parts.decode_weights
    shared = trainer_resident + rollout_resident
    on_trainer = trainer_resident if separate else shared
    on_rollout = rollout_resident if separate else shared
    refresh = []
    if parts.decode_weights:
        # Before a generation after an update the jax engine derives a fresh layout beside the one it replaces
        # (cached_llama.py:216 refresh; both shapes' first rollouts rose by exactly the layout's size), and the update's
        # new parameters may still sit beside the old ones: TinyLlama's step 3 began it with resident + one parameter
        # copy in use (13.96e9) and ran out of memory there.
        fresh = parts.params + parts.decode_weights
        refresh = [PhaseBytes(name="layout refresh", resident=on_rollout, arrays=fresh, program=layout_program)]
    return [
        *refresh,
        # The sampler's KV cache lives across the whole generation (its prefill and decode take it as donated state).
        PhaseBytes(name="rollout", resident=on_rollout, arrays=parts.kv_cache, program=0),
        PhaseBytes(name="log-probs", resident=on_trainer, arrays=0, program=parts.logprobs),
        # Before the first update Tunix re-shards the moments eagerly (peft_trainer.py:420 -> 395 _shard_optimizer:
        # with_sharding_constraint outside jit), so a second copy of them is live for a moment, outside any program:
        # TinyLlama's 16.18e9 of arrays then left no room for the 1.21e9 reserved before it.
        PhaseBytes(name="optimizer sharding", resident=on_trainer, arrays=parts.optimizer, program=0),
        # The step writes new parameters beside the old (peft_trainer.py:422 donates only the optimizer; flax 0.12's
        # Optimizer holds no model). The gradients take no room of their own: TinyLlama's update held its new
        # parameters (13.87e9 in use) and a 1.31e9 reservation under the 16.91e9 limit, where 2.34e9 more of gradients
        # would not have fitted; XLA writes them into the new parameters' buffer.
        PhaseBytes(name="update", resident=on_trainer, arrays=parts.params, program=parts.activations),
    ]
