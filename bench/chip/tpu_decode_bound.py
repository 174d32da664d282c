"""Issue 67 §2 on the chip: a decode bound that is a bound, and what the KV-cache write costs in each layout.

`measure` runs on the chip's machine with any Python that has JAX (it imports nothing of rljob's, so it needs no
staging) and writes one raw file:
- the HBM rate of several programs that only stream memory (reductions over either axis, in bf16 and fp32, a copy, a
  few-rows matrix product), each the best of REPEATS timed calls;
- for each bench shape of bench/chip/tpu_grpo.py (its KV heads, head width, layers, sequences and cache length), the
  decode loop's cache work alone: a `fori_loop` over positions whose body, for every layer, writes one position of
  keys and values into that layer's cache and attends one query token over the whole cache (masked, as Tunix's
  sampler attends), in each candidate layout and write (XLA's dynamic_update_slice, a select, or a Pallas kernel that
  writes the block holding the position in place). `attend_only` writes nothing: what the write adds is the
  difference. A variant that fails (a kernel the chip's compiler refuses) is recorded as failed, the others measured.
  These are not the engine (trainer/rollout/cached_llama.py): no weights, no sampler; they isolate the one op the
  profile blamed.

`collect` folds the raw file with bench/results/tpu_grpo.json (each shape's decode step from its profile) into
bench/results/tpu_decode_bound.json: the bound is the fastest program's rate, raised to what any profiled decode step
moved if one moved more, beside the 819 GB/s spec figure.

    python3 bench/chip/tpu_decode_bound.py measure --out $OUT          # on the chip (one call, about 2 minutes)
    .venv/bin/python bench/chip/tpu_decode_bound.py collect RAW.json   # here
    .venv/bin/python bench/readme_sections.py                          # bench/chip/README.md's tpu-decode-bound block
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.chip.best_time import best_seconds  # noqa: E402

RESULT = REPO / "bench" / "results" / "tpu_decode_bound.json"
GRPO = REPO / "bench" / "results" / "tpu_grpo.json"
REPEATS = 20
POSITIONS = 32  # decode positions per timed call of a cache variant

# name in tpu_grpo.json -> (layers, sequences, KV heads, query heads per KV head, head width, cache length): the
# bench shapes' configs (bench/chip/tpu_grpo.py SHAPES) at GSM8K's settings, cache = max_target_length + buffer.
SHAPES: dict[str, tuple[int, int, int, int, int, int]] = {
    "smollm2-135m-b4": (30, 32, 3, 3, 64, 776),
    "smollm2-360m-b4": (32, 32, 5, 3, 64, 776),
    "qwen3-0.6b-b1": (28, 8, 8, 2, 128, 776),
}
SMALL = {"small": (2, 4, 2, 2, 64, 64)}  # `measure --small`: the same programs at sizes a CPU runs in seconds


def bandwidth_programs(gib: float, repeats: int) -> dict[str, dict[str, Any]]:
    """Programs that do nothing but stream HBM; bytes counts every byte read and written once."""
    import jax
    import jax.numpy as jnp

    n = int(gib * 2**30) // 2  # bf16 elements in `gib` GiB
    side = int(n**0.5) // 128 * 128
    found: dict[str, dict[str, Any]] = {}

    def run(name: str, fn: Callable[..., Any], args: tuple[Any, ...], nbytes: int) -> None:
        best = best_seconds(jax.jit(fn), *args, repeats=repeats)
        found[name] = {"bytes": nbytes, "best_s": round(best, 6), "gb_per_s": round(nbytes / best / 1e9, 1)}

    flat = jnp.ones((n,), jnp.bfloat16)
    run("sum_bf16", lambda x: jnp.sum(x, dtype=jnp.float32), (flat,), flat.nbytes)
    run("copy_bf16 (read + write)", lambda x: x + jnp.bfloat16(1), (flat,), 2 * flat.nbytes)
    del flat
    flat32 = jnp.ones((n // 2,), jnp.float32)
    run("sum_f32", jnp.sum, (flat32,), flat32.nbytes)
    del flat32
    square = jnp.ones((side, side), jnp.bfloat16)
    run("max_over_rows_bf16", lambda x: jnp.max(x, axis=0), (square,), square.nbytes)
    run("sum_over_lanes_bf16", lambda x: jnp.sum(x, axis=1, dtype=jnp.float32), (square,), square.nbytes)
    for rows in (1, 8, 32):
        x = jnp.ones((rows, side), jnp.bfloat16)
        run(f"matvec_{rows}_rows_bf16", lambda w, v: jnp.dot(v, w, preferred_element_type=jnp.float32), (square, x), square.nbytes)
    return found


# layout name -> (cache shape from (B, H, L, D), the write of one position t, how attention reads it)
def _layouts() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    def heads_first_dus(cache: Any, new: Any, t: Any) -> Any:  # [B, H, L, D]: trainer/rollout/cached_llama.py today
        return jax.lax.dynamic_update_slice(cache, new[:, :, None, :], (0, 0, t, 0))

    def heads_first_onehot(cache: Any, new: Any, t: Any) -> Any:  # the same layout, written by a select over L
        hit = (jnp.arange(cache.shape[2]) == t)[None, None, :, None]
        return jnp.where(hit, new[:, :, None, :], cache)

    def seq_first_dus(cache: Any, new: Any, t: Any) -> Any:  # [L, B, H, D]: the position on the major axis
        return jax.lax.dynamic_update_slice(cache, new[None], (t, 0, 0, 0))

    def seq_on_lanes_dus(cache: Any, new: Any, t: Any) -> Any:  # [B, H, D, L]: the position on the lane axis
        return jax.lax.dynamic_update_slice(cache, new[:, :, :, None], (0, 0, 0, t))

    def flat_lanes_dus(cache: Any, new: Any, t: Any) -> Any:  # [B, L, H*D]: heads and width on the lanes together
        b, h, d = new.shape
        return jax.lax.dynamic_update_slice(cache, new.reshape(b, 1, h * d), (0, t, 0))

    def lanes_128_dus(cache: Any, new: Any, t: Any) -> Any:  # [B, H, L, 128]: the width zero-padded to a full lane row
        wide = jnp.pad(new, ((0, 0), (0, 0), (0, cache.shape[-1] - new.shape[-1])))
        return jax.lax.dynamic_update_slice(cache, wide[:, :, None, :], (0, 0, t, 0))

    def padded_128_dus(cache: Any, new: Any, t: Any) -> Any:  # [B, H, L, 128], read at 128 with the query padded too
        return lanes_128_dus(cache, new, t)

    def position_pairs_dus(cache: Any, new: Any, t: Any) -> Any:  # [B, H, L/2, 2D]: two positions share a lane row
        d = new.shape[-1]
        return jax.lax.dynamic_update_slice(cache, new[:, :, None, :], (0, 0, t // 2, (t % 2) * d))

    def heads_first_pallas(cache: Any, new: Any, t: Any) -> Any:  # [B, H, L, D], written in place by a Pallas kernel
        return _pallas_block_write(cache, new, t)

    heads_first = ("bhld", lambda b, h, n, d: (b, h, n, d))
    return {
        "heads_first_dus": (*heads_first, heads_first_dus),
        "heads_first_pallas": (*heads_first, heads_first_pallas),
        "heads_first_onehot": (*heads_first, heads_first_onehot),
        "seq_first_dus": ("lbhd", lambda b, h, n, d: (n, b, h, d), seq_first_dus),
        "seq_on_lanes_dus": ("bhdl", lambda b, h, n, d: (b, h, d, n), seq_on_lanes_dus),
        "lanes_128_dus": ("bhld", lambda b, h, n, d: (b, h, n, max(d, 128)), lanes_128_dus),
        "flat_lanes_dus": ("bl(hd)", lambda b, h, n, d: (b, n, h * d), flat_lanes_dus),
        "padded_128_dus": ("bhlP", lambda b, h, n, d: (b, h, n, max(d, 128)), padded_128_dus),
        "position_pairs_dus": ("bh(l/2)(2d)", lambda b, h, n, d: (b, h, n // 2, 2 * d), position_pairs_dus),
    }


PALLAS_ROWS = 16  # the cache rows one kernel call reads and writes back: bf16's sublane tile on TPU


def _pallas_block_write(cache: Any, new: Any, t: Any) -> Any:
    """Position t of every sequence and head written into a [B, H, L, D] cache in place (the output aliases the cache):
    the kernel moves only the PALLAS_ROWS-row block holding t, selecting the new row within it, where XLA's
    dynamic_update_slice took longer than reading the whole cache for 64-wide heads. Off the chip it runs in Pallas's
    interpreter, so the CPU tests check what it writes."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    b, h, _, d = cache.shape
    rows = PALLAS_ROWS

    def kernel(t_ref: Any, cache_ref: Any, new_ref: Any, out_ref: Any) -> None:
        hit = jax.lax.broadcasted_iota(jnp.int32, (b, h, rows, d), 2) == t_ref[0] % rows
        out_ref[...] = jnp.where(hit, jnp.broadcast_to(new_ref[...][:, :, None, :], (b, h, rows, d)), cache_ref[...])

    block = pl.BlockSpec((b, h, rows, d), lambda i, t_ref: (0, 0, t_ref[0] // rows, 0))
    grid = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[block, pl.BlockSpec((b, h, d), lambda i, t_ref: (0, 0, 0))], out_specs=block
    )
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(cache.shape, cache.dtype),
        grid_spec=grid,
        input_output_aliases={1: 0},  # inputs count the scalar: the cache is input 1
        interpret=jax.default_backend() != "tpu",
    )
    return call(jnp.reshape(t, (1,)).astype(jnp.int32), cache, new)


