"""The hang limit (trainer/contract/hang.py) and the watchdog's view of progress (trainer/hang_watchdog.py), on a
hand-moved clock: hermetic, no thread started."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from trainer.contract import ArtifactWritten, Stage, StageStarted, TrainStep
from trainer.contract.hang import HangPolicy, HangSettingInvalid
from trainer.hang_watchdog import HangWatchdog

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
