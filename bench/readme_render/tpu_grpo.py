"""README passage of bench/tpu_grpo.py: the GRPO train stage on one TPU v5e chip, per shape."""

from __future__ import annotations

from typing import Any

GIB = 1024**3


def _shape_row(shape: dict[str, Any]) -> str:
    s, memory = shape["settings"], (shape.get("probe") or {}).get("memory") or {}
    prompt = s["max_prefill_predict_length"]
    lengths = f"{s['batch_size']}x{s['num_generations']}, {prompt}+{s['max_target_length'] - prompt}"
    estimate = shape["fit_estimate"]
    peak = f"{memory['peak_bytes_in_use'] / GIB:.2f}" if memory else "-"
    predicted = f"{estimate['total_bytes_per_chip'] / GIB:.1f} ({estimate['verdict']})"
    compile_s = sum((shape.get("probe") or {}).get("compile_s", {}).values())
    first = shape["steps"][0]["wall_s"] if shape["steps"] else None
    steady = shape.get("steady")
    if shape["returncode"] != 0 or steady is None:
        outcome = "out of HBM" if shape["returncode"] else "one step only"
        return f"| {shape['shape']} | {lengths} | {outcome} | | | | | {first} | {compile_s:.0f} | {peak} | {predicted} |"
    return (
        f"| {shape['shape']} | {lengths} | {steady['step_s']} ({steady['steps']} steps) | {steady['rollout_s']} | "
        f"{steady['update_s']} | {steady['rollout_tokens_per_s']:.0f} | {steady['update_mfu']:.1%} | {first} | {compile_s:.0f} | "
        f"{peak} | {predicted} |"
    )


def render_tpu_grpo(result: dict[str, Any]) -> str:
    machine = result["machine"]
    rows = "\n".join(_shape_row(shape) for shape in result["shapes"])
    return (
        f"{result['device']}, JAX {result['jax']}, trainer files of commit `{result['trainer_commit']}` "
        f"(collected {machine['started_at']}). Steady: the mean of the steps after the first (checkpoint steps included); "
        "MFU = 6 x parameters x batch x generations x max_target_length / update seconds / 197 TFLOP/s.\n\n"
        "| shape | prompts x generations, prompt+new tokens | steady s/step | rollout s | update s | rollout tokens/s | "
        "update MFU | first step s | JAX compile s | peak HBM GiB | fit estimate GiB |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n" + rows
    )
