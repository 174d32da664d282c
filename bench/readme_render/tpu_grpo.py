"""README passage of bench/chip/tpu_grpo.py: the GRPO train stage on one TPU v5e chip, per shape: time, where the
profiled step's device time went, and memory against the fit estimate."""

from __future__ import annotations

from typing import Any

from bench.chip.tpu_grpo import PRECISIONS, parse_label
from bench.estimate.fit_calibration_tpu import TOLERANCE, compare, differences, layers_in_hbm_of
from bench.readme_render.tpu_estimate_held_out import render_held_out

GIB = 1024**3


def _lengths(shape: dict[str, Any]) -> str:
    s = shape["settings"]
    prompt = s["max_prefill_predict_length"]
    return f"{s['batch_size']}x{s['num_generations']}, {prompt}+{s['max_target_length'] - prompt}"


def _time_row(shape: dict[str, Any]) -> str:
    compile_s = sum((shape.get("probe") or {}).get("compile_s", {}).values())
    first = shape["steps"][0]["wall_s"] if shape["steps"] else None
    steady = shape.get("steady")
    stopped = "out of HBM" if shape["returncode"] else ""
    if steady is None:
        return f"| {shape['shape']} | {_lengths(shape)} | {stopped or 'one step only'} | | | | | | | | {first} | {compile_s:.0f} |"
    steps = f"{steady['steps']} step{'s' if steady['steps'] > 1 else ''}{', then ' + stopped if stopped else ''}"
    return (
        f"| {shape['shape']} | {_lengths(shape)} | {steady['step_s']} ({steps}) | {steady['rollout_s']} | {steady['update_s']} | "
        f"{steady.get('logprobs_s', '')} | {steady['checkpoint_s']} | {steady['rest_share']:.1%} | "
        f"{steady['rollout_tokens_per_s']:.0f} | {steady['update_mfu']:.1%} | {first} | {compile_s:.0f} |"
    )


def _profile_row(shape: dict[str, Any]) -> str | None:
    profile, steady = shape.get("profile"), shape.get("steady") or {}
    if not profile:
        return None
    kinds = ", ".join(f"{kind} {ms}" for kind, ms in list(profile["decode_ms_per_step_by_kind"].items())[:3])
    return (
        f"| {shape['shape']} | {profile['decode_ms_per_step']} ({kinds}) | {steady['decode_bytes_per_step'] / 1e9:.2f} | "
        f"{steady['decode_bound_ms']} | {steady['decode_over_bound']}x | {profile['update_hlo_tflops']} | "
        f"{profile['update_hlo_mfu']:.1%} | "
        f"{profile['update_matmul_mfu']:.1%} | {profile['update_offload_wait_share']:.1%} |"
    )


def _memory_row(shape: dict[str, Any]) -> str:
    memory, estimate = shape.get("memory") or {}, compare(shape)

    def gib(key: str) -> str:
        value = memory.get(key)
        return f"{value / GIB:.2f}" if value is not None else "-"

    outcome = "out of HBM" if shape["returncode"] else "ran"
    return (
        f"| {shape['shape']} | {outcome} | {gib('resident_bytes')} | {gib('peak_bytes_in_use')} | {gib('peak_bytes_reserved')} | "
        f"{gib('peak_held_bytes')} | {estimate['estimated_total'] / GIB:.1f} at the {estimate['peak_phase']} ({estimate['verdict']}) |"
    )


def _calibration(shapes: list[dict[str, Any]]) -> str:
    """Each shape's figure against the estimate's, and part by part what differs (bench/estimate/fit_calibration_tpu.py)."""
    rows = [compare(s) for s in shapes]
    return (
        f"Calibration (`bench/estimate/fit_calibration_tpu.py`; tests/trainer/sizing/test_fit_calibration.py holds each within "
        f"{TOLERANCE:.0%}): "
        + "; ".join(
            f"{r['shape']} {r['measured_kind']} {r['measured'] / GIB:.2f} GiB, estimated {r['estimated'] / GIB:.2f} "
            f"({r['ratio']:.3f}" + "".join(f"; {line}" for line in differences(r)) + ")"
            for r in rows
        )
        + "."
    )


def _decode_upper_bound(s: dict[str, Any]) -> float:
    """The rollout's seconds per decoding position (prefill and sampling included) over the decode step's HBM bound:
    at least what a decode step alone takes over it."""
    return s["steady"]["rollout_ms_per_token_position"] / s["steady"]["decode_bound_ms"]


def _rollout_bound_row(s: dict[str, Any]) -> str:
    steady = s["steady"]
    return (
        f"| {s['shape']} | {steady['rollout_ms_per_token_position']} | {steady['decode_bytes_per_step'] / 1e9:.2f} | "
        f"{steady['decode_bound_ms']} | {_decode_upper_bound(s):.2f}x |"
    )


