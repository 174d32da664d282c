"""Why the CPU rollout's decode sits near 3x the bandwidth bound: how fast one decode step's matrix products read memory.

A decode step of SmolLM2-135M (bench/rollout/rollout_speed.py's model) multiplies 8 rows (one per generation) by each of its
weight matrices once, so its bound is the weights' bytes over the machine's read bandwidth. This measures, in one
process and interleaved round by round so that load lands on all alike:

- `read`: XLA summing a weight-sized fp32 array (the baseline: the bandwidth the bound assumes);
- for each matrix shape of one SmolLM2 layer and the tied logits: XLA's `x @ W` with 8 rows, in the layout the
  engine keeps (in-features first) and transposed, and torch's `x @ W` with torch's own threads;
- `layer_stack`: the 30 layers' MLP matrices in one jitted loop, as the engine's scanned decode reads them;
- `kernel`: the engine's native kernel (trainer/rollout/few_rows_matmul.py) on each matrix out-features first;
- `decode layers x30`: every product of 30 layers, one array per layer and matrix, out-features first and unrolled
  as the engine keeps and runs them, by XLA's dot and by the kernel (the change's before and after).

Each figure is GB/s (the matrix's bytes over the median wall time) and its ratio to `read` from the same run.

    flock /tmp/rljob-bench.lock .venv/bin/python bench/rollout/decode_dot_bandwidth.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.result_meta import machine_facts, write_result  # noqa: E402

ROWS, LAYERS = 8, 30
# SmolLM2-135M: hidden 576, 9 query heads and 3 KV heads of 64, MLP 1536, vocabulary 49152 (tied).
SHAPES = {"q/o": (576, 576), "k/v": (576, 192), "gate/up": (576, 1536), "down": (1536, 576), "logits": (576, 49152)}


ENGINE_MATRICES = {"qkv": (960, 576), "out": (576, 576), "gate_up": (3072, 576), "down": (576, 1536)}  # [out, in]


def decode_layers(x: Any, layers: list[dict[str, Any]], product: Any) -> Any:
    """A decode step's products over the layers as cached_llama runs them (attention left out: its own kernel)."""
    import jax
    import jax.numpy as jnp

    for w in layers:
        qkv = product(x, w["qkv"])
        x = x + product(qkv[:, :576], w["out"])
        gate, up = jnp.split(product(x, w["gate_up"]), 2, axis=-1)
        x = x + product(jax.nn.silu(gate) * up, w["down"])
    return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    machine = machine_facts()

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from trainer.rollout import few_rows_matmul

    if not few_rows_matmul.available():
        raise SystemExit("few_rows_matmul's kernel did not build here (see the warning above)")
    few_rows = jax.jit(few_rows_matmul.project)
    rng = np.random.default_rng(0)
    cases: dict[str, tuple[object, int]] = {}
    read_source = jnp.asarray(rng.standard_normal((LAYERS * 576, 1536), dtype=np.float32))
    read = jax.jit(lambda w: w.sum(0))
    cases["read"] = (lambda: read(read_source).block_until_ready(), read_source.nbytes)
    x_np = rng.standard_normal((ROWS, 1536), dtype=np.float32)
    x_np_576 = jnp.asarray(x_np[:, :576])
    for name, (k, n) in SHAPES.items():
        w_np = rng.standard_normal((k, n), dtype=np.float32)
        x, w, wt = jnp.asarray(x_np[:, :k]), jnp.asarray(w_np), jnp.asarray(np.ascontiguousarray(w_np.T))
        kn, nk = jax.jit(lambda x, w: x @ w), jax.jit(lambda x, w: x @ w.T)
        xt, w_t = torch.from_numpy(np.ascontiguousarray(x_np[:, :k])), torch.from_numpy(w_np)
        cases[f"xla {name} in-features first"] = (lambda kn=kn, x=x, w=w: kn(x, w).block_until_ready(), w_np.nbytes)
        cases[f"xla {name} out-features first"] = (lambda nk=nk, x=x, wt=wt: nk(x, wt).block_until_ready(), w_np.nbytes)
        cases[f"torch {name}"] = (lambda xt=xt, w_t=w_t: torch.matmul(xt, w_t), w_np.nbytes)
        cases[f"kernel {name}"] = (lambda x=x, wt=wt: few_rows(x, wt).block_until_ready(), w_np.nbytes)
    # The engine's layers: q/k/v fused (576 -> 960), out (576 -> 576), gate/up fused (576 -> 3072), down (1536 -> 576).
    layers = [
        {m: jnp.asarray(rng.standard_normal(shape, dtype=np.float32) * 0.02) for m, shape in ENGINE_MATRICES.items()} for _ in range(LAYERS)
    ]
    layer_bytes = sum(a.nbytes for layer in layers for a in layer.values())
    for label, product in (("xla", lambda x, w: jnp.einsum("rk,nk->rn", x, w)), ("kernel", few_rows_matmul.project)):
        decode = jax.jit(lambda x, ws, product=product: decode_layers(x, ws, product))
        cases[f"{label} decode layers x30"] = (lambda decode=decode: decode(x_np_576, layers).block_until_ready(), layer_bytes)
    stack = jnp.asarray(rng.standard_normal((LAYERS, 576, 1536), dtype=np.float32))
    x_mlp = jnp.asarray(x_np[:, :576])
    loop = jax.jit(lambda x, w: jax.lax.fori_loop(0, LAYERS, lambda i, acc: acc + x @ w[i], jnp.zeros((ROWS, 1536))))
    cases["xla layer_stack gate/up x30"] = (lambda: loop(x_mlp, stack).block_until_ready(), stack.nbytes)

    for run, _ in cases.values():  # compile and warm every case first
        run()
    times: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for round_ in range(args.repeats):
        for name in names if round_ % 2 == 0 else reversed(names):
            started = time.perf_counter()
            cases[name][0]()
            times[name].append(time.perf_counter() - started)

    read_gbs = cases["read"][1] / statistics.median(times["read"]) / 1e9
    results = {}
    for name, (_, nbytes) in cases.items():
        median_s = statistics.median(times[name])
        gbs = nbytes / median_s / 1e9
        results[name] = {"median_ms": round(1000 * median_s, 3), "gb_per_s": round(gbs, 2), "of_read": round(gbs / read_gbs, 3)}
    result = {
        "rows": ROWS,
        "torch_threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "cases": results,
    }
    write_result("decode_dot_bandwidth.json", result, machine)
    width = max(map(len, results))
    for name, figures in results.items():
        print(f"{name:<{width}}  {figures['median_ms']:9.3f} ms  {figures['gb_per_s']:6.2f} GB/s  {figures['of_read']:.2f}x read")


if __name__ == "__main__":
    main()
