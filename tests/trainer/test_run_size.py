"""The run directory's size by part: the walk (regular files, no symlinks followed, bounded), the parts,
and the `storage` event the pipeline emits at each stage's end."""

from __future__ import annotations

import io
import os
from pathlib import Path

from tests.trainer.test_pipeline_exit_codes import FakeMaxText, _context, _events
from trainer.contract import STORAGE_PARTS, ExitCode, RunLayout, RunStorage, Stage, parse_event
from trainer.contract.run.storage import storage_part
from trainer.pipeline import run_pipeline
from trainer.progress.event_reporter import EventReporter
from trainer.run_size import local_file_sizes, measure_run, report_run_storage
from trainer.runner import StageFailed
from trainer.storage import store_for


def _write(root: Path, relative: str, size: int) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def test_every_file_of_the_layout_lands_in_its_part():
    cases = {
        "rl/rl-a/checkpoints/actor/3/model_params/d/0.0": "checkpoints",
        "rl/rl-a/tensorboard/events.out.tfevents.1": "logs",
        "rl/rl-a/config.yml": "other",
        "maxtext/0/items/_METADATA": "converted",
        "hf/model.safetensors": "export",
        "logs/train.log": "logs",
        "events.jsonl": "logs",
        "samples/train-3.json": "samples",
        "eval/after.jsonl": "samples",
        "data/train.parquet": "data",
        "spec.json": "other",
        "manifest.json": "other",
        "stages/train.done": "other",
    }
    assert {path: storage_part(path) for path in cases} == cases
    assert set(cases.values()) <= set(STORAGE_PARTS)


def test_measure_sums_regular_files_by_part_and_never_follows_symlinks(tmp_path):
    layout = RunLayout(str(tmp_path / "runs"), "rl-a")
    root = Path(layout.root)
    _write(root, "rl/rl-a/checkpoints/actor/3/model_params/x", 1000)
    _write(root, "rl/rl-a/checkpoints/actor/3/optimizer_state/x", 2000)
    _write(root, "hf/model.safetensors", 300)
    _write(root, "logs/train.log", 40)
    _write(root, "samples/train-1.json", 5)
    _write(root, "spec.json", 6)
    _write(tmp_path / "elsewhere", "big", 10**6)  # reachable only through the links below
    os.symlink(tmp_path / "elsewhere", root / "data")
    os.symlink(tmp_path / "elsewhere" / "big", root / "hf" / "linked.safetensors")
    measured = measure_run(layout)
    assert measured.parts == {"checkpoints": 3000, "converted": 0, "export": 300, "logs": 40, "samples": 5, "data": 0, "other": 6}
    assert measured.total_bytes == 3351 and measured.files == 6 and measured.complete


def test_the_walk_is_bounded_and_says_so(tmp_path):
    for i in range(10):
        _write(tmp_path, f"d{i}/f", 1)
    sizes, complete = local_file_sizes(str(tmp_path), max_entries=5)
    assert not complete and len(sizes) < 10
    everything, complete = local_file_sizes(str(tmp_path), max_entries=100)
    assert complete and sorted(everything) == [(f"d{i}/f", 1) for i in range(10)]


def test_a_missing_run_directory_measures_zero(tmp_path):
    measured = measure_run(RunLayout(str(tmp_path), "rl-none"))
    assert measured.total_bytes == 0 and measured.files == 0


def test_the_pipeline_reports_the_run_size_at_each_stage_end_and_after_a_failure(tmp_path, tiny_spec_dict):
    layout = RunLayout(str(tmp_path / "runs"), "rl-test")
    Path(layout.root).mkdir(parents=True)
    fake = FakeMaxText(layout)
    ctx = _context(tmp_path, tiny_spec_dict, fake)
    no_verify = ctx.spec.model_copy(update={"export": ctx.spec.export.model_copy(update={"verify": False})})
    ctx = type(ctx)(**{**ctx.__dict__, "spec": no_verify})
    assert run_pipeline(ctx) == ExitCode.SUCCESS
    events = _events(layout)
    storage = [e for e in events if e.type == "storage"]
    assert [e.stage for e in storage] == [Stage.CONVERT, Stage.TRAIN, Stage.EXPORT]
    # Each follows its stage's stage_finished; the fake train stage wrote a 1-byte checkpoint, the export 1 byte.
    for event in storage:
        before = events[events.index(event) - 1]
        assert before.type == "stage_finished" and before.stage == event.stage
    assert storage[1].storage.parts["checkpoints"] == 1 and storage[1].storage.parts["export"] == 0
    assert storage[2].storage.parts["export"] == 1

    failed = RunLayout(str(tmp_path / "runs"), "rl-fail")
    Path(failed.root).mkdir(parents=True)
    ctx = _context(tmp_path, tiny_spec_dict, FakeMaxText(failed, fail={"train_rl": StageFailed("m", 1, Path("l"), "x")}))
    assert run_pipeline(ctx) != ExitCode.SUCCESS
    events = _events(failed)
    # Its convert stage came from the conversion cache (nothing written, nothing measured); train failed.
    assert [e.stage for e in events if e.type == "storage"] == [Stage.TRAIN]
    assert events[-1].type == "run_finished" and events[-2].type == "storage"


def test_a_failed_measurement_is_a_warning_not_an_event(tmp_path, monkeypatch, capsys):
    layout = RunLayout(str(tmp_path), "rl-a")
    reporter = EventReporter(store_for(layout.root), layout.events, layout.job_id, stdout=io.StringIO())

    def broken(_layout):
        raise PermissionError("denied")

    monkeypatch.setattr("trainer.run_size.measure_run", broken)
    assert report_run_storage(reporter, layout, Stage.TRAIN) is None
    assert "could not measure" in capsys.readouterr().err
    assert not Path(layout.events).exists() or "storage" not in Path(layout.events).read_text()


def test_the_event_round_trips():
    measured = RunStorage.of_files([("hf/a", 3), ("x", 1)])
    line = (
        '{"type":"storage","seq":0,"time":"2026-01-01T00:00:00Z","job_id":"rl-a","stage":"export",'
        f'"storage":{measured.model_dump_json()}}}'
    )
    event = parse_event(line)
    assert event.type == "storage" and event.storage == measured and event.storage.parts["export"] == 3
