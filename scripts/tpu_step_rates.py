"""Derive the rates the submit-time estimate of a TPU job uses (service/domain/tpu_step_rates.json) from the chip
bench's result (bench/results/tpu_grpo.json), or with --check say whether the checked-in rates are still its.

    .venv/bin/python scripts/tpu_step_rates.py           # rewrite service/domain/tpu_step_rates.json
    .venv/bin/python scripts/tpu_step_rates.py --check   # change nothing; exit 1 when it differs

Run it after the bench's result changes (tests/service/domain/cost/test_tpu_step_rates_fresh.py fails until then). What the
rates mean and how the estimate uses them: service/domain/tpu_step_time.py. Shapes used: those that completed with
at least MIN_STEADY_STEPS steps after the compiling first one, in bf16 (the float32 tiny test model is left out: it
is no model anyone trains, and its one steady step is no steady state). Per shape, from its steady steps:
- seconds per decode position: rollout seconds / (max_target_length - max_prefill_predict_length);
- the KV cache's write per position, where the shape's step was profiled: the decode step's `dynamic_update_slice`
  device time (xprof's table, the bench's profile summary), per byte of the chip's KV cache, by the model's head
  width (on v5e SmolLM2's 64-wide heads took ~2.2 ms per GB of cache, Qwen3's 128-wide ~0.1: the write moves the
  cache when the head is narrower than the lane width, bench/chip/README.md);
- the per-position overhead: the seconds per position less that write and less the time the chip's full HBM bandwidth
  takes to read the bytes a chip reads per position (the fit estimate's weights and KV cache per chip, which the
  result carries): what a position costs beyond moving its bytes (HBM efficiency, that read over the seconds less the
  write, is kept beside it for reading);
- update utilization: for the bench's run (each layer's input and q/k/v kept in HBM, the train stage's choice where
  that fits) and for the same shape offloading them (bench/results/tpu_grpo_offloaded.json, the same train command
  less the four `=device` overrides): the update part's FLOPs (6 x parameters per token, plus 2 per log-prob pass, which ran inside
  the update's time until the sampler-trainer agreement's host read ordered them before it; the rate keeps that
  definition, so the estimate's update still carries the passes' FLOPs) / update seconds / the chip's peak bf16 FLOP/s;
- checkpoint bytes per second: parameters x weight bytes x 3 (with AdamW's moments) / the mean seconds of a save;
- log-prob seconds per step: the mean of the steady steps' `logprobs` part (the step waiting on the reference's and
  the agreement's forwards; on v5e 0.30-0.35 s on every shape, tiny included: host work, not the forwards).
Across shapes: the overhead is the largest a shape showed, each head width's write the slowest per byte measured
for it, the checkpoint rate the slowest, the log-prob seconds the largest: an estimate from them is slow rather than
fast. (Until issue 67 §4's held-out
setting, a position was the larger of a constant floor, the fastest position less its write, and the bytes at the
best efficiency measured: at 16 sequences and a 512-token cache a position took less than that floor.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run by path: the repository's packages are importable as in the tests
    sys.path.insert(0, str(REPO))

from bench.estimate.fit_calibration_tpu import layers_in_hbm_of  # noqa: E402
from service.domain.cost.tpu_step_time import (  # noqa: E402
    CHECKPOINT_STATE_COPIES,
    HBM_BYTES_PER_S_PER_CHIP,
    LOGPROB_FLOPS_PER_TOKEN,
    PEAK_BF16_FLOPS_PER_CHIP,
    RATES_FILE,
    REGENERATE,
    UPDATE_FLOPS_PER_TOKEN,
)
from trainer.contract.accelerators.tpu import tpu_slice  # noqa: E402
from trainer.sizing.layer_activations import KEPT_IN_HBM_ARGS  # noqa: E402

RESULT = REPO / "bench" / "results" / "tpu_grpo.json"
# The same shapes with each layer's input and q/k/v offloaded to host memory (rl.yml's policy, which the train stage
# runs where keeping them does not fit): the update rate for such a job.
OFFLOADED = REPO / "bench" / "results" / "tpu_grpo_offloaded.json"
# Settings the train stage has passed since the offloading runs, each at the value those runs took without it: MaxText
# base.yml's default (tests/service/domain/cost/test_tpu_step_rates_fresh.py reads each back), so a run without them
# ran the same program. model.logits_dtype's (92d0630).
DEFAULTS_PASSED_SINCE_OFFLOADED = ("logits_dot_in_fp32=false",)
MIN_STEADY_STEPS = 3


def _sig(x: float) -> float:
    """Four significant figures: the measurement holds no more, and the file stays readable."""
    return float(f"{x:.4g}")


def head_dim(shape: dict[str, Any]) -> int | None:
    """The head width MaxText ran with: the train command's `head_dim=` (the bench sets the model's shape there)."""
    values = [arg.split("=", 1)[1] for arg in shape["command"] if arg.startswith("head_dim=")]
    return int(values[-1]) if values else None


def _kv_write_s(shape: dict[str, Any]) -> float | None:
    """Device seconds per decode step of the KV cache's write, from the profiled step; None without a profile."""
    profile = shape.get("profile") or {}
    by_op = profile.get("decode_ms_per_step_by_op") or {}
    return by_op["dynamic_update_slice"] / 1e3 if "dynamic_update_slice" in by_op else None


