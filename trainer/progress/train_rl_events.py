"""Turns what train_rl writes into TrainStep and EvalResult events while it runs.

Per-step metrics come from the TensorBoard scalars Tunix writes (structured). Tunix logs a step's
rollout metrics (`rewards/train/*`, `completions/train/*`, and rljob's `sampler_trainer/train/*`,
maxtext_entry/logprob_agreement.py) at the step counter before the update
and the actor's (`actor/train/*`) after it, so rollout step k belongs to training step k+1, the
step number Tunix also names its checkpoint by.

train_rl's pre-, intermediate and post-training evaluations are not written anywhere structured by
MaxText: it logs one fixed-format line each. Our eval recorder (maxtext_entry/eval_recorder.py) keeps
their rows and prints a `RLJOB_EVAL {summary}` line just before MaxText's; `EvalLineReader` reports
that one, and parses MaxText's own line only when no summary came before it (a recorder failure).
The goodput recorder (maxtext_entry/goodput_recorder.py) prints `RLJOB_GOODPUT {TrainGoodput}` lines:
`goodput_from_line` reads them.
"""

from __future__ import annotations

import json
import re
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from trainer.contract.run.evaluation import EVAL_LINE_PREFIX, EvalSummary
from trainer.contract.run.goodput import GOODPUT_LINE_PREFIX, TrainGoodput
from trainer.progress.event_reporter import EventReporter
from trainer.progress.tensorboard_scalars import EventFileTailer, Scalar

ROLLOUT_PREFIXES = ("rewards/", "completions/", "sampler_trainer/")
ACTOR_TRAIN_PREFIX = "actor/train/"
ACTOR_LOSS = "actor/train/loss"
IGNORED_PREFIXES = ("jax/",)  # JAX/Orbax runtime counters, not training metrics

EVAL_LINE = re.compile(
    r"(?P<kind>Pre RL Training|Post RL Training|Intermediate Eval \(step=(?P<step>\d+)\)): "
    r"corr=(?P<corr>\d+), total=(?P<total>\d+), accuracy=(?P<accuracy>[-\d.]+)%, "
    r"partial_accuracy=(?P<partial>[-\d.]+)%, format_accuracy=(?P<format>[-\d.]+)%"
    r"(?:, mean_reward=(?P<reward>[-\d.naif]+))?"
)


@dataclass
class TrainStepAssembler:
    """Collects scalars by training step and hands out each step once its actor update is fully logged.

    Tunix writes a step's actor scalars (loss, perplexity, learning rate, grad_norm, then the RL
    metrics such as kl) in one call, one after another (peft_trainer._log_metrics, then
    trainer._post_process_train_step's metrics), and a tail can read the file between two of them.
    A step is therefore complete once a later step's actor loss is in the file (the file is written
    in order), or once it carries every actor tag a complete step carried, or at the final read.
    """

    total_steps: int
    already_reported: set[int] = field(default_factory=set)
    _by_step: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    _actor_train_tags: set[str] = field(default_factory=set)

    def add(self, scalars: list[Scalar]) -> None:
        for s in scalars:
            if s.tag.startswith(IGNORED_PREFIXES):
                continue
            step = s.step + 1 if s.tag.startswith(ROLLOUT_PREFIXES) else s.step
            self._by_step[step][s.tag] = s.value

    def ready(self, *, final: bool = False) -> list[tuple[int, dict[str, float]]]:
        """Steps complete since the last call; `final` once the writer has closed its files."""
        latest_update = max((step for step, metrics in self._by_step.items() if ACTOR_LOSS in metrics), default=0)
        out = []
        for step in sorted(self._by_step):
            metrics = self._by_step[step]
            if step < 1 or step in self.already_reported or ACTOR_LOSS not in metrics:
                continue
            tags = {tag for tag in metrics if tag.startswith(ACTOR_TRAIN_PREFIX)}
            known_complete = final or step < latest_update
            if known_complete:
                self._actor_train_tags |= tags
            elif not self._actor_train_tags or not self._actor_train_tags <= tags:
                continue
            self.already_reported.add(step)
            out.append((step, dict(metrics)))
        return out


