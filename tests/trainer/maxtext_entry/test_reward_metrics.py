"""The reward metrics the sample recorder adds (signal fraction, completions, rewarded completions)
reach TrainStep.metrics under the tags the service reads: through Tunix's own reward manager,
metrics buffer and metrics logger (stand-ins only for the learner and cluster state they read),
then the trainer's step assembler and the service's step summary."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from service.domain.records.train_step_summary import TrainStepSummary
from trainer.contract import SIGNAL_METRIC, TrainStep
from trainer.contract.run.samples import COMPLETIONS_METRIC, REWARDED_METRIC
from trainer.maxtext_entry import sample_recorder
from trainer.progress.tensorboard_scalars import Scalar
from trainer.progress.train_rl_events import TrainStepAssembler, train_step_fields


def test_counts_add_up_and_the_fraction_averages_per_call() -> None:
    rewards = np.asarray([[1.0, 0.0], [0.0, -0.5], [0.0, 0.0], [np.nan, 0.25]])  # totals 1, -0.5, 0, 0.25
    metrics = {name: (values.tolist(), op) for name, (values, op) in sample_recorder.reward_metrics(rewards, 2).items()}
    assert metrics == {
        "rewards/completions": ([4], np.sum),
        "rewards/rewarded_completions": ([2], np.sum),  # a total of 0 or below is not rewarded
        "rewards/signal_fraction": ([1.0], np.mean),  # both groups' totals differ
    }
    assert "rewards/signal_fraction" not in sample_recorder.reward_metrics(rewards[:3], 2)  # no whole groups


@dataclass
class _AlgoConfig:  # Tunix reads the algorithm config with dataclasses.asdict
    num_generations: int = 2


def _exact(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    return [1.0 if c == "4" else 0.0 for c in completions]


def _format(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    return [-0.5 if not c else 0.0 for c in completions]


@pytest.fixture
def scalars(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, float, int]]]:
    """What Tunix's metrics logger records (the TensorBoard backend writes exactly these tags)."""
    import jax
    from tunix.rl import reward_manager, rl_learner

    # install() replaces two Tunix methods; monkeypatch puts the originals back afterwards.
    monkeypatch.setattr(rl_learner.RLLearner, "_compute_rewards", rl_learner.RLLearner._compute_rewards)
    manager = reward_manager.SequenceRewardManager
    monkeypatch.setattr(manager, "_prepare_log_metrics", manager._prepare_log_metrics)
    seen: list[tuple[str, float, int]] = []

    def listener(event: str, value: float, **kwargs: Any) -> None:
        seen.append((event, float(value), int(kwargs.get("step", -1))))

    jax.monitoring.register_scalar_listener(listener)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_scalar_listener(listener)


def test_the_metrics_arrive_under_the_tags_the_service_reads(scalars: list[tuple[str, float, int]]) -> None:
    from tunix.rl import reward_manager, rl_cluster, rl_learner
    from tunix.sft import metrics_logger

    sample_recorder.install(None)
    cluster: Any = object.__new__(rl_cluster.RLCluster)
    cluster.global_steps = 0
    cluster._buffered_train_metrics, cluster._buffered_eval_metrics = [], []
    cluster._rl_metrics_logger = metrics_logger.MetricsLogger()
    cluster._external_metrics_logger = None
    learner = SimpleNamespace(
        rl_cluster=cluster,
        algo_config=_AlgoConfig(),
        reward_manager=reward_manager.SequenceRewardManager([_exact, _format], _AlgoConfig()),
    )
    # One step's rollout in two micro-batches, as Tunix runs a batch larger than its micro-batch size.
    for completions in (["4", "5", "4", "4"], ["", "4", "7", "4"]):
        rl_learner.RLLearner._compute_rewards(learner, ["2+2?"] * 4, completions, rl_cluster.Mode.TRAIN)
    for buffered in cluster._buffered_train_metrics:
        cluster._log_metrics(buffered)

    logged = {tag: value for tag, value, _ in scalars}
    assert logged[COMPLETIONS_METRIC] == 8
    assert logged[REWARDED_METRIC] == 5  # each "4"; "" scored -0.5
    assert logged[SIGNAL_METRIC] == 0.75  # groups with differing totals: 1 of 2, then 2 of 2

    assembler = TrainStepAssembler(total_steps=5)
    assembler.add([Scalar(step=s, tag=tag, value=v, wall_time=0.0) for tag, v, s in scalars])
    assembler.add([Scalar(step=1, tag="actor/train/loss", value=0.5, wall_time=0.0)])
    [(step, metrics)] = assembler.ready(final=True)
    event = TrainStep(seq=0, time=datetime.now(UTC), job_id="rl-000000000001", **train_step_fields(step, 5, metrics))
    summary = TrainStepSummary.of_event(event)
    assert (summary.step, summary.completions, summary.rewarded_completions, summary.signal_fraction) == (1, 8, 5, 0.75)
