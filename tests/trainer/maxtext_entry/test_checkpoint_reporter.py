"""The checkpoint reporter: a finished actor checkpoint is reported once Orbax has finalized it, never before."""

from __future__ import annotations

import importlib
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from trainer.contract import CheckpointSaved, RunLayout, parse_event
from trainer.contract.run.checkpoint_line import checkpoint_line, step_from_line
from trainer.maxtext_entry import checkpoint_reporter as cr

COMMIT_DELAY_S = 0.3  # Orbax's commit (the rename to <step>) is held this long, so an early report is caught


@pytest.fixture
def orbax_restored(monkeypatch):
    """install() patches Orbax's class for the process: put it back after the test."""
    module, class_name, attribute = cr.WRAPPED
    owner = getattr(importlib.import_module(module), class_name)
    monkeypatch.setattr(owner, attribute, getattr(owner, attribute))
    # Slow the background commit down: a report made when the save starts (not when it is finalized) would land
    # while the step is still a temporary directory.
    from orbax.checkpoint._src.checkpointers import async_checkpointer

    commit = async_checkpointer._on_commit_callback

    def slow_commit(*args, **kwargs):
        time.sleep(COMMIT_DELAY_S)
        return commit(*args, **kwargs)

    monkeypatch.setattr(async_checkpointer, "_on_commit_callback", slow_commit)


def _manager(root: Path, *, async_save: bool = True):
    import orbax.checkpoint as ocp

    options = ocp.CheckpointManagerOptions(max_to_keep=1, enable_async_checkpointing=async_save, create=True)
    return ocp.CheckpointManager(root, item_names=("model_params",), options=options)


def _save(manager, step: int) -> None:
    import orbax.checkpoint as ocp

    params = {"w": np.full((4,), float(step), dtype=np.float32)}
    manager.save(step, args=ocp.args.Composite(model_params=ocp.args.PyTreeSave(params)))


class Lines:
    """What the reporter writes, with whether Orbax called the step finalized at that moment."""

    def __init__(self, root: Path):
        self.root = root
        self.seen: list[tuple[str, bool]] = []
        self.lock = threading.Lock()

    def __call__(self, line: str) -> None:
        import orbax.checkpoint as ocp

        step = step_from_line(line)
        assert step is not None, line
        with self.lock:
            self.seen.append((line, bool(ocp.utils.is_checkpoint_finalized(self.root / str(step)))))


@pytest.mark.parametrize("async_save", [True, False], ids=["async", "sync"])
def test_each_step_is_reported_once_after_orbax_finalized_it(tmp_path, orbax_restored, async_save) -> None:
    actor = tmp_path / "checkpoints" / "actor"
    lines = Lines(actor)
    cr.install(str(actor), cr.CheckpointReporter(str(actor), write=lines))
    manager = _manager(actor, async_save=async_save)
    _save(manager, 2)
    _save(manager, 4)  # Orbax waits for step 2's finalization first, then deletes it (max_to_keep=1)
    manager.close()
    assert lines.seen == [(checkpoint_line(2), True), (checkpoint_line(4), True)]


def test_a_manager_elsewhere_reports_nothing(tmp_path, orbax_restored) -> None:
    actor = tmp_path / "checkpoints" / "actor"
    lines = Lines(actor)
    cr.install(str(actor), cr.CheckpointReporter(str(actor), write=lines))
    best = _manager(tmp_path / "best")  # the best-checkpoint keeper's saves go through Orbax too
    _save(best, 3)
    best.close()
    assert lines.seen == []


def test_a_failed_report_leaves_the_save_alone(tmp_path, orbax_restored, capsys) -> None:
    actor = tmp_path / "actor"

    def broken(line: str) -> None:
        raise OSError("stdout closed")

    cr.install(str(actor), cr.CheckpointReporter(str(actor), write=broken))
    manager = _manager(actor, async_save=False)
    _save(manager, 1)
    manager.close()
    assert manager.all_steps() == [1]
    assert "reporting checkpoint 1 failed, training goes on: OSError: stdout closed" in capsys.readouterr().err


@pytest.mark.parametrize(
    "line, step",
    [
        ('I1204 12:00 RLJOB_CHECKPOINT {"step": 40}', 40),
        ('RLJOB_CHECKPOINT {"step": 0}', 0),
        ('RLJOB_CHECKPOINT {"step": -1}', None),
        ('RLJOB_CHECKPOINT {"step": true}', None),
        ('RLJOB_CHECKPOINT {"step": "4"}', None),
        ('RLJOB_CHECKPOINT {"step": 4', None),  # torn
        ("RLJOB_CHECKPOINT []", None),
        ('RLJOB_GOODPUT {"step": 4}', None),
    ],
)
def test_step_from_line(line: str, step: int | None) -> None:
    assert step_from_line(line) == step


def test_the_train_stage_turns_the_line_into_a_checkpoint_event_naming_its_own_layout(tmp_path) -> None:
    from trainer.progress.event_reporter import EventReporter
    from trainer.progress.train_rl_events import EvalLineReader
    from trainer.stages.train import report_train_line
    from trainer.storage import store_for

    layout = RunLayout(str(tmp_path / "runs"), "rl-abcdefabcdef")
    uri = str(tmp_path / "events.jsonl")
    reporter = EventReporter(store_for(uri), uri, "rl-abcdefabcdef", stdout=open(tmp_path / "out", "w"))
    report_train_line(checkpoint_line(6), reporter, layout, EvalLineReader(start_step=0, total_steps=8))
    report_train_line("an ordinary log line", reporter, layout, EvalLineReader(start_step=0, total_steps=8))
    events = [parse_event(line) for line in Path(uri).read_text().splitlines()]
    assert events == [
        CheckpointSaved(seq=0, time=events[0].time, job_id="rl-abcdefabcdef", step=6, params=f"{layout.actor_checkpoints}/6/model_params")
    ]


def test_the_wrapped_orbax_method_exists_with_the_arguments_the_stand_in_passes() -> None:
    """An Orbax upgrade that renames or reshapes it would silently stop checkpoint reports (eval jobs)."""
    import inspect

    module, class_name, attribute = cr.WRAPPED
    method = getattr(getattr(importlib.import_module(module), class_name), attribute)
    assert list(inspect.signature(method).parameters)[:3] == ["self", "step", "steps_to_remove"]
