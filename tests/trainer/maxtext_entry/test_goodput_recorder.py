"""The goodput recorder: each wrapped Tunix/MaxText method's time lands in its part, no instant twice."""

from __future__ import annotations

import threading
import types
from typing import Any

import pytest

from trainer.contract import GoodputMeasured, parse_event
from trainer.contract.run.goodput import GOODPUT_LINE_PREFIX, TRAIN_PARTS, TrainGoodput
from trainer.maxtext_entry import goodput_recorder as gr
from trainer.progress.train_rl_events import goodput_from_line


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _fake_tunix(clock: FakeClock) -> dict[str, Any]:
    """Modules shaped like Tunix's and MaxText's, whose methods take known fake time (and nest as Tunix's do)."""

    class RLCluster:
        global_steps = 0

        def generate(self, prompts: Any) -> str:
            clock.advance(5.0)
            return "completions"

        def get_ref_per_token_logps(self) -> None:
            clock.advance(1.0)

        def get_old_per_token_logps(self) -> None:
            clock.advance(0.5)

        def update_actor(self, manager: Any) -> None:
            clock.advance(3.0)
            manager.save(1)  # PeftTrainer saves inside update_actor
            clock.advance(1.0)

        def sync_weights(self) -> None:
            clock.advance(0.25)
            self.global_steps += 1

    class CheckpointManager:
        def save(self, step: int) -> bool:
            clock.advance(2.0)
            return True

        def maybe_restore(self) -> None:
            clock.advance(0.75)

        def close(self) -> None:
            clock.advance(0.125)

    cluster_module = types.SimpleNamespace(RLCluster=RLCluster)
    checkpoint_module = types.SimpleNamespace(CheckpointManager=CheckpointManager)

    def evaluate(config: Any, dataset: Any, rl_cluster: Any, num_passes: int = 1) -> str:
        clock.advance(1.0)
        rl_cluster.generate(["q"])  # MaxText's evaluation generates through the cluster
        return "scores"

    eval_module = types.SimpleNamespace(evaluate=evaluate)

    def read_trainer_logps(cluster: Any, prompt_ids: Any, completion_ids: Any, temperature: float) -> None:
        clock.advance(0.25)  # the agreement's forward and its host read

    return {
        "trainer.maxtext_entry.logprob_agreement": types.SimpleNamespace(read_trainer_logps=read_trainer_logps),
        "tunix.rl.rl_cluster": cluster_module,
        "tunix.sft.checkpoint_manager": checkpoint_module,
        "maxtext.trainers.post_train.rl.evaluate_rl": eval_module,
    }


def _step(modules: dict[str, Any], clock: FakeClock) -> None:
    """One GRPO step in Tunix's order, with untimed work between the calls."""
    cluster = modules["tunix.rl.rl_cluster"].RLCluster()
    manager = modules["tunix.sft.checkpoint_manager"].CheckpointManager()
    manager.maybe_restore()
    clock.advance(10.0)  # untimed: model loading
    cluster.generate(["p"])
    cluster.get_ref_per_token_logps()
    cluster.get_old_per_token_logps()
    modules["trainer.maxtext_entry.logprob_agreement"].read_trainer_logps(cluster, None, None, 1.0)
    clock.advance(0.5)  # untimed: rewards
    cluster.update_actor(manager)
    cluster.sync_weights()
    modules["maxtext.trainers.post_train.rl.evaluate_rl"].evaluate(None, None, cluster)
    manager.close()


@pytest.fixture
def fake() -> tuple[FakeClock, dict[str, Any], gr.GoodputClock, list[str]]:
    clock = FakeClock()
    modules = _fake_tunix(clock)
    goodput = gr.GoodputClock(clock)
    lines: list[str] = []
    reporter = gr.GoodputReporter(goodput, write=lines.append)
    wrapped = gr.wrap_targets(goodput, reporter, import_module=modules.__getitem__)
    # Every method named in WRAPPED that the fake has (get_actor_per_token_logps and update_critic it lacks).
    assert len(wrapped) == len(gr.WRAPPED) - 2, wrapped
    return clock, modules, goodput, lines


