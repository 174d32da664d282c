"""A preemption notice during GRPO, for real on CPU: SIGTERM to `trainer run` while step 2 trains leaves a
checkpoint at the step training had reached (every trained step kept) and exit 75; the rerun resumes from
that checkpoint and finishes. checkpoint_period is beyond the run, so Orbax's only save of its own is its
initial one (step 1): a checkpoint at a step >= 2 comes from the stop alone (without the handler the newest
is step 1).

The signal is timed by that step-1 checkpoint, not by the reported steps: TensorBoard flushes its file in
bursts, so on a fast machine the first report can arrive when training is nearly over (CI once saw the
first report at step 4 of 6 and the run finished before the signal landed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.trainer.conftest import REPO, TINY_EXAMPLE
from trainer.contract import ExitCode, RunLayout, Stage, parse_event

pytestmark = pytest.mark.slow

NUM_BATCHES = 6  # the stop lands at step 2 or 3 (SETTLE_S after the step-1 checkpoint): steps remain for the rerun
SETTLE_S = 0.5  # after the step-1 checkpoint, so the signal lands while step 2 trains
JOB_ID = "rl-sigterm00001"


def _events(layout: RunLayout) -> list:
    path = Path(layout.events)
    return [parse_event(line) for line in path.read_text().splitlines() if line.endswith("}")] if path.exists() else []


def _reported_steps(layout: RunLayout) -> list[int]:
    return [e.step for e in _events(layout) if e.type == "train_step"]


def _spec(tmp_path: Path, env: dict[str, str]) -> Path:
    text = TINY_EXAMPLE.read_text()
    for name in ("RLJOB_TINY_DIR", "RLJOB_OUTPUT"):
        text = text.replace("${" + name + "}", env[name])
    data = yaml.safe_load(text)
    # More kept than saved: the control for the pipeline test's keep-1 run (Orbax deletes nothing here).
    data["grpo"].update(num_batches=NUM_BATCHES, num_test_batches=0, checkpoint_period=1000, keep_last_checkpoints=5)
    data["export"] = {"enabled": False}  # the export is not what this test is about
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_sigterm_during_grpo_checkpoints_the_current_step_and_the_rerun_resumes_there(tiny_dir, shared_cache, tmp_path):
    from trainer.progress.tensorboard_scalars import parse_records, scalars_from_record
    from trainer.stages.context import latest_actor_step

    out = tmp_path / "runs"
    env = dict(
        os.environ,
        RLJOB_TINY_DIR=str(tiny_dir),
        RLJOB_OUTPUT=str(out),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        PYTHONPATH=str(REPO),
        **shared_cache,
    )
    cmd = [sys.executable, "-m", "trainer", "run", "--spec", str(_spec(tmp_path, env)), "--job-id", JOB_ID]
    layout = RunLayout(str(out), JOB_ID)
    with open(tmp_path / "attempt1.out", "w") as stdout:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=stdout, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 480
        while proc.poll() is None and time.monotonic() < deadline and latest_actor_step(layout) is None:
            time.sleep(0.1)
        time.sleep(SETTLE_S)
        assert proc.poll() is None, (tmp_path / "attempt1.out").read_text()[-3000:]
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
        stop_s = time.monotonic() - signalled
    tensorboard = Path(layout.rl_run, "tensorboard")
    first_attempt_files = set(tensorboard.glob("events.out.tfevents.*"))
    train_log = Path(layout.stage_log(Stage.TRAIN)).read_text()
    assert proc.returncode == ExitCode.RETRYABLE, (proc.returncode, train_log[-3000:])
    assert stop_s < 30, f"{stop_s:.1f} s from SIGTERM to exit: a spot VM stops 30 s after its notice"
    saved = latest_actor_step(layout)
    trained = max(_reported_steps(layout), default=0)  # the last read of TensorBoard happens after the exit
    # Every step trained before the stop is in the checkpoint: nothing to redo but the step in progress.
    assert saved is not None and 2 <= saved < NUM_BATCHES and saved == trained, (saved, trained, train_log[-3000:])
    assert "stop requested (SIGTERM)" in train_log
    assert not Path(layout.stage_marker(Stage.TRAIN)).exists()
    first_end = _events(layout)[-1]
    assert first_end.type == "run_finished" and first_end.exit_code == ExitCode.RETRYABLE

    second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    marker = json.loads(Path(layout.stage_marker(Stage.TRAIN)).read_text())["outputs"]
    assert marker["resumed_from_step"] == saved and marker["actor_step"] == NUM_BATCHES
    assert f"training starts at step {saved}" in Path(layout.stage_log(Stage.TRAIN)).read_text()
    # The rerun trained exactly the steps after the saved one: its first update is saved + 1.
    actor_steps = set()
    for path in set(tensorboard.glob("events.out.tfevents.*")) - first_attempt_files:
        records, _ = parse_records(path.read_bytes())
        actor_steps |= {s.step for r in records for s in scalars_from_record(r) if s.tag == "actor/train/loss"}
    assert actor_steps and min(actor_steps) == saved + 1, (saved, actor_steps)
    final = _events(layout)[-1]
    assert final.type == "run_finished" and final.ok
    # keep_last_checkpoints 5: every checkpoint stays (Orbax's initial one, the stop's, the last step's).
    kept = sorted(int(p.name) for p in Path(layout.actor_checkpoints).iterdir())
    assert kept == [1, saved, NUM_BATCHES], kept