def _decode_goal(shapes: list[dict[str, Any]]) -> str:
    profiled = [s for s in shapes if s.get("profile") and s.get("steady")]
    if profiled:
        return (
            "; ".join(
                f"{s['shape']} ({s['settings']['batch_size'] * s['settings']['num_generations']} sequences) "
                f"{s['steady']['decode_over_bound']}x, {'met' if s['steady']['decode_over_bound'] <= 2 else 'missed'}: of its "
                f"{s['profile']['decode_ms_per_step']} ms, "
                + ", ".join(f"{op} {ms}" for op, ms in list(s["profile"]["decode_ms_per_step_by_op"].items())[:3])
                for s in profiled
            )
            + " ms per step"
        )
    ran = [s for s in shapes if s.get("steady") and s["steady"]["steps"] > 1]
    return "; ".join(
        f"{s['shape']} ({s['settings']['batch_size'] * s['settings']['num_generations']} sequences) at most "
        f"{_decode_upper_bound(s):.2f}x, " + ("met" if _decode_upper_bound(s) <= 2 else "not shown (no profile separates decode)")
        for s in ran
    )


# What the decode loop's framework ops are in trainer/rollout/cached_llama.py's step, for the goal's explanation.
DECODE_OPS = {
    "dynamic_update_slice": "is the step's write of one position into every layer's KV cache: kilobytes of new data, "
    "yet longer than reading the whole cache once at the measured bandwidth, so XLA moves the cache at every step; "
    "in Qwen3's decode (128-wide heads, SmolLM2's are 64) it is not among the top ops; the tpu-decode-bound block below "
    "measures it apart from the engine",
    "dot_general": "the matrix products: the weights and the attention over the cache",
    "top_k": "the sampler's top-k",
    "while": "the decode loop's own waits for its asynchronous copies",
    "convert_element_type": "the bf16 KV cache converted to fp32 whole at every step",
    "reduce_sum": "an fp32 multiply-reduce over the cache",
}