def train_step_fields(step: int, total_steps: int, metrics: dict[str, float]) -> dict[str, Any]:
    return {
        "step": step,
        "total_steps": max(total_steps, step),
        "reward_mean": metrics.get("rewards/train/mean"),
        # Tunix logs no reward std; a per-reward-function std would need the raw rewards.
        "reward_std": metrics.get("rewards/train/std"),
        "kl": metrics.get("actor/train/kl"),
        "loss": metrics.get("actor/train/loss"),
        "metrics": metrics,
    }


def eval_fields(line: str, *, start_step: int, total_steps: int) -> dict[str, Any] | None:
    match = EVAL_LINE.search(line)
    if not match:
        return None
    kind = match["kind"]
    if kind.startswith("Pre"):
        step = start_step
    elif kind.startswith("Post"):
        step = total_steps
    else:
        step = int(match["step"])
    metrics = {
        "correct": float(match["corr"]),
        "total": float(match["total"]),
        "partial_accuracy": float(match["partial"]) / 100,
        "format_accuracy": float(match["format"]) / 100,
    }
    if match["reward"]:
        try:
            metrics["mean_reward"] = float(match["reward"])
        except ValueError:
            pass
    return {"step": step, "accuracy": float(match["accuracy"]) / 100, "metrics": metrics}


def summary_from_line(line: str) -> EvalSummary | None:
    """The EvalSummary a `RLJOB_EVAL {...}` line carries; None for any other line."""
    start = line.find(EVAL_LINE_PREFIX)
    if start < 0:
        return None
    try:
        return EvalSummary.model_validate(json.loads(line[start + len(EVAL_LINE_PREFIX) :]))
    except ValueError:
        return None


def goodput_from_line(line: str) -> TrainGoodput | None:
    """The TrainGoodput a `RLJOB_GOODPUT {...}` line (maxtext_entry/goodput_recorder.py) carries; None otherwise."""
    start = line.find(GOODPUT_LINE_PREFIX)
    if start < 0:
        return None
    try:
        return TrainGoodput.model_validate_json(line[start + len(GOODPUT_LINE_PREFIX) :])
    except ValueError:
        return None


def summary_fields(summary: EvalSummary) -> dict[str, Any]:
    n = summary.n
    metrics = {"correct": summary.correct, "total": float(n)}
    if n:
        metrics |= {"partial_accuracy": summary.partial_correct / n, "format_accuracy": summary.format_correct / n}
    if summary.mean_reward is not None:
        metrics["mean_reward"] = summary.mean_reward
    return {"step": summary.step, "accuracy": summary.correct / n if n else None, "metrics": metrics, "summary": summary}


@dataclass
class EvalLineReader:
    """Eval event fields from train_rl's output lines, one event per evaluation."""

    start_step: int
    total_steps: int
    _summary_seen: bool = False

    def fields(self, line: str) -> dict[str, Any] | None:
        summary = summary_from_line(line)
        if summary is not None:
            self._summary_seen = True
            return summary_fields(summary)
        fields = eval_fields(line, start_step=self.start_step, total_steps=self.total_steps)
        if fields is None:
            return None
        if self._summary_seen:  # MaxText's line for the evaluation just reported
            self._summary_seen = False
            return None
        return fields


class TrainProgressWatcher:
    """Polls the TensorBoard files in a thread while train_rl runs; `stop()` does a last full read."""

    def __init__(self, tailer: EventFileTailer, reporter: EventReporter, assembler: TrainStepAssembler, *, poll_interval_s: float):
        self._tailer, self._reporter, self._assembler = tailer, reporter, assembler
        self._poll_interval_s = poll_interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tensorboard-tailer", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def _poll_once(self, *, final: bool = False) -> None:
        with self._lock:
            self._assembler.add(self._tailer.poll())
            for step, metrics in self._assembler.ready(final=final):
                self._reporter.train_step(**train_step_fields(step, self._assembler.total_steps, metrics))

    def _run(self) -> None:
        while not self._stop.wait(self._poll_interval_s):
            try:
                self._poll_once()
            except Exception:  # noqa: BLE001 - progress must never kill training; the final read retries
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._poll_once(final=True)
