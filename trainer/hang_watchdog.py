"""The trainer's own hang watchdog: no progress event for longer than the hang limit, and the trainer writes the
stacks of every thread (its own and its stage process's) to the stage log, reports the hang and exits HUNG.

Why in the trainer and not in the service (docs/trainer.md, "Hung jobs"): the trainer is the one place that sees
its progress as it happens and can reach its stage processes on both launchers alike. A service-side watchdog would
need a way into the workload to signal it: a process group locally, but `kubectl exec` on Kubernetes, which the
service must not hold rights to. Here the pod ends with an exit code both launchers already report.

- `HangWatchdog` is fed every event the trainer emits (EventReporter.listeners); a thread named
  `rljob-hang-watchdog` checks the time since the last progress event against the limit (trainer/contract/spec/hang.py)
  every `poll_s`, and calls `on_hang` once.
- `HangStop` is the usual `on_hang`: the trainer's stacks (faulthandler, all threads) appended to the stage log;
  SIGUSR1 to each running stage process, whose handler (trainer/maxtext_entry/__init__.py: faulthandler.register)
  prints its stacks into the same log through the stage's output pipe; then HangDetected and RunFinished(exit HUNG)
  in the events file, the reporter sealed (the pipeline's own failure path, seeing its stage killed, adds nothing),
  the stages killed, and os._exit(HUNG): a hung main thread cannot be waited for.
faulthandler needs no GIL to write a traceback, but this thread needs it to run: a main thread stuck in C code that
holds the GIL blocks it too; the service's `stalled` verdict still shows such a job (docs/trainer.md).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.contract import (
    CheckpointSaved,
    EvalReported,
    EvalResult,
    ExitCode,
    HangDetected,
    RunFinished,
    RunStarted,
    Stage,
    StageFinished,
    StageStarted,
    TrainerEvent,
    TrainStep,
)
from trainer.contract.spec.hang import RECENT_INTERVALS_KEPT, HangPolicy

# What counts as progress: the trainer moved on. Artifacts, storage and goodput come with these, never alone.
PROGRESS_EVENTS = (RunStarted, StageStarted, StageFinished, TrainStep, EvalResult, EvalReported, CheckpointSaved)
STACK_DUMP_SIGNAL = signal.SIGUSR1
STAGE_DUMP_WAIT_S = 2.0  # for the stage's stacks to come through its output pipe into the log


@dataclass(frozen=True)
class Hang:
    stage: Stage | None
    step: int | None  # the last train step this attempt reported
    idle_s: float
    limit_s: float

    def says(self) -> str:
        where = f"in the {self.stage.value} stage" if self.stage else "before its first stage"
        after = f" after train step {self.step}" if self.step is not None else ""
        return f"no progress for {self.idle_s:.0f} s (its hang limit is {self.limit_s:.0f} s) {where}{after}"


class HangWatchdog:
    def __init__(
        self,
        policy: HangPolicy,
        on_hang: Callable[[Hang], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        poll_s: float | None = None,
    ) -> None:
        self.policy, self.on_hang, self.clock = policy, on_hang, clock
        # Often enough that a hang is caught within a tenth of its limit (at most every 10 s).
        self.poll_s = poll_s if poll_s is not None else min(10.0, max(0.05, policy.limit_s(()) / 10))
        self._lock = threading.Lock()
        self._last_progress = clock()
        self._last_step_at: float | None = None
        self._intervals: list[float] = []
        self._stage: Stage | None = None
        self._step: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def progress(self, event: TrainerEvent) -> None:
        """Called with every event the trainer emits (from any thread)."""
        if not isinstance(event, PROGRESS_EVENTS):
            return
        with self._lock:
            now = self.clock()
            self._last_progress = now
            if isinstance(event, StageStarted):
                self._stage, self._last_step_at = event.stage, None  # a stage's first step may compile: no interval
            elif isinstance(event, TrainStep):
                if self._last_step_at is not None:
                    self._intervals = [*self._intervals, now - self._last_step_at][-RECENT_INTERVALS_KEPT:]
                self._last_step_at, self._step, self._stage = now, event.step, Stage.TRAIN

    def check(self) -> Hang | None:
        """The hang now, if the trainer is hung."""
        with self._lock:
            idle = self.clock() - self._last_progress
            limit = self.policy.limit_s(self._intervals)
            return Hang(self._stage, self._step, idle, limit) if idle > limit else None

    def start(self) -> HangWatchdog:
        self._thread = threading.Thread(target=self._watch, name="rljob-hang-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            hang = self.check()
            if hang is not None:
                self._stop.set()
                self.on_hang(hang)


def dump_stacks(log_path: Path, header: str) -> None:
    """Append `header` and the Python stacks of every thread of this process to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n{header}\n")
        log.flush()  # faulthandler writes to the descriptor, past Python's buffer
        faulthandler.dump_traceback(file=log, all_threads=True)
        log.write("\n")


def hang_message(hang: Hang, stacks: str) -> str:
    return f"hung: {hang.says()}; the stacks of every thread are in {stacks}"


class HangStop:
    """The trainer's answer to a hang (see the module's docstring). `emit` is the reporter's (or a stand-in's)."""

    def __init__(
        self,
        emit: Callable[..., Any],
        *,
        attempt: Callable[[], int],
        log_path: Callable[[Stage | None], Path],
        stacks_uri: Callable[[Stage | None], str],
        stages: Callable[[], Sequence[subprocess.Popen[str]]] = tuple,
        seal: Callable[[], None] = lambda: None,
        before_exit: Callable[[], None] = lambda: None,
        exit_process: Callable[[int], Any] = os._exit,
        stage_dump_wait_s: float = STAGE_DUMP_WAIT_S,
    ) -> None:
        self.emit, self.attempt, self.log_path, self.stacks_uri = emit, attempt, log_path, stacks_uri
        self.stages, self.seal, self.before_exit, self.exit_process = stages, seal, before_exit, exit_process
        self.stage_dump_wait_s = stage_dump_wait_s

    def __call__(self, hang: Hang) -> None:
        log, uri = self.log_path(hang.stage), self.stacks_uri(hang.stage)
        dump_stacks(log, f"rljob: {hang.says()}: the stacks of the trainer's threads (pid {os.getpid()}):")
        running = [proc for proc in self.stages() if proc.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                os.kill(proc.pid, STACK_DUMP_SIGNAL)
        if running:
            time.sleep(self.stage_dump_wait_s)
        message = hang_message(hang, uri)
        self.emit(
            HangDetected,
            attempt=max(1, self.attempt()),
            stage=hang.stage,
            step=hang.step,
            idle_s=hang.idle_s,
            limit_s=hang.limit_s,
            stacks=uri,
        )
        self.emit(RunFinished, ok=False, exit_code=int(ExitCode.HUNG), message=message, failed_stage=hang.stage)
        self.seal()
        for proc in running:
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                os.killpg(proc.pid, signal.SIGKILL)  # stages run in their own session (runner.start_stage_command)
        try:
            self.before_exit()
        finally:
            self.exit_process(int(ExitCode.HUNG))