def test_each_wrapped_method_times_its_own_part_and_nested_calls_go_to_the_right_one(fake) -> None:
    clock, modules, goodput, lines = fake
    _step(modules, clock)
    measured = goodput.snapshot()
    assert measured.parts == {
        "rollout": 5.0,  # the step's generate only: eval's generate is eval's
        "logprobs": 1.5 + 0.25,  # the reference's and old policy's forwards, and the agreement's
        "update": 4.0,  # update_actor less the save inside it
        "weight_sync": 0.25,
        "checkpoint": 2.0 + 0.75 + 0.125,  # save (inside update), restore, close
        "eval": 1.0 + 5.0,
    }
    assert measured.elapsed_s == pytest.approx(10.0 + 0.5 + sum(measured.parts.values()))
    # A report after the weight sync (the step's end, global step 1) and after the evaluation.
    reports = [TrainGoodput.model_validate_json(line.removeprefix(GOODPUT_LINE_PREFIX)) for line in lines]
    assert [r.step for r in reports] == [1, 1] and reports[0].parts["eval"] == 0 and reports[1].parts["eval"] == 6.0


@pytest.mark.parametrize("removed", ["generate", "update_actor", "save"])
def test_without_a_wrapper_its_part_stays_zero(removed: str) -> None:
    """The control for the test above: the attribution comes from the wrappers, not from the clock."""
    clock = FakeClock()
    modules = _fake_tunix(clock)
    goodput = gr.GoodputClock(clock)
    targets = tuple(t for t in gr.WRAPPED if t[2] != removed)
    gr.wrap_targets(goodput, gr.GoodputReporter(goodput, write=lambda line: None), targets, import_module=modules.__getitem__)
    _step(modules, clock)
    parts = goodput.snapshot().parts
    part = {"generate": "rollout", "update_actor": "update", "save": "checkpoint"}[removed]
    if removed == "save":
        assert parts["checkpoint"] == 0.75 + 0.125 and parts["update"] == 6.0  # the save counted as update
    else:
        assert parts[part] == 0.0


def test_time_two_threads_spend_at_once_is_counted_once_for_what_the_loop_waits_on() -> None:
    clock = FakeClock()
    goodput = gr.GoodputClock(clock)
    in_rollout, update_done = threading.Event(), threading.Event()

    def rollout_thread() -> None:  # Tunix's async rollout: generation overlaps the actor update
        with goodput.timing("rollout"):
            in_rollout.set()
            update_done.wait(5)
            clock.advance(1.0)  # after the update: rollout alone

    worker = threading.Thread(target=rollout_thread)
    worker.start()
    assert in_rollout.wait(5)
    with goodput.timing("update"):
        clock.advance(4.0)  # both running
    update_done.set()
    worker.join(5)
    measured = goodput.snapshot()
    assert measured.parts["update"] == 4.0 and measured.parts["rollout"] == 1.0
    assert sum(measured.parts.values()) <= measured.elapsed_s == 5.0


def test_the_pipeline_reads_the_line_into_a_goodput_event(tmp_path) -> None:
    from trainer.progress.event_reporter import EventReporter
    from trainer.storage import store_for

    train = TrainGoodput(elapsed_s=20.0, parts=dict.fromkeys(TRAIN_PARTS, 1.0), step=2)
    line = "some log prefix " + GOODPUT_LINE_PREFIX + train.model_dump_json()
    assert goodput_from_line(line) == train
    assert goodput_from_line(GOODPUT_LINE_PREFIX + "{not json") is None and goodput_from_line("RLJOB_EVAL {}") is None
    uri = str(tmp_path / "events.jsonl")
    reporter = EventReporter(store_for(uri), uri, "rl-a", stdout=open(tmp_path / "out", "w"))
    reporter.run_started(3, str(tmp_path))
    event = reporter.goodput(train)
    assert isinstance(event, GoodputMeasured) and event.attempt == 3
    assert parse_event((tmp_path / "events.jsonl").read_text().splitlines()[-1]) == event


def test_every_wrapped_method_exists_in_the_installed_tunix_and_maxtext() -> None:
    """A Tunix or MaxText upgrade that renames one would silently stop timing it (install skips it)."""
    import importlib
    import multiprocessing.pool  # noqa: F401 - MaxText's reward helpers need it imported first (train_rl_entry.py)

    for module_name, class_name, attribute, _part in gr.WRAPPED:
        owner = importlib.import_module(module_name)
        owner = getattr(owner, class_name) if class_name else owner
        assert callable(getattr(owner, attribute, None)), (module_name, class_name, attribute)
