"""What one profiled GRPO step on the chip spent its device time on, from xprof's per-HLO-op table (bench/chip/tpu_grpo.py
records the step with JAX's profiler and converts it on the chip), and the decode step against the HBM bound.

The table's rows are HLO ops with their compiled program's framework name (`jit(_decode_fn)/while/body/...`), their
self time on the chip, and xprof's model FLOP rate; summed per program, they say where a step's device time went:
the rollout's decode loop, the update (`jit(_train_step)`), the log-probs' forward. Within the update, `async-done`
rows are the waits for the host-offload copies of each layer's input that MaxText's rl.yml asks for on TPU
(`decoder_layer_input: offload`): time the matrix units do not work.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench.chip.best_time import best_seconds
from trainer.contract.accelerators.tpu_generations import TPU_GENERATIONS

PEAK_BF16_FLOPS = TPU_GENERATIONS["v5e"].peak_bf16_flops_per_device  # the chip these profiles come from
DECODE, UPDATE, LOGPROBS = "jit(_decode_fn)", "jit(_train_step)", "jit(compute_per_token_logps)"
TOP_K = "/while/body/top_k"
CACHE_WRITE = "dynamic-update-slice"
OFFLOAD_WAIT = "async-done"


def _rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    ids = [c["id"] for c in table["cols"]]
    return [dict(zip(ids, [c.get("v") if isinstance(c, dict) else c for c in row["c"]], strict=True)) for row in table["rows"]]


def summarise(path: Path) -> dict[str, Any]:
    """Device milliseconds per compiled program, and inside the decode loop and the update, by kind of op."""
    rows = _rows(json.loads(gzip.open(path, "rt").read())["hlo_stats"])
    ms: Counter[str] = Counter()
    flops: Counter[str] = Counter()
    kinds: dict[str, Counter[str]] = {DECODE: Counter(), UPDATE: Counter()}
    decode_ops: Counter[str] = Counter()  # by the framework op a decode row comes from (convert_element_type, ...)
    decode_steps = 0
    for row in rows:
        name = (row["tf_op_name"] or "").split("/", 1)[0] or f"<{row['category']}>"
        self_ms = row["total_self_time"] / 1e3
        ms[name] += self_ms
        flops[name] += row["model_flop_rate"] * 1e9 * self_ms / 1e3  # xprof's rate is GFLOP/s
        if name in kinds:
            kinds[name][row["category"]] += self_ms
        if name == DECODE:
            decode_ops[(row["tf_op_name"] or "").rstrip(":/").rsplit("/", 1)[-1].rstrip(":") or row["category"]] += self_ms
        if name == DECODE and (row["tf_op_name"] or "").startswith(DECODE + TOP_K):
            decode_steps = max(decode_steps, int(row["occurrences"]))  # one top-k per decode step
    update_ms = ms[UPDATE]
    return {
        "device_ms": {k: round(v, 1) for k, v in ms.most_common(6)},
        "device_ms_total": round(sum(ms.values()), 1),
        "decode_steps": decode_steps,
        "decode_ms_per_step": round(ms[DECODE] / decode_steps, 3) if decode_steps else None,
        "decode_ms_per_step_by_kind": {k: round(v / decode_steps, 3) for k, v in kinds[DECODE].most_common(5)} if decode_steps else {},
        "decode_ms_per_step_by_op": {k: round(v / decode_steps, 3) for k, v in decode_ops.most_common(5)} if decode_steps else {},
        "update_hlo_tflops": round(flops[UPDATE] / 1e12, 2),
        "update_hlo_mfu": round(flops[UPDATE] / (update_ms / 1e3) / PEAK_BF16_FLOPS, 3) if update_ms else None,
        "update_ms_by_kind": {k: round(v, 1) for k, v in kinds[UPDATE].most_common(5)},
        "update_offload_wait_share": round(kinds[UPDATE][OFFLOAD_WAIT] / update_ms, 3) if update_ms else None,
        "update_matmul_mfu": _matmul_mfu(rows),
    }


def _matmul_mfu(rows: list[dict[str, Any]]) -> float | None:
    """The update's matrix-unit fusions alone: the FLOP rate they reach while they run."""
    fused = [r for r in rows if (r["tf_op_name"] or "").startswith(UPDATE) and r["category"] == "convolution fusion"]
    seconds = sum(r["total_self_time"] for r in fused) / 1e6
    done = sum(r["model_flop_rate"] * 1e9 * r["total_self_time"] / 1e6 for r in fused)
    return round(done / seconds / PEAK_BF16_FLOPS, 3) if seconds else None


