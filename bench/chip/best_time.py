"""The one timing rule of the chip's micro-benchmarks: a program's best wall time over repeated calls, after one call
that compiles it (JAX dispatches asynchronously, so every call waits for its result)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best_seconds(fn: Callable[..., Any], *args: Any, repeats: int) -> float:
    import jax

    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - started)
    return best