def _shape_rates(shape: dict[str, Any], generation: str) -> dict[str, Any]:
    s, n = shape["settings"], shape["parameters"]
    trace = shape.get("trace_step") or 0  # the step after a profiled one carries the profiler's dump, as the bench leaves it out
    steady = [step for step in shape["steps"] if step["step"] > 1 and not (trace and step["step"] == trace + 1)]
    positions = s["max_target_length"] - s["max_prefill_predict_length"]
    rollout_s = sum(step["parts"]["rollout"] for step in steady) / len(steady)
    update_s = sum(step["parts"]["update"] for step in steady) / len(steady)
    logprobs_s = sum(step["parts"].get("logprobs", 0.0) for step in steady) / len(steady)
    per_chip = shape["fit_estimate"]["per_chip"]
    read = (per_chip.get("decode_weights") or per_chip["rollout_weights"] or per_chip["params"]) + per_chip["kv_cache"]
    write_s = _kv_write_s(shape)
    rest_s = rollout_s / positions - (write_s or 0.0)
    tokens = s["batch_size"] * s["num_generations"] * s["max_target_length"]
    passes = 1 if s["beta"] > 0 else 0  # the reference's; the bench runs one iteration per batch, so no old policy's
    flops = tokens * n * (UPDATE_FLOPS_PER_TOKEN + passes * LOGPROB_FLOPS_PER_TOKEN)
    chips = shape["fit_estimate"]["trainer_devices"]
    saves = [step["parts"]["checkpoint"] for step in steady if step["parts"]["checkpoint"] > 0]
    weight_bytes = 2 if s["weight_dtype"] == "bfloat16" else 4
    saved = n * weight_bytes * CHECKPOINT_STATE_COPIES
    return {
        "shape": shape["shape"],
        "parameters": n,
        "steady_steps": len(steady),
        "decode_s_per_position": _sig(rollout_s / positions),
        "decode_bytes_per_chip": read,
        "head_dim": head_dim(shape),
        "kv_cache_bytes_per_chip": per_chip["kv_cache"],
        "kv_write_s_per_position": _sig(write_s) if write_s is not None else None,
        "kv_write_s_per_byte": _sig(write_s / per_chip["kv_cache"]) if write_s is not None and per_chip["kv_cache"] else None,
        "decode_rest_s_per_position": _sig(rest_s),
        "decode_overhead_s_per_position": _sig(rest_s - read / HBM_BYTES_PER_S_PER_CHIP[generation]),
        "hbm_efficiency": _sig(read / rest_s / HBM_BYTES_PER_S_PER_CHIP[generation]),
        "update_flops_per_step": flops,
        "update_utilization": _sig(flops / update_s / (chips * PEAK_BF16_FLOPS_PER_CHIP[generation])),
        "logprobs_s_per_step": _sig(logprobs_s),
        "checkpoint_bytes_per_s": _sig(saved / (sum(saves) / len(saves))) if saves else None,
    }


