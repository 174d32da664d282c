"""bench/chip/README.md's decode-bound block (bench/results/tpu_decode_bound.json, bench/chip/tpu_decode_bound.py): the
decode step's HBM bound from programs and steps, each profiled decode against it, and the KV-cache write by layout."""

from __future__ import annotations

from typing import Any

LAYOUTS = {
    "heads_first_dus": "[B, H, L, D], dynamic_update_slice (the engine today)",
    "heads_first_onehot": "[B, H, L, D], a select over L (one-hot)",
    "seq_first_dus": "[L, B, H, D], dynamic_update_slice",
    "seq_on_lanes_dus": "[B, H, D, L] (the position on the lanes), dynamic_update_slice",
    "lanes_128_dus": "[B, H, L, 128] (the width zero-padded, read back at D), dynamic_update_slice",
    "flat_lanes_dus": "[B, L, H*D], dynamic_update_slice",
    "padded_128_dus": "[B, H, L, 128] read at 128 (queries zero-padded too), dynamic_update_slice",
    "position_pairs_dus": "[B, H, L/2, 2D] (two positions a lane row), dynamic_update_slice",
}


def _program_rows(result: dict[str, Any]) -> list[str]:
    return [
        f"| {name} | {case['bytes'] / 2**30:.2f} | {case['best_s'] * 1000:.3f} | {case['gb_per_s']} |"
        for name, case in result["programs"].items()
    ]


def _decode_rows(result: dict[str, Any]) -> list[str]:
    return [
        f"| {name} | {s['decode_ms_per_step']} | {s['decode_bytes_per_step'] / 1e9:.2f} | {s['gb_per_s']} | {s['bound_ms']} | "
        f"{s['over_bound']}x ({'met' if s['over_bound'] <= 2 else 'missed'}) | {s['over_spec']}x |"
        for name, s in result["shapes"].items()
    ]


def _cache_rows(result: dict[str, Any]) -> list[str]:
    names = list(result["shapes"]) + list(result["probes"])
    every = {**result["shapes"], **result["probes"]}
    header = "| layout and write | " + " | ".join(f"{n} (D={every[n]['cache']['head_dim']})" for n in names) + " |"
    rows = [header, "|---|" + "---|" * len(names)]
    rows.append("| attend only (no write) | " + " | ".join(f"{every[n]['variant_ms']['attend_only']:.3f}" for n in names) + " |")
    for variant, meaning in LAYOUTS.items():
        if not any(variant in every[n]["variant_ms"] for n in names):
            continue  # a layout the bench gained after this result was measured
        cells = []
        for n in names:
            ms, write = every[n]["variant_ms"].get(variant), every[n]["write_ms"].get(variant)
            cells.append("-" if ms is None else f"{ms:.3f} (write {write:+.3f})")
        rows.append(f"| {meaning} | " + " | ".join(cells) + " |")
    return rows


def _width(result: dict[str, Any]) -> str:
    """The probe that changes only the head width of a bench shape, against that shape."""
    for name, probe in result["probes"].items():
        base = next((s for n, s in result["shapes"].items() if name.startswith(n.rsplit("-b", 1)[0])), None)
        if base is None:
            continue
        same = {k: v for k, v in probe["cache"].items() if k != "head_dim"} == {k: v for k, v in base["cache"].items() if k != "head_dim"}
        if not same:
            continue
        today = "heads_first_dus"
        return (
            f" The probe `{name}` is that shape with {probe['cache']['head_dim']}-wide heads and nothing else changed: its "
            f"write costs {probe['write_ms'][today]:.3f} ms a position against {base['write_ms'][today]:.3f} ms at "
            f"{base['cache']['head_dim']} wide, with twice the cache to attend over. So the head width, not the batch or "
            "the head count, is what makes the write expensive; no layout tried here that keeps the heads 64 wide removes it. "
            f"The probe's arithmetic is also a remedy: with keys, values and queries zero-padded to "
            f"{probe['cache']['head_dim']} the attention's result is unchanged, and write and attention together cost "
            f"{probe['variant_ms'][today]:.3f} ms against {base['variant_ms'][today]:.3f} "
            f"({probe['variant_ms'][today] / base['variant_ms'][today]:.2f}x)." + _padded_measured(result["shapes"])
        )
    return ""


def _padded_measured(shapes: dict[str, Any]) -> str:
    """The remedy measured on the 64-wide shapes themselves, where the raw file has it."""
    told = [
        f"{name} {s['variant_ms']['padded_128_dus']:.3f} ms against {s['variant_ms']['heads_first_dus']:.3f} "
        f"({s['variant_ms']['padded_128_dus'] / s['variant_ms']['heads_first_dus']:.2f}x)"
        for name, s in shapes.items()
        if s["cache"]["head_dim"] < 128 and "padded_128_dus" in s["variant_ms"]
    ]
    if not told:
        return ""
    return (
        " Measured on the 64-wide shapes themselves (the row read at 128, queries zero-padded too), it costs "
        + "; ".join(told)
        + ", at twice the cache's bytes."
    )


def render_tpu_decode_bound(result: dict[str, Any]) -> str:
    shapes = result["shapes"]
    fastest = result["programs"][result["fastest_program"]]
    missed = [n for n, s in shapes.items() if s["over_bound"] > 2]
    bound = (
        f"The bound: {result['bound_gb_per_s']} GB/s, "
        + (
            f"what {result['fastest_decode_step']}'s profiled decode step moved (bench/results/tpu_grpo.json), above the "
            f"fastest program here ({result['fastest_program']}, {fastest['gb_per_s']} GB/s)"
            if result["bound_from"] == "decode step"
            else f"the fastest program here ({result['fastest_program']}), above every profiled decode step"
        )
        + f"; the spec sheet says {result['spec_gb_per_s']:.0f}. Programs with JAX {result['jax']} on {result['device_kind']}, "
        f"best of {result['repeats']} calls each"
        + (
            f"; a second call of the same programs and layouts (`{result['repeat']}`) differed by at most "
            f"{result['repeat_largest_difference']:.1%}"
            if result.get("repeat")
            else ""
        )
        + ":"
    )
    writes = "; ".join(
        f"{n}: today's write {s['write_ms']['heads_first_dus']:.3f} ms here, {s['write_ms_per_step']} ms in the engine's profile; "
        f"fastest {s['fastest']} at {s['fastest_over_today']:.2f}x today's write and attention"
        for n, s in shapes.items()
    )
    return "\n".join(
        [
            bound,
            "",
            "| program | GiB moved | best ms | GB/s |",
            "|---|---|---|---|",
            *_program_rows(result),
            "",
            "Each profiled decode step (trainer files of commit "
            f"`{result['grpo_trainer_commit']}`) against the bound and against the spec figure:",
            "",
            "| shape | decode ms/step | GB read/step | GB/s moved | bound ms | over bound | over 819 GB/s |",
            "|---|---|---|---|---|---|---|",
            *_decode_rows(result),
            "",
            f"Decode within 2x of the bound: {'missed by ' + ', '.join(missed) if missed else 'met by every shape'}.",
            "",
            "The KV-cache write apart from the engine: ms per decode position for every layer's write of one position and "
            f"one query token attending over the whole cache, {result['positions_per_call']} positions a call, best of "
            f"{result['repeats']} (write = the variant less attending alone):",
            "",
            *_cache_rows(result),
            "",
            f"{writes}.{_width(result)} The engine still writes as it did: a faster write is not yet in "
            "trainer/rollout/cached_llama.py, so the decode figures above stand.",
        ]
    )