def decode_bytes(config: dict[str, Any], parameters: int, sequences: int, cache_tokens: int, weight_bytes: int) -> int:
    """Bytes one decode step must read at least: every weight once, and every sequence's whole KV cache (Tunix's
    sampler attends over the cache's full length with a mask, not over the filled part)."""
    layers, kv_heads = config["num_hidden_layers"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    kv_cache = sequences * cache_tokens * layers * 2 * kv_heads * head_dim * 2  # keys and values, bf16
    return parameters * weight_bytes + kv_cache


def best_bandwidth(bandwidth: dict[str, Any]) -> float:
    """The chip's HBM read rate as measured in the same session: the best of bench/chip/tpu_grpo.py's cases, bytes/s."""
    return max(case["gb_per_s"] for case in bandwidth["cases"].values()) * 1e9


def memory_summary(shape: dict[str, Any]) -> dict[str, Any] | None:
    """Resident bytes between steps, the arrays' peak, and the programs' reserved temporaries (TPU books them apart)."""
    probe = shape.get("probe") or {}
    memory, parts = probe.get("memory") or {}, probe.get("memory_by_part") or []
    if not memory:
        return None
    resident = [p["in_use"] for p in parts if p["step"] == 2 and p["part"] == "rollout" and p["at"] == "enter"]
    reserved = memory.get("peak_bytes_reserved")
    return {
        "resident_bytes": resident[0] if resident else None,
        "peak_bytes_in_use": memory["peak_bytes_in_use"],
        "peak_bytes_reserved": reserved,
        "peak_held_bytes": memory["peak_bytes_in_use"] + reserved if reserved is not None else None,
        "limit_bytes": memory.get("bytes_limit"),
        "peak_set_in": _peak_part(parts),
    }


def _peak_part(parts: list[dict[str, Any]]) -> str | None:
    """The first part whose exit shows the arrays' final peak (asynchronous dispatch: or its predecessor)."""
    if not parts:
        return None
    final = max(p["peak"] for p in parts)
    return next((f"step {p['step']} {p['part']}" for p in parts if p["at"] == "leave" and p["peak"] == final), None)


def measure_bandwidth(out: Path) -> None:
    """The chip's HBM read bandwidth, measured as the decode step reads memory: a bf16 weight matrix times a few
    rows (1 GiB read per call, 8 and 32 rows), and a plain reduction over 2 GiB; best of REPEATS timed calls each."""
    import jax
    import jax.numpy as jnp

    repeats, found = 20, {}
    weights = jnp.ones((16384, 32768), jnp.bfloat16)  # 1 GiB
    flat = jnp.ones((2**30,), jnp.bfloat16)  # 2 GiB
    cases = {
        f"matvec_{rows}_rows": (jax.jit(lambda w, x: x @ w), (weights, jnp.ones((rows, 16384), jnp.bfloat16)), weights.nbytes)
        for rows in (8, 32)
    }
    cases["sum_2gib"] = (jax.jit(lambda x: jnp.sum(x, dtype=jnp.float32)), (flat,), flat.nbytes)
    for name, (fn, args, nbytes) in cases.items():
        best = best_seconds(fn, *args, repeats=repeats)
        found[name] = {"bytes": nbytes, "best_s": round(best, 6), "gb_per_s": round(nbytes / best / 1e9, 1)}
    body = {"device_kind": jax.devices()[0].device_kind, "repeats": repeats, "cases": found}
    (out / "bandwidth.json").write_text(json.dumps(body, indent=1))
    print("bandwidth", {k: v["gb_per_s"] for k, v in found.items()}, flush=True)
