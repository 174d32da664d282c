"""Inside train_rl: keep a bounded sample of each step's completions and measure its learning signal.

Two of Tunix's own methods are wrapped, nothing of MaxText:
- `RLLearner._compute_rewards(prompts, completions, mode, ...)` runs once per rollout batch; the
  wrapper notes the mode, the step it feeds (`global_steps + 1`, the step Tunix names the update and
  its checkpoint by) and GRPO's group size.
- `SequenceRewardManager._prepare_log_metrics(prompts, completions, rewards)` receives exactly what
  the reward functions were handed and the matrix of their scores (one column per function). The
  wrapper writes the sample file and adds the step's signal fraction, completions and rewarded
  completions (`reward_metrics`) to the metrics Tunix logs.

A failure here is printed and ignored: observing training must never stop it.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np

from trainer.contract import Sample, StepSamples, join_uri
from trainer.contract.run.samples import (
    COMPLETIONS_METRIC,
    MAX_SAMPLES_PER_STEP,
    MAX_TEXT_CHARS,
    REWARDED_METRIC,
    SIGNAL_METRIC,
    samples_file_name,
    tunix_metric_name,
)

_context = threading.local()  # set by the _compute_rewards wrapper for the nested _prepare_log_metrics


def signal_groups(rewards: np.ndarray, num_generations: int) -> tuple[int, int]:
    """(groups, groups whose completions' total rewards are not all equal). Tunix repeats each prompt
    `num_generations` times in a row, so a group is a consecutive block of rows."""
    totals = np.nansum(rewards, axis=1) if rewards.ndim == 2 else np.asarray(rewards)
    if num_generations < 1 or len(totals) % num_generations:
        return 0, 0
    blocks = totals.reshape(-1, num_generations)
    spread = np.ptp(blocks, axis=1)
    return len(blocks), int(np.sum(spread > 1e-9))


def reward_metrics(rewards: np.ndarray, num_generations: int) -> dict[str, tuple[np.ndarray, Callable[..., Any]]]:
    """What to add to the metrics of one `_prepare_log_metrics` call, in Tunix's (values, aggregate)
    form. Tunix buffers every call of a step (one per rollout micro-batch) and aggregates them when
    the step ends, so counts are summed and the fraction averaged."""
    totals = np.nansum(rewards, axis=1) if rewards.ndim == 2 else np.asarray(rewards)
    metrics: dict[str, tuple[np.ndarray, Callable[..., Any]]] = {
        tunix_metric_name(COMPLETIONS_METRIC): (np.asarray([len(totals)]), np.sum),
        tunix_metric_name(REWARDED_METRIC): (np.asarray([int(np.sum(totals > 0))]), np.sum),
    }
    groups, with_signal = signal_groups(rewards, num_generations)
    if groups:
        metrics[tunix_metric_name(SIGNAL_METRIC)] = (np.asarray([with_signal / groups]), np.mean)
    return metrics


def _cut(text: str, *, keep_tail: bool) -> tuple[str, bool]:
    if len(text) <= MAX_TEXT_CHARS:
        return text, False
    return (text[-MAX_TEXT_CHARS:] if keep_tail else text[:MAX_TEXT_CHARS]), True


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def build_step_samples(
    step: int, num_generations: int, prompts: list[str], completions: list[str], rewards: np.ndarray, names: list[str], *, now: datetime
) -> StepSamples:
    groups, with_signal = signal_groups(rewards, num_generations)
    kept = []
    for i in range(min(len(completions), MAX_SAMPLES_PER_STEP)):
        prompt, cut_prompt = _cut(str(prompts[i]), keep_tail=True)  # the question sits at the prompt's end
        completion, cut_completion = _cut(str(completions[i]), keep_tail=False)
        row = rewards[i]
        kept.append(
            Sample(
                group=i // max(num_generations, 1),
                prompt=prompt,
                completion=completion,
                rewards={name: _finite(row[j]) for j, name in enumerate(names)},
                total=_finite(float(np.nansum(row))),
                truncated=cut_prompt or cut_completion,
            )
        )
    return StepSamples(
        step=step,
        time=now,
        num_generations=num_generations,
        groups=groups,
        groups_with_signal=with_signal,
        completions=len(completions),
        samples=kept,
    )


class SampleRecorder:
    def __init__(self, samples_uri: str):
        from trainer.storage import store_for

        self.samples_uri = samples_uri
        self.store = store_for(samples_uri)

    def record(self, samples: StepSamples) -> None:
        uri = join_uri(self.samples_uri, samples_file_name(samples.step))
        self.store.write_bytes(uri, samples.model_dump_json().encode())


def install(samples_uri: str | None) -> None:
    """Wrap Tunix's reward path; without a samples URI only the metrics are added."""
    from tunix.rl import reward_manager, rl_learner

    recorder = SampleRecorder(samples_uri) if samples_uri else None
    compute_rewards = rl_learner.RLLearner._compute_rewards
    prepare_log_metrics = reward_manager.SequenceRewardManager._prepare_log_metrics

    # Stand-ins for Tunix methods (Tunix ships no types): the arguments are Tunix's, passed through.
    def _compute_rewards(self: Any, prompts: Any, completions: Any, mode: Any, step: int | None = None, **kwargs: Any) -> Any:
        _context.current = {
            "train": "train" in str(mode).lower(),
            "step": int(self.rl_cluster.global_steps) + 1,
            "num_generations": int(getattr(self.algo_config, "num_generations", 1)),
        }
        try:
            return compute_rewards(self, prompts, completions, mode, step, **kwargs)
        finally:
            _context.current = None

    def _prepare_log_metrics(self: Any, prompts: Any, completions: Any, rewards: Any) -> Any:
        metrics = prepare_log_metrics(self, prompts, completions, rewards)
        current = getattr(_context, "current", None)
        if current is None:
            return metrics
        try:
            scores = np.asarray(rewards, dtype=np.float64)
            metrics.update(reward_metrics(scores, current["num_generations"]))
            names = [getattr(fn, "__name__", f"reward_{i}") for i, fn in enumerate(self.reward_fns)]
            samples = build_step_samples(
                current["step"], current["num_generations"], list(prompts), list(completions), scores, names, now=datetime.now(UTC)
            )
            if recorder is not None and current["train"]:
                recorder.record(samples)
        except Exception as e:  # noqa: BLE001 - a sample that cannot be kept must not stop training
            print(f"rljob: keeping completion samples failed, training goes on: {type(e).__name__}: {e}", file=sys.stderr)
        return metrics

    rl_learner.RLLearner._compute_rewards = _compute_rewards
    reward_manager.SequenceRewardManager._prepare_log_metrics = _prepare_log_metrics
