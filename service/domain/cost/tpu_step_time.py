"""How long a GRPO job's train steps take on a TPU slice, from rates measured on one TPU v5e chip.

The rates (tpu_step_rates.json) are derived by scripts/tpu_step_rates.py from bench/results/tpu_grpo.json, the
train stage timed part by part on the chip; tests/service/domain/cost/test_tpu_step_rates_fresh.py fails when they are not what
that file gives. What the measurement showed, and so the model:
- rollout: a decode position takes the time the chip's full HBM bandwidth needs to read the bytes each chip reads per
  position (its weights and KV cache, as the fit estimate shares them out: no position moves them faster), plus a
  per-position overhead beyond those bytes, plus the write of the new position into the KV cache, per byte of cache,
  by the model's head width. The profiles showed that write costing ~2.2 ms per GB of cache for SmolLM2's 64-wide
  heads (XLA moves the cache) and ~0.1 for Qwen3's 128-wide ones. The overhead is the largest any measured shape
  showed (0.9-1.2 ms on v5e), a width's write the slowest per byte measured for it, and a width not measured takes the
  slowest measured: a larger model or an unmeasured width is estimated slow rather than fast. Left out of the rates,
  SmolLM2-360M is predicted within 25% of its measurement (tests/service/domain/cost/test_tpu_estimate.py); a batch and
  lengths no shape ran, the GSM8K jobs on the chip, are in bench/estimate/README.md. This form replaced "the larger of
  a constant floor and the bytes at the best measured efficiency" after those jobs ran: at 16 sequences and a
  512-token cache a position took less than the floor, which a floor cannot say.
- update: the FLOPs of the optimizer step (6 x parameters per token) and of the log-prob passes (2 each: the
  reference's with beta > 0, the old policy's with num_iterations > 1) at the share of peak measured for the
  measured model nearest in size, under the policy the job's train stage will run (trainer/sizing/fit.py's
  keeps_layers_in_hbm): each layer's input and q/k/v kept in HBM (the bench's runs) or offloaded to host memory (the
  same shapes before the train stage chose, bench/results/tpu_grpo_offloaded.json; on v5e 1.4-1.6x slower).
  Until the sampler-trainer agreement (issue 66 §2) the log-prob calls returned in about a millisecond and their
  work ran inside the update's time; the rate keeps that definition, so the update carries the passes' FLOPs.
- log-probs: since the agreement, its host read makes the step wait for the reference's and the agreement's forwards
  before the update, and the chip's steps show the wait as the `logprobs` part. The agreement's first version read
  through Tunix's get_actor_per_token_logps, whose gc.collect made the wait about the same host time on every shape;
  the present read has none, and the wait is about the forwards' own device time, so it grows with the model. A step
  is charged the largest a measured shape took, not scaled by the model's forward FLOPs (not built: a model larger
  than the measured ones is under-charged here). The GSM8K jobs on the chip, a batch and lengths no rate came from,
  checked it blind with the first version's read (bench/estimate/README.md).
- checkpoint: the parameters and AdamW's two moments per save at the bytes per second the blocking save took there.
Another generation is scaled from v5e by its documented peak bf16 FLOP/s (update) and HBM bandwidth (rollout's reads
and the cache's write); the per-position overhead is not scaled: nothing measured says how it moves with the chip.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainer.contract import JobSpec
from trainer.contract.accelerators.tpu import TpuSlice
from trainer.contract.accelerators.tpu_generations import TPU_GENERATIONS
from trainer.contract.run.goodput import CHECKPOINT, LOGPROBS, ROLLOUT, UPDATE
from trainer.sizing.fit import keeps_layers_in_hbm, per_chip_bytes
from trainer.sizing.model_shapes import ModelShape

RATES_FILE = Path(__file__).with_name("tpu_step_rates.json")
REGENERATE = ".venv/bin/python scripts/tpu_step_rates.py"
# Per JAX device, from trainer/contract/accelerators/tpu_generations.py (its sources): the estimate divides work by devices
# (trainer_devices) and reads bytes per device, and a TPU7x chip is two devices, so its rows hold half of the chip's.
PEAK_BF16_FLOPS_PER_CHIP = {name: g.peak_bf16_flops_per_device for name, g in TPU_GENERATIONS.items()}
HBM_BYTES_PER_S_PER_CHIP = {name: g.hbm_bytes_per_s_per_device for name, g in TPU_GENERATIONS.items()}
CHECKPOINT_STATE_COPIES = 3  # an actor checkpoint holds the parameters and AdamW's two moments
UPDATE_FLOPS_PER_TOKEN = 6  # x parameters: forward and backward
LOGPROB_FLOPS_PER_TOKEN = 2  # x parameters: one forward pass


@dataclass(frozen=True)
class MeasuredShape:
    name: str
    parameters: int
    utilization: float  # update-part FLOPs / (seconds x peak), per chip, each layer's input and q/k/v kept in HBM
    utilization_offloaded: float  # the same, those offloaded to host memory (rl.yml's policy)


@dataclass(frozen=True)
class StepRates:
    generation: str  # the chip the rates were measured on
    trainer_commit: str
    decode_overhead_s: float
    overhead_shape: str
    checkpoint_bytes_per_s: float
    checkpoint_shape: str
    logprobs_s: float  # per step
    logprobs_shape: str
    shapes: tuple[MeasuredShape, ...]
    kv_writes: tuple[tuple[int, float, str], ...]  # (head width, seconds per byte of KV cache per position, shape)


def rates_from_json(data: dict[str, Any]) -> StepRates:
    return StepRates(
        generation=data["source"]["generation"],
        trainer_commit=data["source"]["trainer_commit"],
        decode_overhead_s=data["decode_overhead_s_per_position"]["value"],
        overhead_shape=data["decode_overhead_s_per_position"]["shape"],
        checkpoint_bytes_per_s=data["checkpoint_bytes_per_s"]["value"],
        checkpoint_shape=data["checkpoint_bytes_per_s"]["shape"],
        logprobs_s=data["logprobs_s_per_step"]["value"],
        logprobs_shape=data["logprobs_s_per_step"]["shape"],
        shapes=tuple(
            MeasuredShape(s["shape"], s["parameters"], s["update_utilization"], s["update_utilization_offloaded"]) for s in data["shapes"]
        ),
        kv_writes=tuple((int(width), w["value"], w["shape"]) for width, w in data["kv_write_s_per_byte_by_head_dim"].items()),
    )


@lru_cache(maxsize=1)
def measured_rates() -> StepRates:
    return rates_from_json(json.loads(RATES_FILE.read_text()))


def decode_bytes_per_chip(spec: JobSpec, shape: ModelShape) -> tuple[int, int]:
    """What one chip reads per decode position: its share of the weights the rollout samples from, and of the KV cache.
    The jax engine decodes from its own copy in the compute dtype (`decode_weights`: half a float32 job's weights),
    vLLM from its rollout weights, a rollout sharing the trainer's from the parameters."""
    # Without evaluations: the fit estimate sizes the cache for the larger of the train and eval batches (memory's
    # peak), while a train step decodes its own batch.
    train_only = spec.model_copy(update={"grpo": spec.grpo.model_copy(update={"num_test_batches": 0})})
    parts, _, _ = per_chip_bytes(train_only, shape)
    return parts.decode_weights or parts.rollout_weights or parts.params, parts.kv_cache


def kv_write_per_byte(head_dim: int, rates: StepRates) -> tuple[float, str]:
    """Seconds per byte of KV cache per position for the cache's write at this head width, and whence."""
    measured = {width: (value, name) for width, value, name in rates.kv_writes}
    if not measured:
        return 0.0, "no KV cache write measured"
    if head_dim in measured:
        value, name = measured[head_dim]
        return value, f"as measured for {head_dim}-wide heads on {name}"
    width, (value, name) = max(measured.items(), key=lambda item: item[1][0])
    return value, f"{head_dim}-wide heads not measured: the slowest measured width's ({width}, on {name})"


def nearest_shape(parameters: int, rates: StepRates) -> MeasuredShape:
    return min(rates.shapes, key=lambda s: abs(math.log(s.parameters / parameters)))


@dataclass(frozen=True)
class TpuTrainTime:
    parts: dict[str, float]  # seconds of the whole train stage, by goodput part
    words: str


def _scaling_words(tpu: TpuSlice, rates: StepRates) -> str:
    measured = rates.generation
    if tpu.generation == measured:
        return f"rates measured on one TPU {measured} chip (bench/results/tpu_grpo.json, trainer {rates.trainer_commit})"
    peak, hbm = PEAK_BF16_FLOPS_PER_CHIP, HBM_BYTES_PER_S_PER_CHIP
    return (
        f"rates measured on one TPU {measured} chip (bench/results/tpu_grpo.json, trainer {rates.trainer_commit}), "
        f"scaled from {measured} measurements by {tpu.generation}'s documented peak bf16 FLOP/s "
        f"({peak[tpu.generation] / 1e12:g} vs {peak[measured] / 1e12:g} TFLOP/s) and HBM bandwidth "
        f"({hbm[tpu.generation] / 1e9:g} vs {hbm[measured] / 1e9:g} GB/s per chip), not measured on {tpu.generation}"
    )


def tpu_train_time(spec: JobSpec, shape: ModelShape, tpu: TpuSlice, rates: StepRates | None = None) -> TpuTrainTime:
    rates = rates or measured_rates()
    g, n = spec.grpo, shape.parameters
    trainer_devices = tpu.trainer_devices
    peak = PEAK_BF16_FLOPS_PER_CHIP[tpu.generation]

    positions = g.max_target_length - g.max_prefill_predict_length
    weights, kv = decode_bytes_per_chip(spec, shape)
    read = weights + kv
    hbm_scale = HBM_BYTES_PER_S_PER_CHIP[rates.generation] / HBM_BYTES_PER_S_PER_CHIP[tpu.generation]
    read_s = read / HBM_BYTES_PER_S_PER_CHIP[tpu.generation]
    write_per_byte, write_whence = kv_write_per_byte(shape.head_dim, rates)
    write_s = kv * write_per_byte * hbm_scale
    per_position = read_s + rates.decode_overhead_s + write_s
    rollout = g.num_batches * positions * per_position

    tokens = g.max_target_length * g.batch_size * g.num_generations
    logprob_passes = (1 if g.beta > 0 else 0) + (1 if g.num_iterations > 1 else 0)  # once per batch each
    steps = g.num_batches * g.num_iterations
    flops = tokens * n * (steps * UPDATE_FLOPS_PER_TOKEN + g.num_batches * logprob_passes * LOGPROB_FLOPS_PER_TOKEN)
    measured = nearest_shape(n, rates)
    kept = keeps_layers_in_hbm(spec, shape)  # the train stage's choice, so the rate of the program it runs
    utilization = measured.utilization if kept else measured.utilization_offloaded
    update = flops / (trainer_devices * peak * utilization)
    logprobs = g.num_batches * rates.logprobs_s

    saves = steps // g.checkpoint_period
    weight_bytes = 2 if spec.model.dtype == "bfloat16" else 4
    checkpoint = saves * n * weight_bytes * CHECKPOINT_STATE_COPIES / rates.checkpoint_bytes_per_s

    bound_words = f"{read / 1e9:.3g} GB read per chip per position (weights and KV cache as the fit estimate shares them out)"
    words = (
        f"{_scaling_words(tpu, rates)}: rollout {g.num_batches} batches x {positions} decode positions at "
        f"{per_position * 1e3:.3g} ms each: {bound_words} at the chip's full HBM bandwidth ({read_s * 1e3:.3g} ms), plus "
        f"{rates.decode_overhead_s * 1e3:.3g} ms per position beyond its bytes as measured on {rates.overhead_shape} (the "
        f"most a measured shape took; not scaled), plus {write_s * 1e3:.3g} ms "
        f"writing the position into {kv / 1e9:.3g} GB of KV cache ({write_per_byte * 1e12:.3g} ms per GB, {write_whence}), "
        f"every completion at its full length as in the measurement; "
        f"update ({UPDATE_FLOPS_PER_TOKEN} x {steps} steps + {LOGPROB_FLOPS_PER_TOKEN} x {logprob_passes} log-prob pass(es) "
        f"x {g.num_batches} batches) x {tokens} tokens x {n:,} parameters = {flops:.3g} FLOPs on {trainer_devices} "
        f"chip(s) at {utilization:.0%} of peak bf16, as measured on {measured.name} "
        f"({measured.parameters:,} parameters, the measured model nearest in size; the log-prob passes' FLOPs "
        f"counted here at its rate) with each layer's input and q/k/v "
        f"{'kept in HBM' if kept else 'offloaded to host memory'} as this job's train stage will; "
        f"log-probs {g.num_batches} batches x {rates.logprobs_s:.3g} s, the step's wait for the reference's and the "
        f"sampler-trainer agreement's forwards as measured on {rates.logprobs_shape} (the most a measured shape took; "
        f"not scaled); "
        f"checkpoints {saves} save(s) of {CHECKPOINT_STATE_COPIES} x parameters x {weight_bytes} "
        f"bytes at the {rates.checkpoint_bytes_per_s / 1e9:.3g} GB/s measured on {rates.checkpoint_shape} (one chip "
        f"writing to its machine's disk; not scaled); evaluations not counted"
    )
    return TpuTrainTime(parts={ROLLOUT: rollout, LOGPROBS: logprobs, UPDATE: update, CHECKPOINT: checkpoint}, words=words)
