"""When the trainer stops early and leaves a resumable run: a stop signal (a spot VM's preemption
notice, a cancel) or the run's deadline (a flex-start VM runs at most 7 days).

Either way the stage in progress is asked to stop the way a preemption asks it, SIGTERM: train_rl
saves a checkpoint at its current step and exits (maxtext_entry/graceful_stop.py), convert and export
just end (they restart cleanly from the stage markers). The trainer then exits 75, retryable.

The deadline counts from this process's start, so it is the time left on the VM only when the pod
starts with the VM, as a flex-start pod does: RLJOB_MAX_RUN_S is the VM's maximum run time and
RLJOB_STOP_MARGIN_S how long before it to stop (a checkpoint of a large model to gs:// takes minutes).
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

MAX_RUN_ENV = "RLJOB_MAX_RUN_S"
STOP_MARGIN_ENV = "RLJOB_STOP_MARGIN_S"
DEFAULT_STOP_MARGIN_S = 600.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
DEADLINE_REASON = f"the run deadline ({MAX_RUN_ENV} less {STOP_MARGIN_ENV})"


class RunStopConfigError(ValueError):
    """An RLJOB_* stop setting is not a usable number; `field` names the variable."""

    def __init__(self, field: str, reason: str):
        self.field, self.reason = field, reason
        super().__init__(f"{field}: {reason}")


def _seconds(name: str, raw: str | None) -> float | None:
    raw = (raw or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise RunStopConfigError(name, f"must be a number of seconds, not {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise RunStopConfigError(name, f"must be a finite number of seconds >= 0, not {raw!r}")
    return value


def stop_deadline(started_at: float, max_run: str | None, margin: str | None) -> float | None:
    """The clock time (same clock as `started_at`) to stop at: start + max run - margin, from the
    RLJOB_MAX_RUN_S and RLJOB_STOP_MARGIN_S values; None without a max run. A margin that leaves no
    time to run is refused, not silently used."""
    max_run_s = _seconds(MAX_RUN_ENV, max_run)
    margin_s = _seconds(STOP_MARGIN_ENV, margin)
    if max_run_s is None:
        return None
    margin_s = DEFAULT_STOP_MARGIN_S if margin_s is None else margin_s
    if margin_s >= max_run_s:
        raise RunStopConfigError(STOP_MARGIN_ENV, f"{margin_s:g} s leaves no time to run within {MAX_RUN_ENV}={max_run_s:g} s")
    return started_at + max_run_s - margin_s


def stop_deadline_from_env(started_at: float) -> float | None:
    return stop_deadline(started_at, os.environ.get(MAX_RUN_ENV), os.environ.get(STOP_MARGIN_ENV))


class StopRequest:
    """Whether the trainer has been asked to stop, and why; read between stages.

    `handle` is the signal handler and only records the signal; the stage runner installs its own
    handler while a stage runs (it forwards the signal to the stage) and restores this one after.
    """

    def __init__(self, deadline: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.deadline = deadline
        self.clock = clock
        self.signum: int | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum

    def reason(self) -> str | None:
        """Why to stop now, or None to go on."""
        if self.signum is not None:
            return f"signal {signal.Signals(self.signum).name}"
        if self.deadline is not None and self.clock() >= self.deadline:
            return DEADLINE_REASON
        return None

    @contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """Record stop signals for the duration (main thread only: signal.signal's own condition)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous: dict[int, Any] = {signum: signal.signal(signum, self.handle) for signum in STOP_SIGNALS}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
