"""Counts and latencies of a job's reward calls: per training step (drained into the step's metrics) and in total."""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

MAX_LATENCIES_KEPT = 10_000  # per window: a step makes a handful of calls; the bound only stops a runaway


class CallOutcome(StrEnum):
    OK = "ok"
    ERROR = "error"  # the function raised, or returned something that is not one number per completion
    TIMEOUT = "timeout"  # past its deadline: the worker was killed
    CRASH = "crash"  # the worker died (a signal, RLIMIT_AS, RLIMIT_CPU) or could not start


@dataclass(frozen=True)
class CallWindow:
    """The calls since the last drain. Errors include crashes (both score per grpo.rewards.on_error); timeouts apart."""

    calls: int
    errors: int
    timeouts: int
    latency_p50_s: float | None
    latency_p95_s: float | None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (the smallest value with at least q% of the values at or below it)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


class RewardCallStats:
    """Thread-safe: rollouts and evaluations may call rewards from different threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latencies: deque[float] = deque(maxlen=MAX_LATENCIES_KEPT)
        self._window = {outcome: 0 for outcome in CallOutcome}
        self.totals = {outcome: 0 for outcome in CallOutcome}

    def record(self, outcome: CallOutcome, latency_s: float) -> None:
        with self._lock:
            self._window[outcome] += 1
            self.totals[outcome] += 1
            self._latencies.append(latency_s)

    def drain(self) -> CallWindow:
        with self._lock:
            window, latencies = self._window, list(self._latencies)
            self._window = {outcome: 0 for outcome in CallOutcome}
            self._latencies.clear()
        return CallWindow(
            calls=sum(window.values()),
            errors=window[CallOutcome.ERROR] + window[CallOutcome.CRASH],
            timeouts=window[CallOutcome.TIMEOUT],
            latency_p50_s=percentile(latencies, 50),
            latency_p95_s=percentile(latencies, 95),
        )
