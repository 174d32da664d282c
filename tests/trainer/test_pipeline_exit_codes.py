"""Stage orchestration with a fake subprocess seam: skip logic, markers written last, exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from trainer.contract import STAGE_ORDER, ExitCode, JobSpec, RunLayout, Stage, parse_event
from trainer.pipeline import classify_failure, run_pipeline
from trainer.progress.event_reporter import EventReporter
from trainer.runner import StageFailed, StageInterrupted
from trainer.sources import DataError, resolve_model
from trainer.stages.context import JobContext
from trainer.storage import StorageError, store_for


class FakeMaxText:
    """Plays the three MaxText commands: writes the files each one would, or fails on request."""

    def __init__(self, layout: RunLayout, fail: dict[str, BaseException] | None = None):
        self.layout, self.fail, self.calls = layout, fail or {}, []

    def __call__(self, command, log_path: Path, **kwargs):
        self.calls.append(command.module)
        for key, error in self.fail.items():
            if key in command.module:
                raise error
        if "to_maxtext" in command.module:
            # to_maxtext writes <base_output_directory>/0/items; with the conversion cache that is a
            # private staging prefix of the cache entry, not the run directory.
            out = next(a.split("=", 1)[1] for a in command.args if a.startswith("base_output_directory="))
            (Path(out) / "0" / "items").mkdir(parents=True, exist_ok=True)
            (Path(out) / "0" / "items" / "data").write_bytes(b"x")
        elif "to_huggingface" in command.module:
            Path(self.layout.export_dir).mkdir(parents=True, exist_ok=True)
            (Path(self.layout.export_dir) / "model.safetensors").write_bytes(b"x")
        elif "train_rl" in command.module:
            params = Path(self.layout.actor_checkpoints) / "3" / "model_params"
            params.mkdir(parents=True, exist_ok=True)
            (params / "data").write_bytes(b"x")


class FakeCheck:
    """Plays the export check the pipeline starts alongside to_huggingface: records when it was started,
    told to go and cancelled, and fails on request as a broken export does."""

    def __init__(self, maxtext: FakeMaxText, fail: bool = False):
        self.maxtext, self.fail, self.log = maxtext, fail, []

    def __call__(self, command, **kwargs):
        self.log.append(("started", command.args, list(self.maxtext.calls)))
        return self

    def follow(self, log_path: Path, *, stdin_line=None, **kwargs):
        self.log.append(("go", stdin_line, Path(self.maxtext.layout.export_dir, "model.safetensors").exists()))
        if self.fail:
            raise StageFailed("trainer.checks.verify_export", 1, log_path, "SafetensorError: incomplete metadata")

    def cancel(self):
        self.log.append(("cancelled",))


def _context(tmp_path, tiny_spec_dict, fake, check: FakeCheck | None = None) -> JobContext:
    data = {**tiny_spec_dict, "dataset": {"name": "openai/gsm8k"}}
    spec = JobSpec.model_validate(data)
    layout = fake.layout
    reporter = EventReporter(store_for(layout.root), layout.events, layout.job_id, stdout=io.StringIO())
    return JobContext(
        spec=spec,
        layout=layout,
        work_dir=Path(layout.root),
        reporter=reporter,
        run_command=fake,
        model=resolve_model(spec),
        start_command=check or FakeCheck(fake),
    )


def _events(layout: RunLayout):
    return [parse_event(line) for line in Path(layout.events).read_text().splitlines()]


@pytest.fixture
def layout(tmp_path) -> RunLayout:
    layout = RunLayout(str(tmp_path / "runs"), "rl-test")
    Path(layout.root).mkdir(parents=True)
    return layout


def test_success_writes_markers_and_a_rerun_skips_every_stage(tmp_path, tiny_spec_dict, layout):
    fake = FakeMaxText(layout)
    ctx = _context(tmp_path, tiny_spec_dict, fake)
    no_verify = ctx.spec.model_copy(update={"export": ctx.spec.export.model_copy(update={"verify": False})})
    ctx = JobContext(**{**ctx.__dict__, "spec": no_verify})  # the fake export has no weights to load
    assert run_pipeline(ctx) == ExitCode.SUCCESS
    for stage in STAGE_ORDER:
        assert Path(layout.stage_marker(stage)).exists()
    assert json.loads(Path(layout.stage_marker(Stage.TRAIN)).read_text())["outputs"]["actor_step"] == 3
    assert json.loads(Path(layout.repro).read_text())["job_id"] == layout.job_id  # written before the stages
    fake.calls.clear()
    assert run_pipeline(ctx) == ExitCode.SUCCESS
    assert fake.calls == []
    skipped = [e for e in _events(layout) if e.type == "stage_finished" and e.skipped]
    assert [e.stage for e in skipped] == list(STAGE_ORDER)


@pytest.mark.parametrize(
    ("stage_module", "error", "code"),
    [
        ("to_maxtext", StageFailed("m", 1, Path("l"), "ValueError: bad shape"), ExitCode.NON_RETRYABLE),
        ("to_maxtext", StageFailed("m", 1, Path("l"), "requests ConnectionError: reset"), ExitCode.RETRYABLE),
        ("to_maxtext", StageFailed("m", 1, Path("l"), "huggingface_hub GatedRepoError 401"), ExitCode.STORAGE),
        ("train_rl", StageFailed("m", -9, Path("l"), ""), ExitCode.RETRYABLE),
        ("train_rl", StageFailed("m", 137, Path("l"), ""), ExitCode.RETRYABLE),
        ("train_rl", StageInterrupted("SIGTERM"), ExitCode.RETRYABLE),
        ("to_huggingface", StorageError("gs://b not writable"), ExitCode.STORAGE),
    ],
)
def test_failures_map_to_the_exit_code_contract(tmp_path, tiny_spec_dict, layout, stage_module, error, code):
    ctx = _context(tmp_path, tiny_spec_dict, FakeMaxText(layout, fail={stage_module: error}))
    assert run_pipeline(ctx) == code
    final = _events(layout)[-1]
    assert final.type == "run_finished" and not final.ok and final.exit_code == code
    failed = final.failed_stage
    assert not Path(layout.stage_marker(failed)).exists()  # the marker only follows success


def test_the_export_check_starts_before_to_huggingface_and_checks_the_finished_export(tmp_path, tiny_spec_dict, layout):
    fake = FakeMaxText(layout)
    check = FakeCheck(fake)
    assert run_pipeline(_context(tmp_path, tiny_spec_dict, fake, check)) == ExitCode.SUCCESS
    (_, args, calls_at_start), go, cancelled = check.log
    assert args == ("--wait", "--engine", "transformers", layout.export_dir) and not any("to_huggingface" in m for m in calls_at_start)
    assert go == ("go", "go", True)  # told to go only once the export was written
    assert cancelled == ("cancelled",)  # a no-op for a check that ran; see StartedStage.cancel
    assert json.loads(Path(layout.stage_marker(Stage.EXPORT)).read_text())["outputs"]["verified"] is True


def test_a_failed_export_check_fails_the_job_for_good(tmp_path, tiny_spec_dict, layout):
    fake = FakeMaxText(layout)
    assert run_pipeline(_context(tmp_path, tiny_spec_dict, fake, FakeCheck(fake, fail=True))) == ExitCode.NON_RETRYABLE
    final = _events(layout)[-1]
    assert final.failed_stage == "export" and "failed the transformers check" in final.message
    assert "SafetensorError" in final.message
    assert not Path(layout.stage_marker(Stage.EXPORT)).exists()


def test_a_failed_to_huggingface_cancels_the_check_without_telling_it_to_go(tmp_path, tiny_spec_dict, layout):
    fake = FakeMaxText(layout, fail={"to_huggingface": StageFailed("m", 1, Path("l"), "ValueError: bad shape")})
    check = FakeCheck(fake)
    assert run_pipeline(_context(tmp_path, tiny_spec_dict, fake, check)) == ExitCode.NON_RETRYABLE
    assert [entry[0] for entry in check.log] == ["started", "cancelled"]


def test_unexpected_errors_are_not_retried():
    assert classify_failure(DataError("bad rows")) == ExitCode.NON_RETRYABLE
    assert classify_failure(RuntimeError("bug")) == ExitCode.NON_RETRYABLE


def test_unwritable_output_is_a_storage_failure(tmp_path, tiny_spec_dict, capsys):
    from tests.trainer.conftest import write_spec
    from trainer.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    spec = write_spec(tmp_path / "s.yaml", {**tiny_spec_dict, "output": str(blocker / "runs")})
    assert main(["run", "--spec", str(spec)]) == ExitCode.STORAGE
    assert "not writable" in capsys.readouterr().err


def test_a_second_job_on_the_same_model_skips_conversion_via_the_cache(tmp_path, tiny_spec_dict, layout):
    first = FakeMaxText(layout)
    ctx = _context(tmp_path, tiny_spec_dict, first)
    no_verify = {"export": ctx.spec.export.model_copy(update={"verify": False})}
    assert run_pipeline(JobContext(**{**ctx.__dict__, "spec": ctx.spec.model_copy(update=no_verify)})) == ExitCode.SUCCESS
    assert any("to_maxtext" in m for m in first.calls)

    other = RunLayout(layout.output, "rl-other")
    Path(other.root).mkdir(parents=True)
    second = FakeMaxText(other)
    ctx2 = _context(tmp_path, tiny_spec_dict, second)
    assert run_pipeline(JobContext(**{**ctx2.__dict__, "spec": ctx2.spec.model_copy(update=no_verify)})) == ExitCode.SUCCESS
    assert not any("to_maxtext" in m for m in second.calls)
    convert = [e for e in _events(other) if e.type == "stage_finished" and e.stage == Stage.CONVERT]
    assert convert[0].skipped and "conversion cache" in convert[0].reason
    checkpoint = json.loads(Path(other.stage_marker(Stage.CONVERT)).read_text())["outputs"]["checkpoint"]
    assert checkpoint.startswith(f"{layout.output}/_cache/maxtext/") and Path(checkpoint, "data").exists()
    manifest = json.loads(Path(other.manifest).read_text())
    assert manifest["references"] == {"converted_checkpoint": checkpoint}


def test_a_gs_runs_scratch_dir_is_removed_and_a_local_run_dir_never(tmp_path, tiny_spec_dict, layout):
    from trainer.pipeline import remove_scratch

    scratch = tmp_path / "rljob-work" / "rl-test"
    (scratch / "data").mkdir(parents=True)
    (scratch / "data" / "train.parquet").write_bytes(b"x" * 100)
    remove_scratch(RunLayout("gs://bucket/runs", "rl-test"), scratch)
    assert not scratch.exists()

    fake = FakeMaxText(layout, fail={"train_rl": StageFailed("train_rl", 1, Path("x.log"), "boom")})
    assert run_pipeline(_context(tmp_path, tiny_spec_dict, fake)) is ExitCode.NON_RETRYABLE
    assert Path(layout.root).is_dir() and Path(layout.events).exists()  # the local run dir is the work dir: kept


@pytest.fixture
def failing_tensorboard_listing(monkeypatch, layout):
    """Every listing of the run's TensorBoard directory fails as an unreachable bucket would."""
    from trainer.storage.local import LocalDirStore

    tensorboard = f"{layout.rl_run}/tensorboard"
    real_list = LocalDirStore.list
    failed = []

    def list_or_fail(self, uri):
        if uri.startswith(tensorboard):
            failed.append(uri)
            raise StorageError(f"listing {uri}: 503 Service Unavailable")
        return real_list(self, uri)

    monkeypatch.setattr(LocalDirStore, "list", list_or_fail)
    return failed


