"""The hang limit (trainer/contract/spec/hang.py) and the watchdog's view of progress (trainer/hang_watchdog.py), on a
hand-moved clock; and its answer to a hang (HangStop) on a real stage process, whose own stacks must reach its log."""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from trainer.contract import ArtifactWritten, ExitCode, HangDetected, Stage, StageStarted, TrainStep
from trainer.contract.spec.hang import HangPolicy, HangSettingInvalid
from trainer.hang_watchdog import HangStop, HangWatchdog
from trainer.runner import StageCommand, StageFailed, run_stage_command, running_stages

REPO = Path(__file__).resolve().parents[2]

T = datetime(2030, 1, 1, tzinfo=UTC)


def test_the_limit_is_the_override_else_the_floor_or_k_times_the_slowest_step() -> None:
    policy = HangPolicy(floor_s=100.0, step_factor=5.0)
    assert policy.limit_s([]) == 100.0  # before two steps: the floor alone (a compile)
    assert policy.limit_s([10.0, 12.0]) == 100.0  # 5 x 12 = 60 < floor
    assert policy.limit_s([10.0, 30.0, 12.0]) == 150.0  # the slowest, not the median
    assert HangPolicy(floor_s=100.0, override_s=3.0).limit_s([50.0]) == 3.0


def test_the_floor_and_factor_come_from_the_environment_and_bad_values_name_the_variable() -> None:
    policy = HangPolicy.from_env({"RLJOB_HANG_FLOOR_S": "600", "RLJOB_HANG_STEP_FACTOR": "3"}, override_s=None)
    assert (policy.floor_s, policy.step_factor) == (600.0, 3.0)
    assert HangPolicy.from_env({}).floor_s == 1800.0
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(HangSettingInvalid, match="RLJOB_HANG_FLOOR_S"):
            HangPolicy.from_env({"RLJOB_HANG_FLOOR_S": bad})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _step(step: int) -> TrainStep:
    return TrainStep(seq=step, time=T, job_id="rl-aaaaaaaaaaaa", step=step, total_steps=10)


def test_only_progress_events_reset_the_clock_and_a_stage_start_forgets_the_last_step() -> None:
    clock = Clock()
    dog = HangWatchdog(HangPolicy(floor_s=100.0, step_factor=2.0), lambda hang: None, clock=clock)
    dog.progress(StageStarted(seq=0, time=T, job_id="rl-aaaaaaaaaaaa", stage=Stage.TRAIN))
    clock.now = 90.0
    dog.progress(_step(1))  # the compile: 90 s, not an interval
    clock.now = 150.0
    dog.progress(_step(2))  # 60 s
    clock.now = 150.0 + 119.0
    dog.progress(ArtifactWritten(seq=9, time=T, job_id="rl-aaaaaaaaaaaa", name="x", uri="/x"))  # not progress
    assert dog.check() is None  # 119 s idle, limit max(100, 2 x 60) = 120
    clock.now = 150.0 + 121.0
    hang = dog.check()
    assert hang is not None and (hang.stage, hang.step, hang.limit_s) == (Stage.TRAIN, 2, 120.0)
    assert hang.says() == "no progress for 121 s (its hang limit is 120 s) in the train stage after train step 2"
    dog.progress(_step(3))
    assert dog.check() is None


# A stage that hangs: it imports the entry package as `python -m trainer.maxtext_entry.<stage>` does (the package's
# import registers the SIGUSR1 handler, trainer/maxtext_entry/__init__.py), says so, then blocks for good.
HUNG_STAGE = """
import threading

import trainer.maxtext_entry


def blocked_in_the_hung_stage():
    print("stage ready", flush=True)
    threading.Event().wait()


blocked_in_the_hung_stage()
"""


def test_a_hung_stage_prints_its_own_stacks_into_its_log(tmp_path: Path) -> None:
    """The pipeline's path end to end but for MaxText: the runner starts the stage (its own session, output piped into
    the log), the watchdog picks it by its module (running_stages(dumping_stacks=True)), finds no progress and
    HangStop sends it SIGUSR1; its faulthandler writes its stacks through the pipe into the log. Fails when HangStop
    sends no SIGUSR1, or the stage registers no handler (SIGUSR1's default then ends it with nothing written)."""
    program = tmp_path / "hung_stage.py"
    program.write_text(HUNG_STAGE)
    # The runner's `python` runs `python -m trainer.maxtext_entry.hung_stage`: a stand-in interpreter runs the program
    # above in its place, so the stage carries the module the watchdog picks stages by.
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(program))}\n")
    python.chmod(0o755)
    log = tmp_path / "logs" / "train.log"
    emitted: list[tuple[Any, dict[str, Any]]] = []
    exited: list[int] = []
    done = threading.Event()

    def exit_process(code: int) -> None:
        # os._exit ends the trainer and setpriv's parent-death signal its stages: here, whatever HangStop left running.
        for proc in running_stages():
            os.killpg(proc.pid, signal.SIGKILL)
        exited.append(code)
        done.set()

    stop = HangStop(
        lambda kind, **fields: emitted.append((kind, fields)),
        attempt=lambda: 1,
        log_path=lambda _stage: log,
        stacks_uri=lambda _stage: str(log),
        stages=lambda: running_stages(dumping_stacks=True),
        exit_process=exit_process,
    )
    watchdog = HangWatchdog(HangPolicy(override_s=1.0), stop, poll_s=0.05)

    def on_line(line: str) -> None:
        if line == "stage ready":  # its handler is registered: from here on nothing progresses
            watchdog.start()

    command = StageCommand("trainer.maxtext_entry.hung_stage", (), {"PYTHONPATH": str(REPO)})
    try:
        with pytest.raises(StageFailed):  # killed by HangStop once its stacks were asked for
            run_stage_command(command, log, on_line=on_line, python=str(python))
    finally:
        watchdog.stop()
    assert done.wait(timeout=30), f"the watchdog never answered the hang:\n{log.read_text()}"
    text = log.read_text()
    assert exited == [int(ExitCode.HUNG)], text
    assert [kind for kind, _ in emitted][0] is HangDetected and emitted[0][1]["stacks"] == str(log)
    assert "the stacks of the trainer's threads" in text  # the trainer's own, by HangStop itself
    # The stage's own, by its faulthandler: the frame it is blocked in.
    assert re.search(r'File ".*hung_stage\.py", line \d+ in blocked_in_the_hung_stage', text), text
