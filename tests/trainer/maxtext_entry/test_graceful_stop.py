"""Inside train_rl: SIGTERM only sets a flag; between steps the actor is saved at its current step with
Tunix's own metadata and the process exits 75 (fakes of Tunix's learner, cluster and checkpoint manager)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from trainer.contract import ExitCode
from trainer.maxtext_entry.graceful_stop import StopFlag, stop_checkpoint_metadata, wrap_training_loop


@dataclass
class FakeCheckpointManager:
    latest: int | None = None
    saves: list[dict[str, Any]] = field(default_factory=list)

    def latest_step(self) -> int | None:
        return self.latest

    def save(
        self,
        step: int,
        model: Any,
        optimizer: Any,
        save_only_lora_params: bool = False,
        force: bool = False,
        custom_metadata: dict[str, Any] | None = None,
    ) -> bool:
        self.saves.append({"step": step, "force": force, "metadata": custom_metadata})
        self.latest = step
        return True


class FakeActorTrainer:
    def __init__(self, cluster: FakeCluster, restored_step: int):
        self.cluster = cluster
        self.train_steps = restored_step
        self.model, self.optimizer = object(), object()
        self.checkpoint_manager = FakeCheckpointManager(latest=restored_step or None)

    def custom_checkpoint_metadata(self) -> dict[str, Any]:
        # What Tunix's RLCluster gives its actor trainer (rl_cluster.py): the step being trained.
        return {"global_step": self.cluster.global_steps + 1, "role": "actor"}


class FakeCluster:
    def __init__(self, restored_step: int):
        self.global_steps = restored_step
        self.actor_trainer = FakeActorTrainer(self, restored_step)
        self.closed = False


class FakeLearner:
    """RLLearner.train's loop as Tunix 0.1.7 runs it: global steps until StopIteration or max, then close."""

    def __init__(self, restored_step: int = 0, max_steps: int = 6):
        self.rl_cluster = FakeCluster(restored_step)
        self.max_steps = max_steps
        self.on_step: dict[int, Any] = {}  # step number -> what to do while that step runs

    def run_global_step(self) -> None:
        actor = self.rl_cluster.actor_trainer
        self.on_step.get(actor.train_steps + 1, lambda: None)()
        actor.train_steps += 1
        self.rl_cluster.global_steps += 1  # sync_weights, after the step

    def train(self) -> None:
        while True:
            try:
                self.run_global_step()
                if self.rl_cluster.actor_trainer.train_steps >= self.max_steps:
                    break
            except StopIteration:
                break
        self.rl_cluster.closed = True


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def _wrapped(learner: FakeLearner, flag: StopFlag) -> FakeLearner:
    run_global_step, train = wrap_training_loop(FakeLearner.run_global_step, FakeLearner.train, flag)
    learner.run_global_step = run_global_step.__get__(learner)  # type: ignore[method-assign]
    learner.train = train.__get__(learner)  # type: ignore[method-assign]
    return learner


def test_sigterm_during_a_step_saves_that_step_with_tunix_metadata_and_exits_75(sigterm_restored):
    flag = StopFlag()
    learner = _wrapped(FakeLearner(), flag)
    learner.on_step[3] = lambda: os.kill(os.getpid(), signal.SIGTERM)  # the notice arrives inside step 3
    with pytest.raises(SystemExit) as exit_info:
        learner.train()
    assert exit_info.value.code == ExitCode.RETRYABLE
    actor = learner.rl_cluster.actor_trainer
    assert actor.train_steps == 3 and learner.rl_cluster.closed  # step 3 finished; Tunix's close ran
    # The metadata a periodic save of step 3 would carry, so the rerun numbers steps on from 3.
    assert actor.checkpoint_manager.saves == [{"step": 3, "force": True, "metadata": {"global_step": 3, "role": "actor"}}]


def test_no_stop_trains_to_the_end_and_saves_nothing_itself(sigterm_restored):
    learner = _wrapped(FakeLearner(max_steps=4), StopFlag())
    learner.train()
    assert learner.rl_cluster.actor_trainer.train_steps == 4
    assert learner.rl_cluster.actor_trainer.checkpoint_manager.saves == []


def test_a_stop_before_any_step_of_this_process_exits_at_once_without_saving(sigterm_restored):
    flag = StopFlag(signum=signal.SIGTERM)
    learner = _wrapped(FakeLearner(restored_step=2), flag)
    with pytest.raises(SystemExit) as exit_info:
        learner.train()
    assert exit_info.value.code == ExitCode.RETRYABLE
    assert learner.rl_cluster.actor_trainer.train_steps == 2  # resumed at 2, trained nothing
    assert learner.rl_cluster.actor_trainer.checkpoint_manager.saves == []


def test_a_step_already_saved_by_the_periodic_checkpoint_is_not_saved_again(sigterm_restored):
    flag = StopFlag()
    learner = _wrapped(FakeLearner(), flag)
    manager = learner.rl_cluster.actor_trainer.checkpoint_manager

    def periodic_save_then_notice() -> None:
        manager.latest = 2
        flag.signum = signal.SIGTERM

    learner.on_step[2] = periodic_save_then_notice
    with pytest.raises(SystemExit):
        learner.train()
    assert manager.saves == [] and learner.rl_cluster.actor_trainer.train_steps == 2


def test_the_handler_only_records_the_signal_and_is_installed_when_training_starts(sigterm_restored):
    flag = StopFlag()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _wrapped(FakeLearner(max_steps=1), flag).train()
    assert signal.getsignal(signal.SIGTERM) == flag.handle
    flag.handle(signal.SIGTERM, None)
    assert flag.requested and flag.describe() == "SIGTERM"


def test_stop_metadata_names_the_step_reached_between_steps():
    assert stop_checkpoint_metadata({"global_step": 8, "role": "actor"}, 7) == {"global_step": 7, "role": "actor"}
