"""A RUNNING job with a long history, for the status read bench (bench/control_plane/status_read.py --running): the read a
dashboard polls is the one whose answer is judged again on every request (health over the step history, usage
priced to now, goodput to now, the estimate's actuals), unlike an ended job's, which is rendered once and kept.

`rljob serve` runs as its own process on the embedded default with the local launcher, whose trainer command is
harness/held_trainer.py: the job's workload is a real process that stays alive, so the job is really RUNNING, and
re-attached when the service restarts. Its trainer's side is written here the way the trainer writes it (the same
event models, dump_event, RunLayout): RunStarted, the convert stage, then STEPS train steps, each with its samples
file, a goodput report and every 10th a checkpoint, and an evaluation before training and every EVAL_EVERY steps
(n=300, with the paired change from `before`). The service folds them through its progress channel as it would a
real trainer's; the bench waits until the job's answer shows the last step and every evaluation.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from trainer.contract import RunLayout, Sample, StepSamples, dump_event  # noqa: E402
from trainer.contract.run.evaluation import EvalSummary, paired_difference  # noqa: E402
from trainer.contract.run.events import (  # noqa: E402
    CheckpointSaved,
    EvalResult,
    GoodputMeasured,
    RunStarted,
    Stage,
    StageFinished,
    StageStarted,
    TrainStep,
)
from trainer.contract.run.goodput import TRAIN_PARTS, TrainGoodput  # noqa: E402
from trainer.contract.run.samples import SIGNAL_METRIC  # noqa: E402

HELD_TRAINER = REPO / "harness" / "held_trainer.py"
STEPS = 1000
EVAL_EVERY = 100
EVAL_ROWS = 300
READY_TIMEOUT_S = 120.0


def running_env(env: dict[str, str], runs: Path) -> dict[str, str]:
    """serve_env's environment with the held trainer as the workload (kept alive for the whole bench)."""
    return {
        **env,
        "RLJOB_TRAINER_COMMAND": json.dumps([sys.executable, str(HELD_TRAINER)]),
        "RLJOB_PROGRESS_POLL_INTERVAL_S": "0.2",
        "HELD_TRAINER_MAX_S": "1800",  # the held trainer's own limit (300 s) is shorter than the bench
        "BENCH_RUNS_DIR": str(runs),
    }


def _event(cls: type, seq: int, job_id: str, **fields: Any) -> str:
    return dump_event(cls(seq=seq, time=datetime.now(UTC), job_id=job_id, **fields))


def _summary(label: str, step: int, correct: int, before: dict[str, float] | None) -> tuple[EvalSummary, dict[str, float]]:
    """An evaluation over EVAL_ROWS rows, `correct` of them right (the first ones), with its change from `before`."""
    outcomes = {f"row-{i}": 1.0 if i < correct else 0.0 for i in range(EVAL_ROWS)}
    change = paired_difference(before, outcomes) if before is not None else None
    summary = EvalSummary(
        label=label,
        step=step,
        n=EVAL_ROWS,
        correct=float(correct),
        format_correct=float(EVAL_ROWS),
        partial_correct=float(correct),
        samples_per_row=1,
        sampling="greedy, pass",
        rows_file=f"{label}.jsonl",
        vs_before=change,
    )
    return summary, outcomes


def write_history(layout: RunLayout, job_id: str) -> None:
    """The trainer's events and samples for STEPS steps, written at once (the service reads them in its own time)."""
    lines: list[str] = []
    seq = 0

    def add(cls: type, **fields: Any) -> None:
        nonlocal seq
        lines.append(_event(cls, seq, job_id, **fields))
        seq += 1

    add(RunStarted, attempt=1, run_uri=layout.root)
    add(StageStarted, stage=Stage.CONVERT)
    add(StageFinished, stage=Stage.CONVERT, duration_s=30.0)
    add(StageStarted, stage=Stage.TRAIN)
    before, before_rows = _summary("before", 0, 90, None)
    add(EvalResult, step=0, accuracy=before.correct / EVAL_ROWS, metrics={"pass_at_1": 0.3}, summary=before)
    for step in range(1, STEPS + 1):
        samples = StepSamples(
            step=step,
            time=datetime.now(UTC),
            num_generations=8,
            groups=4,
            groups_with_signal=2,
            completions=32,
            samples=[
                Sample(group=g, prompt=f"question {g} of step {step}", completion="so the answer is 42", rewards={"exact": 1.0}, total=1.0)
                for g in range(4)
            ],
        )
        path = Path(layout.samples_file(step))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(samples.model_dump_json())
        reward = 0.3 + 0.4 * step / STEPS
        add(
            TrainStep,
            step=step,
            total_steps=STEPS,
            reward_mean=reward,
            reward_std=0.2,
            kl=0.001 * step / 100,
            loss=0.05,
            metrics={"learning_rate": 3e-6, SIGNAL_METRIC: 0.5, "grad_norm": 0.8, "completion_length": 180.0},
        )
        parts = {part: 0.0 for part in TRAIN_PARTS} | {"rollout": 1.7 * step, "logprobs": 0.2 * step, "update": 0.7 * step}
        add(GoodputMeasured, attempt=1, train=TrainGoodput(elapsed_s=2.8 * step, parts=parts, step=step))
        if step % 10 == 0:
            add(CheckpointSaved, step=step, params=f"{layout.actor_checkpoints}/{step}/model_params")
        if step % EVAL_EVERY == 0:
            summary, _ = _summary(f"step-{step}", step, 90 + step // 10, before_rows)
            add(
                EvalResult,
                step=step,
                accuracy=summary.correct / EVAL_ROWS,
                metrics={"pass_at_1": summary.correct / EVAL_ROWS},
                summary=summary,
            )
    Path(layout.events).parent.mkdir(parents=True, exist_ok=True)
    Path(layout.events).write_text("".join(line + "\n" for line in lines))


def start_running_job(port: int, token: str, runs: Path) -> str:
    """Submit the job, wait for RUNNING, write its history and wait until its answer shows all of it; its id."""
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    spec = {
        "name": "running-bench",
        "model": {"name": "llama3.1-8b", "source": "/models/tiny"},
        "grpo": {"num_batches": STEPS},
        "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
        "output": str(runs),
    }
    job_id = str(client.post("/v1/jobs", json=spec).raise_for_status().json()["id"])
    deadline = time.monotonic() + READY_TIMEOUT_S
    wrote = False
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").raise_for_status().json()
        if job["phase"] == "RUNNING" and not wrote:
            write_history(RunLayout(str(runs), job_id), job_id)
            wrote = True
        if wrote and job["step"] == STEPS and len(job["train_evals"]["points"]) == 1 + STEPS // EVAL_EVERY:
            client.close()
            return job_id
        if job["phase"] not in ("QUEUED", "LAUNCHING", "RUNNING"):
            raise RuntimeError(f"the bench's job {job_id} ended {job['phase']}: {job['message']}")
        time.sleep(0.5)
    raise RuntimeError(f"the bench's job {job_id} did not show {STEPS} steps within {READY_TIMEOUT_S}s")


def release(runs: Path, job_id: str) -> None:
    """Let the held trainer exit (it would otherwise outlive the bench until its own limit)."""
    (runs / job_id / "exit_code").write_text("0")
