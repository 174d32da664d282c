"""When a running job is hung: its hang limit, from its own step times, a floor and the spec's override.

A job is hung when no progress event (trainer/contract/run/events.py: PROGRESS_EVENTS) came for longer than its limit.
The trainer's watchdog (trainer/hang_watchdog.py) applies it to itself; the service reads the HangDetected event it
sends. The limit, in order:
- `spec.hang_timeout_s` when set: the job's owner knows its pace better than any rule;
- else max(floor, step_factor x the slowest of the attempt's recent train-step intervals): a step as slow as the
  slowest seen is normal, five of them is not. The slowest, not the median, because a checkpoint save or an
  evaluation falls between two steps now and then and must not read as a hang;
- before the attempt's first two steps there is no interval, so the floor alone applies, counted from the last
  progress event (a stage's start, its end): it must cover a compile (MaxText's first step on a TPU compiles for
  minutes) and loading a checkpoint.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

HANG_FLOOR_ENV = "RLJOB_HANG_FLOOR_S"
HANG_STEP_FACTOR_ENV = "RLJOB_HANG_STEP_FACTOR"
DEFAULT_HANG_FLOOR_S = 1800.0  # a 70B model's first step (compile plus checkpoint restore) fits with room
DEFAULT_HANG_STEP_FACTOR = 5.0  # as the `stalled` verdict's 5 step intervals (service/domain/learning_health.py)
MIN_HANG_TIMEOUT_S = 1.0
MAX_HANG_TIMEOUT_S = 7 * 24 * 3600.0
RECENT_INTERVALS_KEPT = 20  # as the service's health window (HEALTH_WINDOW_STEPS)


class HangSettingInvalid(ValueError):
    """An RLJOB_HANG_* variable is not a usable number; the message names it."""


@dataclass(frozen=True)
class HangPolicy:
    floor_s: float = DEFAULT_HANG_FLOOR_S
    step_factor: float = DEFAULT_HANG_STEP_FACTOR
    override_s: float | None = None  # spec.hang_timeout_s

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, override_s: float | None = None) -> HangPolicy:
        env = os.environ if environ is None else environ
        floor = _positive(env, HANG_FLOOR_ENV, DEFAULT_HANG_FLOOR_S)
        factor = _positive(env, HANG_STEP_FACTOR_ENV, DEFAULT_HANG_STEP_FACTOR)
        return cls(floor_s=floor, step_factor=factor, override_s=override_s)

    def limit_s(self, step_intervals_s: Sequence[float]) -> float:
        """The hang limit given the attempt's recent train-step intervals (seconds, any order)."""
        if self.override_s is not None:
            return self.override_s
        if not step_intervals_s:
            return self.floor_s
        return max(self.floor_s, self.step_factor * max(step_intervals_s))


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise HangSettingInvalid(f"{name}={raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0 or value > MAX_HANG_TIMEOUT_S:
        raise HangSettingInvalid(f"{name}={raw!r} must be above 0 and at most {MAX_HANG_TIMEOUT_S:.0f}")
    return value