def _base_of(variant: dict[str, Any], shapes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The trainer's run of the shape and batch a variant ran differently."""
    name, batch, _ = parse_label(variant["shape"])
    return next((s for s in shapes if s["shape"] == f"{name}-b{batch}"), None)


def _agreement_words(shape: dict[str, Any]) -> str | None:
    found = shape.get("agreement") or {}
    means = list((found.get("sampler_trainer/train/logp_diff_mean") or {}).values())
    if not means:
        return None
    worst = max((found.get("sampler_trainer/train/logp_diff_max") or {"": float("nan")}).values())
    corr = list((found.get("sampler_trainer/train/probs_pearson_corr") or {}).values())
    # The trainer leaves the correlation out where one side's probabilities never varied over a step's tokens.
    return f"mean |Δ log p| {min(means):.4f}-{max(means):.4f} nats per token over {len(means)} steps, largest {worst:.3f}" + (
        f", probabilities' correlation at least {min(corr):.4f}"
        if corr
        else ", the sampled tokens' probabilities all equal on a side (no correlation), as one-hot distributions give"
    )


def _variants(result: dict[str, Any]) -> str:
    """Runs of a shape with settings of their own (`run --override`, `run --precision`) against the trainer's run of it."""
    lines = []
    for variant in result.get("variants") or []:
        base = _base_of(variant, result["shapes"])
        if base is None or not base.get("steady") or not variant.get("steady"):
            continue
        v, b = variant["steady"], base["steady"]
        memory = variant.get("memory") or {}
        precision = parse_label(variant["shape"])[2]
        # What the precision has MaxText read beyond the dtypes: appended (an override) or the trainer's own from the spec.
        spec_set = [
            f"`{k}={v}` from the spec"
            for k, v in (PRECISIONS[precision].reads if precision in PRECISIONS else {}).items()
            if k not in ("weight_dtype", "dtype") and f"{k}={v}" not in variant["maxtext_overrides"]
        ]
        overrides = ", ".join([f"`{o}`" for o in variant["maxtext_overrides"]] + spec_set)
        settings = variant["settings"]
        layers = "layers kept in HBM" if layers_in_hbm_of(variant) else "layers offloaded"
        what = (
            f"weights {settings['weight_dtype']}, compute {settings['compute_dtype']}, {layers}" + (f", {overrides}" if overrides else "")
            if precision
            else overrides
        )
        agreement = (_agreement_words(variant), _agreement_words(base))
        lines.append(
            f"{variant['shape']} ({what}; not what the trainer runs) against {base['shape']}: step {v['step_s']} s against "
            f"{b['step_s']} s ({v['step_s'] / b['step_s']:.2f}x) over {v['steps']} steady steps, rollout {v['rollout_s']} s "
            f"against {b['rollout_s']} s, update {v['update_s']} s against {b['update_s']} s (MFU {v['update_mfu']:.1%} against "
            f"{b['update_mfu']:.1%})"
            + (f"; sampler-trainer agreement {agreement[0]}, against {agreement[1]}" if all(agreement) else "")
            + f"; the chip held {memory.get('peak_held_bytes', 0) / GIB:.1f} GiB of its {memory.get('limit_bytes', 0) / GIB:.1f}"
            + (
                f" (a later session at the same trainer files, collected {variant['session']['collected_at']})"
                if variant.get("session")
                else " (same session)"
            )
        )
    return ("\n\nVariants: " + "; ".join(lines) + ".") if lines else ""


def render_tpu_precision_variants(result: dict[str, Any]) -> str:
    """A result kept for its variants: the runs of each shape they pair with were measured at its trainer files, not today's."""
    return (
        f"Kept from the run at the trainer files of `{result['trainer_commit']}` (collected {result['machine']['started_at']}): "
        "each variant beside that run of its shape, in `bench/results/tpu_grpo_precision_variants.json`. The "
        "logits-float32 runs appended MaxText's `logits_dot_in_fp32=true` after the trainer's settings, the setting "
        "`model.logits_dtype: float32` gives the train stage since `92d0630`." + _variants(result)
    )


def _goals(shapes: list[dict[str, Any]]) -> str:
    """Issue 52's three goals, each judged from the figures above, and where a goal is missed what the profile shows."""
    profiled = [s for s in shapes if s.get("profile") and s.get("steady")]
    ran = [s for s in shapes if s.get("steady") and s["steady"]["steps"] > 1]
    largest = max((s for s in shapes if s.get("steady")), key=lambda s: s["parameters"])
    steps = largest["steady"]["steps"]
    update = (
        f"{largest['shape']}, the largest, {largest['steady']['update_mfu']:.1%} "
        f"over {'its one steady step' if steps == 1 else f'{steps} steady steps'}"
        + (" before it ran out of HBM" if largest["returncode"] else "")
        + "; "
        + ", ".join(f"{s['shape']} {s['steady']['update_mfu']:.1%}" for s in ran if s is not largest)
    )
    if profiled:
        update += ". In the profiled updates " + ", ".join(
            f"{s['shape']}'s matrix fusions ran at {s['profile']['update_matmul_mfu']:.0%} of peak while the offload waits took "
            f"{s['profile']['update_offload_wait_share']:.0%} of its device time"
            for s in profiled
        )
    else:
        update += (
            ". No update was profiled in this run; the update's code did not change since the run before it, whose profile "
            "(this file's history) put the miss on the layer-input offload waits MaxText's rl.yml asks for on TPU"
        )
    rest = ", ".join(f"{s['shape']} {s['steady']['rest_share']:.1%}" for s in ran)
    named = {op for s in profiled for op in list(s["profile"]["decode_ms_per_step_by_op"])[:3]}
    causes = "; ".join(f"`{op}` {meaning}" for op, meaning in DECODE_OPS.items() if op in named)
    causes = f" ({causes})" if causes else ""
    return (
        f"Goals. Decode within 2x of the HBM bound: {_decode_goal(shapes)}{causes}. Update at 35% MFU on the largest "
        f"shape: {update}. Neither rollout, update nor checkpoint at most 10% of a step: {rest}."
    )


def _moved_more(shapes: list[dict[str, Any]], bandwidth: dict[str, Any]) -> str:
    """A profiled decode step that moved more bytes a second than the measured bandwidth makes it no bound."""
    faster = [
        (s["shape"], s["steady"]["decode_bytes_per_step"] / s["profile"]["decode_ms_per_step"] / 1e6)
        for s in shapes
        if s.get("profile") and s.get("steady")
    ]
    faster = [(name, rate) for name, rate in faster if rate * 1e9 > bandwidth["bytes_per_s"]]
    if not faster:
        return ""
    return (
        " That figure is not a bound: "
        + ", ".join(f"{name}'s decode step moved {rate:.0f} GB/s" for name, rate in faster)
        + "; the tpu-decode-bound block below takes a bound no program or step beat and judges the decode goal against it."
    )


def _bound(bandwidth: dict[str, Any], shapes: list[dict[str, Any]]) -> str:
    return (
        "The HBM bound of a decode step is the bytes it must read (the engine's bf16 weights once and every sequence's "
        "whole KV cache, which Tunix's sampler attends over with a mask) at the bandwidth measured in the same "
        f"session, {bandwidth['bytes_per_s'] / 1e9:.0f} GB/s (the best of a 1 GiB bf16 matrix times 8 or 32 rows and a "
        f"2 GiB reduction, mean over {len(bandwidth['runs'])} calls; the spec sheet says 819)." + _moved_more(shapes, bandwidth)
    )


def _profiles(rows: list[str], bandwidth: dict[str, Any], shapes: list[dict[str, Any]]) -> str:
    return (
        "One steady step of each shape recorded with JAX's profiler and read with xprof's per-HLO-op table. "
        + _bound(bandwidth, shapes)
        + " Update MFU by HLO = the FLOPs XLA's ops performed (rematerialisation included) over the update's device "
        "time; matmul = the same for the matrix-unit fusions alone while they run; offload wait = the update's "
        "`async-done` time, the copies of each layer's input to and from host memory that MaxText's rl.yml asks for on "
        "TPU:\n\n"
        "| shape | decode ms/step (top kinds) | GB read/step | HBM bound ms | over bound | update TFLOP (HLO) | "
        "update MFU by HLO | matmul MFU | offload wait |\n"
        "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows)
    )


def _rollout_bounds(shapes: list[dict[str, Any]], bandwidth: dict[str, Any]) -> str:
    ran = [s for s in shapes if s.get("steady") and s["steady"]["steps"] > 1]
    return (
        "No step was profiled in this run (its device time went to measuring every shape). "
        + _bound(bandwidth, shapes)
        + " A rollout's milliseconds per decoding position (its prefill and sampling included) are at least what a "
        "decode step alone takes, so their ratio to the bound is an upper bound on the decode step's:\n\n"
        "| shape | rollout ms per position | GB read/step | HBM bound ms | decode at most |\n|---|---|---|---|---|\n"
        + "\n".join(_rollout_bound_row(s) for s in ran)
    )


def _agreement(shapes: list[dict[str, Any]]) -> str:
    """Each shape's sampler-trainer agreement over its steps, where the run logged it."""
    told = [f"{shape['shape']} ({shape['settings']['compute_dtype']}) {words}" for shape in shapes if (words := _agreement_words(shape))]
    if not told:
        return ""
    return (
        "\n\nSampler-trainer agreement (the rollout engine's log-probabilities of its sampled tokens against the trainer's "
        "forward over them, every step; trainer/maxtext_entry/logprob_agreement.py): " + "; ".join(told) + "."
    )


def render_tpu_grpo(result: dict[str, Any]) -> str:
    machine, shapes = result["machine"], result["shapes"]
    bandwidth = result["hbm_bandwidth"]
    earlier = [s["shape"] for s in shapes if s.get("earlier_run")]
    profiles = [row for row in (_profile_row(s) for s in shapes) if row]
    return (
        f"{result['device']}, JAX {result['jax']}, trainer files of commit `{result['trainer_commit']}` "
        f"(collected {machine['started_at']}"
        + (f"; {', '.join(earlier)} from the session before, same trainer files" if earlier else "")
        + "). Steady: the mean of the steps after the first, leaving out the one after the profiled step (the profiler "
        "writing its trace); log-probs = the step waiting on the host for the reference's and the sampler-trainer "
        "agreement's forwards before the update; rest = what is neither rollout, update nor checkpoint save (the "
        "log-probs wait among it); update MFU = 6 x parameters x "
        "batch x generations x max_target_length / update seconds / 197 TFLOP/s.\n\n"
        "| shape | prompts x generations, prompt+new tokens | steady s/step | rollout s | update s | log-probs s | "
        "checkpoint s | rest | rollout tokens/s | update MFU | first step s | JAX compile s |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        + "\n".join(_time_row(s) for s in shapes)
        + "\n\n"
        + (_profiles(profiles, bandwidth, shapes) if profiles else _rollout_bounds(shapes, bandwidth))
        + "\n\nMemory: resident = bytes in use between steps; arrays' peak = JAX's `peak_bytes_in_use`; programs' "
        "temporaries = `peak_bytes_reserved`, libtpu's reservation for XLA's temporaries in the same HBM (both = their "
        "sum: what the chip held where the two peaks were at once; above the 16.9 GB it may allocate, they were not); "
        "the estimate is trainer/sizing/fit.py's largest phase for the same spec at this commit, arrays and that "
        "phase's own temporaries:\n\n"
        "| shape | outcome | resident GiB | arrays' peak GiB | programs' temporaries GiB | both GiB | fit estimate GiB |\n"
        "|---|---|---|---|---|---|---|\n"
        + "\n".join(_memory_row(s) for s in shapes)
        + "\n\n"
        + _calibration(shapes)
        + "\n\n"
        + _goals(shapes)
        + _agreement(shapes)
        + _variants(result)
        + "\n\n"
        + render_held_out(result)
    )