def test_a_failed_final_metrics_read_leaves_a_finished_train_stage_finished(
    tmp_path, tiny_spec_dict, layout, failing_tensorboard_listing, capsys
):
    fake = FakeMaxText(layout)
    ctx = _context(tmp_path, tiny_spec_dict, fake)
    no_verify = ctx.spec.model_copy(update={"export": ctx.spec.export.model_copy(update={"verify": False})})
    assert run_pipeline(JobContext(**{**ctx.__dict__, "spec": no_verify})) == ExitCode.SUCCESS
    assert failing_tensorboard_listing, "the final metrics read never happened"
    outputs = json.loads(Path(layout.stage_marker(Stage.TRAIN)).read_text())["outputs"]
    assert outputs["actor_step"] == 3 and "final read of training metrics failed" in outputs["warning"]
    train_done = [e for e in _events(layout) if e.type == "stage_finished" and e.stage == Stage.TRAIN]
    assert len(train_done) == 1 and not train_done[0].skipped and "503" in train_done[0].reason
    assert "rljob: warning: the final read of training metrics failed" in capsys.readouterr().err
    assert _events(layout)[-1].ok


def test_a_failed_final_metrics_read_does_not_hide_why_training_failed(tmp_path, tiny_spec_dict, layout, failing_tensorboard_listing):
    crash = StageFailed("train_rl", 1, Path("train.log"), "ValueError: bad shape")
    ctx = _context(tmp_path, tiny_spec_dict, FakeMaxText(layout, fail={"train_rl": crash}))
    assert run_pipeline(ctx) == ExitCode.NON_RETRYABLE  # not STORAGE from the metrics read
    assert failing_tensorboard_listing
    final = _events(layout)[-1]
    assert final.exit_code == ExitCode.NON_RETRYABLE and final.failed_stage == Stage.TRAIN
    assert "train_rl exited with 1" in final.message