def _attend(q: Any, k: Any, v: Any, layout: str, t: Any) -> Any:
    """One query token per sequence ([B, H, G, D]) over the whole cache, positions after t masked."""
    import jax
    import jax.numpy as jnp

    width = q.shape[-1]
    if k.shape[-1] > width and layout == "bhld":  # lanes_128_dus: read the width the heads have
        k, v = k[..., :width], v[..., :width]
    if layout == "bhlP":  # padded_128_dus: zeros in the query's pad meet zeros in the keys', the values' give zeros
        q = jnp.pad(q, ((0, 0), (0, 0), (0, 0), (0, k.shape[-1] - width)))
        return _attend(q, k, v, "bhld", t)[..., :width]
    if layout == "bh(l/2)(2d)":  # position_pairs_dus: row r holds positions 2r and 2r+1, so a reshape restores [B, H, L, D]
        b, h, rows, _ = k.shape
        k, v = k.reshape(b, h, 2 * rows, width), v.reshape(b, h, 2 * rows, width)
        layout = "bhld"
    spec = {"bhld": "bhld", "lbhd": "lbhd", "bhdl": "bhdl"}.get(layout)
    if spec is None:  # "bl(hd)": split the lanes back into heads and width (a view)
        b, length, hd = k.shape
        h = q.shape[1]
        k, v, spec = k.reshape(b, length, h, hd // h), v.reshape(b, length, h, hd // h), "blhd"
    scores = jnp.einsum(f"bhgd,{spec}->bhgl", q, k, preferred_element_type=jnp.float32)
    scores = jnp.where(jnp.arange(scores.shape[-1]) <= t, scores, -1e30)
    weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    return jnp.einsum(f"bhgl,{spec}->bhgd", weights, v, preferred_element_type=jnp.float32)


def cache_variants(shape: tuple[int, int, int, int, int, int], repeats: int) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """ms per decode position of every layer's cache write and attention, for each layout and write; and each variant
    that failed (a kernel the chip's compiler refused), with its error, so one failure keeps the call's other figures."""
    start = shape[-1] - POSITIONS - 1  # the loop's positions sit late in the cache, as most of a rollout's do
    found: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    variants = {"attend_only": ("bhld", lambda b_, h_, l_, d_: (b_, h_, l_, d_), None), **_layouts()}
    for name, (layout, cache_shape, write) in variants.items():
        try:
            found[name] = _timed_variant(shape, layout, cache_shape, write, repeats, start)
        except Exception as error:  # noqa: BLE001 - recorded: the raw file says which variant failed and why
            failed[name] = f"{type(error).__name__}: {str(error)[:600]}"
    return found, failed


def _timed_variant(
    shape: tuple[int, int, int, int, int, int], layout: str, cache_shape: Any, write: Any, repeats: int, start: int
) -> dict[str, Any]:
    """One variant's decode positions, the best of `repeats` timed calls."""
    import jax
    import jax.numpy as jnp

    layers, b, h, g, d, length = shape

    def positions(caches: Any, q: Any, new: Any) -> Any:
        def body(i: Any, carry: Any) -> Any:
            ks, vs, acc = carry
            t = start + i
            ks, vs = list(ks), list(vs)
            for layer in range(layers):
                step_new = (new + i.astype(new.dtype)).astype(new.dtype)
                if write is not None:
                    ks[layer] = write(ks[layer], step_new, t)
                    vs[layer] = write(vs[layer], step_new, t)
                acc = acc + _attend(q + acc.astype(q.dtype), ks[layer], vs[layer], layout, t)
            return tuple(ks), tuple(vs), acc

        ks, vs = caches
        return jax.lax.fori_loop(0, POSITIONS, body, (ks, vs, jnp.zeros(q.shape, jnp.float32)))

    caches = (
        tuple(jnp.full(cache_shape(b, h, length, d), 0.01, jnp.bfloat16) for _ in range(layers)),
        tuple(jnp.full(cache_shape(b, h, length, d), 0.02, jnp.bfloat16) for _ in range(layers)),
    )
    q, new = jnp.full((b, h, g, d), 0.1, jnp.bfloat16), jnp.full((b, h, d), 0.3, jnp.bfloat16)
    run = jax.jit(positions, donate_argnums=(0,))
    out = run(caches, q, new)  # compiles; the donated caches come back as the loop's output
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        out = run(out[:2], q, new)
        jax.block_until_ready(out)
        best = min(best, time.perf_counter() - started)
    cache_bytes = 2 * layers * b * h * length * d * 2
    return {
        # every layout writes and reads the same numbers, so the attention's sums agree (tests/bench/chip)
        "checksum": float(jnp.sum(out[2])),
        "ms_per_position": round(best / POSITIONS * 1000, 4),
        "cache_bytes": cache_bytes,
        "cache_gb_per_s": round(cache_bytes / (best / POSITIONS) / 1e9, 1),
    }


def measure(out: Path, small: bool, probes: dict[str, tuple[int, ...]] | None = None) -> None:
    """`probes`: shapes of one's own choosing instead of the bench shapes, without the programs (to separate causes)."""
    import jax

    shapes: dict[str, Any] = probes or (SMALL if small else SHAPES)
    repeats = 3 if small else REPEATS
    body: dict[str, Any] = {
        "device_kind": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "python": platform.python_version(),
        "repeats": repeats,
        "positions_per_call": POSITIONS,
        "programs": {} if probes else bandwidth_programs(0.0625 if small else 1.0, repeats),
        "shapes": {},
    }
    print("programs", {k: v["gb_per_s"] for k, v in body["programs"].items()}, flush=True)
    for name, shape in shapes.items():
        variants, failed = cache_variants(shape, repeats)
        body["shapes"][name] = {
            "shape": dict(zip(("layers", "sequences", "kv_heads", "groups", "head_dim", "cache_len"), shape, strict=True)),
            "variants": variants,
        } | ({"failed": failed} if failed else {})
        if failed:
            print(name, "failed:", failed, flush=True)
        print(name, {k: v["ms_per_position"] for k, v in body["shapes"][name]["variants"].items()}, flush=True)
        out.mkdir(parents=True, exist_ok=True)  # after every shape: a call cut short keeps what it measured
        (out / "tpu_decode_bound-raw.json").write_text(json.dumps(body, indent=1))


def _relative(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _largest_difference(raw: dict[str, Any], repeat: dict[str, Any]) -> float:
    """The largest relative difference between two calls' figures of the same program or variant."""
    pairs = [(raw["programs"][n]["best_s"], repeat["programs"][n]["best_s"]) for n in raw["programs"] if n in repeat["programs"]]
    for shape, measured in raw["shapes"].items():
        again = repeat["shapes"].get(shape, {}).get("variants", {})
        pairs += [(v["ms_per_position"], again[n]["ms_per_position"]) for n, v in measured["variants"].items() if n in again]
    return round(max(abs(a - b) / a for a, b in pairs), 4)


def _probe(raw: dict[str, Any]) -> dict[str, Any]:
    """Shapes measured apart from the bench's: each variant and what its write adds to attending alone."""
    found = {}
    for name, measured in raw["shapes"].items():
        variants = measured["variants"]
        base = variants["attend_only"]["ms_per_position"]
        found[name] = {
            "cache": measured["shape"],
            "variant_ms": {v: x["ms_per_position"] for v, x in variants.items()},
            "write_ms": {v: round(x["ms_per_position"] - base, 4) for v, x in variants.items() if v != "attend_only"},
        }
    return found


def collect(raw_file: Path, repeat_file: Path | None = None, probe_file: Path | None = None) -> dict[str, Any]:
    """The bound and each profiled decode step against it; each shape's cache layouts against today's. `repeat_file`:
    an earlier call of the same programs (how far two calls differ); `probe_file`: a `measure --probe` call."""
    from trainer.contract.accelerators.tpu_generations import TPU_GENERATIONS  # the catalog (not imported by `measure` on the chip)

    spec_bytes_per_s = TPU_GENERATIONS["v5e"].hbm_bytes_per_s_per_chip
    raw = json.loads(raw_file.read_text())
    grpo = json.loads(GRPO.read_text())
    moved = {
        s["shape"]: {
            "decode_ms_per_step": s["profile"]["decode_ms_per_step"],
            "decode_bytes_per_step": s["steady"]["decode_bytes_per_step"],
            "gb_per_s": round(s["steady"]["decode_bytes_per_step"] / s["profile"]["decode_ms_per_step"] / 1e6, 1),
            "write_ms_per_step": s["profile"]["decode_ms_per_step_by_op"].get("dynamic_update_slice", 0.0),
        }
        for s in grpo["shapes"]
        if s.get("profile") and s.get("steady") and s["shape"] in SHAPES
    }
    fastest_program = max(raw["programs"], key=lambda name: raw["programs"][name]["gb_per_s"])
    fastest_step = max(moved, key=lambda name: moved[name]["gb_per_s"])
    program_rate, step_rate = raw["programs"][fastest_program]["gb_per_s"], moved[fastest_step]["gb_per_s"]
    bound = max(program_rate, step_rate)
    shapes = {}
    for name, step in moved.items():
        bound_ms = step["decode_bytes_per_step"] / (bound * 1e9) * 1000
        variants = raw["shapes"][name]["variants"]
        base = variants["attend_only"]["ms_per_position"]
        writes = {v: round(x["ms_per_position"] - base, 4) for v, x in variants.items() if v != "attend_only"}
        best = min(writes, key=lambda v: variants[v]["ms_per_position"])
        shapes[name] = step | {
            "bound_ms": round(bound_ms, 3),
            "over_bound": round(step["decode_ms_per_step"] / bound_ms, 2),
            "over_spec": round(step["decode_ms_per_step"] / (step["decode_bytes_per_step"] / spec_bytes_per_s * 1000), 2),
            "cache": raw["shapes"][name]["shape"],
            "attend_only_ms": base,
            "variant_ms": {v: x["ms_per_position"] for v, x in variants.items()},
            "write_ms": writes,
            "fastest": best,
            "fastest_over_today": round(variants[best]["ms_per_position"] / variants["heads_first_dus"]["ms_per_position"], 3),
        }
    repeat = json.loads(repeat_file.read_text()) if repeat_file else None
    probe = json.loads(probe_file.read_text()) if probe_file else None
    return {
        "device_kind": raw["device_kind"],
        "jax": raw["jax"],
        "raw": _relative(raw_file),
        "repeat": _relative(repeat_file) if repeat_file else None,
        "repeat_largest_difference": _largest_difference(raw, repeat) if repeat else None,
        "probe": _relative(probe_file) if probe_file else None,
        "probes": _probe(probe) if probe else {},
        "grpo": str(GRPO.relative_to(REPO)),
        "grpo_trainer_commit": grpo.get("trainer_commit"),
        "repeats": raw["repeats"],
        "positions_per_call": raw["positions_per_call"],
        "programs": raw["programs"],
        "fastest_program": fastest_program,
        "fastest_decode_step": fastest_step,
        "bound_gb_per_s": bound,
        "bound_from": "program" if program_rate >= step_rate else "decode step",
        "spec_gb_per_s": spec_bytes_per_s / 1e9,
        "shapes": shapes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="on the chip: the programs and the cache variants")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--small", action="store_true", help="tiny sizes (a CPU check of the programs)")
    m.add_argument("--probe", action="append", default=[], help="NAME=layers,sequences,kv_heads,groups,head_dim,cache_len")
    c = sub.add_parser("collect", help="here: fold a measured raw file with tpu_grpo.json")
    c.add_argument("raw", type=Path)
    c.add_argument("--repeat", type=Path, default=None, help="an earlier `measure` call's raw file")
    c.add_argument("--probe", type=Path, default=None, help="a `measure --probe` call's raw file")
    args = parser.parse_args()
    if args.command == "measure":
        probes = {p.split("=")[0]: tuple(int(x) for x in p.split("=")[1].split(",")) for p in args.probe}
        measure(args.out, args.small, probes or None)
    else:
        result = collect(args.raw.resolve(), args.repeat and args.repeat.resolve(), args.probe and args.probe.resolve())
        RESULT.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {RESULT}: bound {result['bound_gb_per_s']} GB/s from the {result['bound_from']}")


if __name__ == "__main__":
    main()