def _offloaded_utilization(shape: dict[str, Any], offloaded: dict[str, Any], generation: str) -> float:
    """The update rate of `shape` run with its layers offloaded: the same shape, settings and train command but for
    the four `=device` overrides and settings since passed at their defaults, from the offloaded result."""
    kept = [arg for arg in shape["command"] if arg not in KEPT_IN_HBM_ARGS + DEFAULTS_PASSED_SINCE_OFFLOADED]
    runs = [s for s in offloaded["shapes"] if s["shape"] == shape["shape"] and s["command"] == kept and not layers_in_hbm_of(s)]
    if len(runs) != 1:
        raise SystemExit(f"{OFFLOADED}: no run of {shape['shape']} with the same train command, its layers offloaded")
    return _shape_rates(runs[0], generation)["update_utilization"]


def derive_rates(result: dict[str, Any], offloaded: dict[str, Any] | None = None) -> dict[str, Any]:
    offloaded = offloaded if offloaded is not None else json.loads(OFFLOADED.read_text())
    shapes = [
        shape
        for shape in result["shapes"]
        if shape["returncode"] == 0
        and shape.get("completed")
        and shape["settings"]["weight_dtype"] == "bfloat16"
        and shape["settings"].get("num_iterations", 1) == 1  # a step is then one batch: one rollout, one update
        and sum(step["step"] > 1 for step in shape["steps"]) >= MIN_STEADY_STEPS
    ]
    if not shapes:
        raise SystemExit(f"{RESULT}: no completed bf16 shape with {MIN_STEADY_STEPS} steady steps to derive rates from")
    generations = {tpu.generation for tpu in (tpu_slice(s["fit_estimate"]["accelerator"]) for s in shapes) if tpu}
    if len(generations) != 1:
        raise SystemExit(f"{RESULT}: the shapes ran on {sorted(generations)}, not on one TPU generation")
    generation = generations.pop()
    rates = []
    for shape in shapes:
        if not layers_in_hbm_of(shape):
            raise SystemExit(f"{RESULT}: {shape['shape']} offloaded its layers; the bench's shapes are the kept policy's")
        rates.append(
            _shape_rates(shape, generation) | {"update_utilization_offloaded": _offloaded_utilization(shape, offloaded, generation)}
        )
    overhead = max(rates, key=lambda r: r["decode_overhead_s_per_position"])
    writes: dict[str, dict[str, Any]] = {}
    for r in rates:
        if r["kv_write_s_per_byte"] is not None and r["head_dim"] is not None:
            kept = writes.get(str(r["head_dim"]))
            if kept is None or r["kv_write_s_per_byte"] > kept["value"]:
                writes[str(r["head_dim"])] = {"value": r["kv_write_s_per_byte"], "shape": r["shape"]}
    slowest_logprobs = max(rates, key=lambda r: r["logprobs_s_per_step"])
    slowest_save = min((r for r in rates if r["checkpoint_bytes_per_s"]), key=lambda r: r["checkpoint_bytes_per_s"])
    return {
        "generated": f"by {REGENERATE} from bench/results/tpu_grpo.json and tpu_grpo_offloaded.json; do not edit",
        "source": {
            "generation": generation,
            "device": result["device"],
            "trainer_commit": result["trainer_commit"],
            "offloaded_trainer_commit": offloaded["trainer_commit"],
        },
        "decode_overhead_s_per_position": {"value": overhead["decode_overhead_s_per_position"], "shape": overhead["shape"]},
        "kv_write_s_per_byte_by_head_dim": dict(sorted(writes.items(), key=lambda item: int(item[0]))),
        "checkpoint_bytes_per_s": {"value": slowest_save["checkpoint_bytes_per_s"], "shape": slowest_save["shape"]},
        "logprobs_s_per_step": {"value": slowest_logprobs["logprobs_s_per_step"], "shape": slowest_logprobs["shape"]},
        "shapes": rates,
    }


def rendered(result_path: Path = RESULT, offloaded_path: Path = OFFLOADED) -> str:
    return json.dumps(derive_rates(json.loads(result_path.read_text()), json.loads(offloaded_path.read_text())), indent=2) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when the checked-in rates differ")
    args = parser.parse_args()
    text = rendered()
    if args.check:
        if not RATES_FILE.exists() or RATES_FILE.read_text() != text:
            print(f"{RATES_FILE.relative_to(REPO)} is not what {RESULT.relative_to(REPO)} gives: run {REGENERATE}")
            sys.exit(1)
        return
    RATES_FILE.write_text(text)
    print(f"wrote {RATES_FILE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
