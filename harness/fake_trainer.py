"""A stand-in for `python -m trainer`, run as a real child process by the local-launcher tests.

`fake_trainer.py run --spec SPEC --job-id ID` writes events.jsonl the way the trainer does (seq
continuing across reruns in the same run dir) and behaves as the spec's labels say:
  fake-steps: N        train steps (default 3)
  fake-exit: CODE      exit with CODE after failing the train stage (default 0: succeed)
  fake-gate: "true"    after the first train step, wait until <run dir>/gate exists
  fake-gate-step: N    ... after train step N instead of the first
  fake-stop-checkpoints: "true"  save no checkpoint per step: only SIGTERM saves one, as train_rl's stop does
                       (trainer/run_stop.py): at the step reached, then RunFinished(exit 75) and exit 75
  fake-child: "true"   start a grandchild (`sleep`) and record its pid in <run dir>/child.pid
  fake-ignore-term: "true"  ignore SIGTERM (so only SIGKILL stops it)
  fake-eval-n: N        the final evaluation carries a summary over N rows (half right), as train_rl's does
  fake-hang-at-step: N  on its first attempt, hang in train step N (before its event and checkpoint): the trainer's
                       hang watchdog (trainer/hang_watchdog.py, limit spec.hang_timeout_s) dumps the stacks into
                       logs/train.log and exits 79 (HUNG); a rerun resumes after step N-1's checkpoint
  fake-hang-always: "true"  hang in the first train step of every attempt
  fake-rewards: "true"  before training, call each of the spec's reward functions (grpo.rewards) once through the
                       real reward sandbox (trainer/rewards_sandbox/), as train_rl's stand-ins do, and write each
                       call's outcome to <run dir>/reward_calls.json
It writes repro.json with the trainer's own writer (trainer/repro.py), as the pipeline does before its stages.
Every start appends a line to <run dir>/starts, so tests can count executions. Like the trainer, each
train step reports the signal fraction (half the prompts) and writes a samples file
(<run dir>/samples/train-<step>.json) whose first completion is long and holds a terminal escape.
Like the trainer, a rerun in the same run dir resumes: a stage whose completion marker an earlier
attempt wrote is skipped ("completed by an earlier attempt"), and training goes on after the newest
step under the actor checkpoint directory (one written per step, before the gate).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from trainer.contract import (
    SIGNAL_METRIC,
    ArtifactWritten,
    EvalResult,
    ExitCode,
    JobSpec,
    RunFinished,
    RunLayout,
    RunStarted,
    Sample,
    Stage,
    StageFinished,
    StageStarted,
    StepSamples,
    StorageMeasured,
    TrainerEvent,
    TrainStep,
    dump_event,
)
from trainer.contract.run.evaluation import EvalSummary
from trainer.contract.spec.hang import HangPolicy
from trainer.hang_watchdog import HangStop, HangWatchdog
from trainer.repro import write_repro

LONG_COMPLETION = "<reasoning>" + "2 plus 2 is 4. " * 100 + "\x1b[31m</reasoning><answer>4</answer>"


def write_samples(layout: RunLayout, step: int) -> None:
    samples = StepSamples(
        step=step,
        time=datetime.now(UTC),
        num_generations=2,
        groups=2,
        groups_with_signal=1,
        completions=4,
        samples=[
            Sample(
                group=0, prompt="What is 2+2?", completion=LONG_COMPLETION, rewards={"exact_answer": 1.0, "format_match": 0.5}, total=1.5
            ),
            Sample(
                group=0,
                prompt="What is 2+2?",
                completion=f"five (step {step})",
                rewards={"exact_answer": 0.0, "format_match": None},
                total=0.0,
            ),
        ],
    )
    path = Path(layout.samples_file(step))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(samples.model_dump_json())


class Events:
    def __init__(self, path: Path, job_id: str) -> None:
        self.path = path
        self.job_id = job_id
        self.seq = 0
        self.listeners: list[Callable[[TrainerEvent], None]] = []  # the hang watchdog, as on EventReporter
        if path.exists():
            lines = [line for line in path.read_text().splitlines() if line.strip()]
            self.seq = json.loads(lines[-1])["seq"] + 1 if lines else 0

    def emit(self, cls: type, **fields: object) -> None:
        event = cls(seq=self.seq, time=datetime.now(UTC), job_id=self.job_id, **fields)
        with self.path.open("a") as f:
            f.write(dump_event(event) + "\n")
        self.seq += 1
        print(f"event {event.type} seq={event.seq}", flush=True)
        for listener in self.listeners:
            listener(event)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--job-id", required=True)
    args = parser.parse_args()
    spec = json.loads(Path(args.spec).read_text())
    labels = spec.get("labels", {})
    layout = RunLayout(spec["output"], args.job_id)
    root = Path(layout.root)
    root.mkdir(parents=True, exist_ok=True)
    write_repro(JobSpec.model_validate(spec), layout)  # the trainer's own writer, before any stage as the pipeline
    with (root / "starts").open("a") as f:
        f.write(f"{os.getpid()}\n")
    if labels.get("fake-ignore-term") == "true":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if labels.get("fake-child") == "true":
        child = subprocess.Popen(["sleep", "300"])
        # Written whole then renamed: a reader that sees the name must also see the pid.
        (root / "child.pid.tmp").write_text(str(child.pid))
        (root / "child.pid.tmp").rename(root / "child.pid")

    events = Events(Path(layout.events), args.job_id)
    attempt = len((root / "starts").read_text().splitlines())
    watch_for_hangs(events, layout, attempt, spec.get("hang_timeout_s"))
    events.emit(RunStarted, attempt=attempt, run_uri=layout.root)
    if not skip_if_done(layout, events, Stage.CONVERT):
        events.emit(StageStarted, stage=Stage.CONVERT)
        finish(layout, events, Stage.CONVERT, duration_s=0.01)
    if labels.get("fake-rewards") == "true":
        call_rewards_in_the_sandbox(spec, root)
    if not skip_if_done(layout, events, Stage.TRAIN):
        exit_code = train(layout, events, labels, attempt)
        if exit_code:
            return exit_code
    if not skip_if_done(layout, events, Stage.EXPORT):
        events.emit(StageStarted, stage=Stage.EXPORT)
        (root / "hf").mkdir(exist_ok=True)
        (root / "hf" / "model.safetensors").write_bytes(b"weights")
        events.emit(ArtifactWritten, name="hf_model", uri=layout.export_dir, size_bytes=7)
        finish(layout, events, Stage.EXPORT, duration_s=0.01)
        from trainer.run_size import measure_run  # as the real pipeline does at a stage's end

        events.emit(StorageMeasured, stage=Stage.EXPORT, storage=measure_run(layout))
    events.emit(RunFinished, ok=True, exit_code=ExitCode.SUCCESS)
    return 0


def call_rewards_in_the_sandbox(spec: dict[str, object], root: Path) -> None:
    from trainer.rewards_sandbox.pool import RewardSandboxPool

    rewards = JobSpec.model_validate(spec).grpo.rewards
    assert rewards.functions_path is not None, "fake-rewards needs grpo.rewards.functions_path"
    pool = RewardSandboxPool(rewards.functions_path, list(rewards.functions))
    pool.start()
    try:
        calls = {name: pool.call(name, {"prompts": ["q"], "completions": ["a"]}) for name in rewards.functions}
    finally:
        pool.close()
    outcomes = {name: {"outcome": str(r.outcome), "scores": r.scores, "error": r.error} for name, r in calls.items()}
    (root / "reward_calls.json").write_text(json.dumps({"isolation": pool.isolation, "calls": outcomes}))


def watch_for_hangs(events: Events, layout: RunLayout, attempt: int, timeout_s: float | None) -> None:
    """The trainer's own watchdog and answer to a hang, on this stand-in's events (no stage processes)."""
    stage_log = Path(layout.stage_log(Stage.TRAIN))
    stop = HangStop(events.emit, attempt=lambda: attempt, log_path=lambda _stage: stage_log, stacks_uri=lambda _stage: str(stage_log))
    events.listeners.append(HangWatchdog(HangPolicy.from_env(override_s=timeout_s), stop).start().progress)


def hang_mid_step(step: int) -> None:
    """A step that never ends: what a deadlocked collective or a reward that never returns looks like from outside."""
    print(f"hanging in step {step}", flush=True)
    while True:
        time.sleep(0.05)


def skip_if_done(layout: RunLayout, events: Events, stage: Stage) -> bool:
    if not Path(layout.stage_marker(stage)).exists():
        return False
    events.emit(StageFinished, stage=stage, duration_s=0.0, skipped=True, reason="completed by an earlier attempt")
    return True


def finish(layout: RunLayout, events: Events, stage: Stage, *, duration_s: float) -> None:
    marker = Path(layout.stage_marker(stage))
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"stage": stage.value, "duration_s": duration_s, "outputs": {}}))
    events.emit(StageFinished, stage=stage, duration_s=duration_s)


class StopRequest:
    """SIGTERM as train_rl takes it when fake-stop-checkpoints is set: noted, acted on at the next step boundary."""

    def __init__(self, enabled: bool) -> None:
        self.requested = False
        if enabled:
            signal.signal(signal.SIGTERM, self._note)

    def _note(self, signum: int, frame: object) -> None:
        self.requested = True


def stop_with_checkpoint(checkpoints: Path, events: Events, step: int) -> int:
    (checkpoints / str(step)).mkdir(parents=True, exist_ok=True)
    message = f"stopped by SIGTERM; checkpoint saved at step {step}"
    print(message, flush=True)
    events.emit(RunFinished, ok=False, exit_code=ExitCode.RETRYABLE, message=message, failed_stage=Stage.TRAIN)
    return int(ExitCode.RETRYABLE)


def train(layout: RunLayout, events: Events, labels: dict[str, str], attempt: int) -> int:
    """Steps after the newest checkpoint; returns the fake-exit code (0: the stage finished)."""
    root, checkpoints = Path(layout.root), Path(layout.actor_checkpoints)
    stop_checkpoints = labels.get("fake-stop-checkpoints") == "true"
    stop = StopRequest(stop_checkpoints)
    gate_step = int(labels.get("fake-gate-step", "1"))
    events.emit(StageStarted, stage=Stage.TRAIN)
    steps = int(labels.get("fake-steps", "3"))
    resumed = max((int(p.name) for p in checkpoints.glob("*") if p.name.isdigit()), default=0)
    hang_at = int(labels.get("fake-hang-at-step", "0")) if attempt == 1 else 0
    for step in range(resumed + 1, steps + 1):
        if step == hang_at or (step == resumed + 1 and labels.get("fake-hang-always") == "true"):
            hang_mid_step(step)
        write_samples(layout, step)  # before the event, as the trainer does
        events.emit(
            TrainStep,
            step=step,
            total_steps=steps,
            reward_mean=0.1 * step,
            reward_std=0.05,
            kl=0.01 * step,
            loss=1.0 / step,
            metrics={"learning_rate": 3e-6, SIGNAL_METRIC: 0.5},
        )
        if not stop_checkpoints:
            (checkpoints / str(step)).mkdir(parents=True, exist_ok=True)
        if step == gate_step and labels.get("fake-gate") == "true":
            print("waiting for the gate file", flush=True)
            while not (root / "gate").exists() and not stop.requested:
                time.sleep(0.02)
        if stop.requested:
            return stop_with_checkpoint(checkpoints, events, step)
    exit_code = int(labels.get("fake-exit", "0"))
    if exit_code:
        print("fake failure in train", file=sys.stderr, flush=True)
        events.emit(RunFinished, ok=False, exit_code=exit_code, message="fake failure in train", failed_stage=Stage.TRAIN)
        return exit_code
    eval_rows = int(labels.get("fake-eval-n", "0"))
    summary = (
        EvalSummary(
            label="after",
            step=steps,
            n=eval_rows,
            correct=eval_rows / 2,
            format_correct=eval_rows,
            partial_correct=eval_rows / 2,
            samples_per_row=1,
            sampling="greedy, pass",
            rows_file="after.jsonl",
        )
        if eval_rows
        else None
    )
    events.emit(EvalResult, step=steps, accuracy=0.5, metrics={"pass_at_1": 0.5}, summary=summary)
    finish(layout, events, Stage.TRAIN, duration_s=0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
