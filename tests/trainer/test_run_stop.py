"""The trainer's early stop: the flex-start deadline from RLJOB_MAX_RUN_S, a stop signal or the deadline
reaching a running stage as SIGTERM, and a stop between stages or a stage's own exit 75 ending the run
retryable."""

from __future__ import annotations

import io
import os
import signal
import time
from pathlib import Path

import pytest

from trainer.cli import main
from trainer.contract import ExitCode, JobSpec, RunLayout, parse_event
from trainer.pipeline import classify_failure, run_pipeline
from trainer.progress.event_reporter import EventReporter
from trainer.run_stop import DEFAULT_STOP_MARGIN_S, RunStopConfigError, StopRequest
from trainer.run_stop import stop_deadline as _stop_deadline
from trainer.runner import StageCommand, StageFailed, StageInterrupted, run_stage_command
from trainer.sources import resolve_model
from trainer.stages.context import JobContext
from trainer.storage import store_for


def stop_deadline(environ: dict[str, str], started_at: float) -> float | None:
    return _stop_deadline(started_at, environ.get("RLJOB_MAX_RUN_S"), environ.get("RLJOB_STOP_MARGIN_S"))


def test_no_max_run_means_no_deadline():
    assert stop_deadline({}, started_at=100.0) is None
    assert stop_deadline({"RLJOB_STOP_MARGIN_S": "60"}, started_at=100.0) is None


def test_the_deadline_is_the_max_run_less_the_margin():
    assert stop_deadline({"RLJOB_MAX_RUN_S": "3600"}, started_at=100.0) == 100.0 + 3600 - DEFAULT_STOP_MARGIN_S
    assert stop_deadline({"RLJOB_MAX_RUN_S": "604800", "RLJOB_STOP_MARGIN_S": "900"}, started_at=0.0) == 603900.0


@pytest.mark.parametrize(
    ("environ", "field", "reason"),
    [
        ({"RLJOB_MAX_RUN_S": "7d"}, "RLJOB_MAX_RUN_S", "must be a number of seconds, not '7d'"),
        ({"RLJOB_MAX_RUN_S": "-5"}, "RLJOB_MAX_RUN_S", "finite number of seconds >= 0"),
        ({"RLJOB_MAX_RUN_S": "inf"}, "RLJOB_MAX_RUN_S", "finite number of seconds >= 0"),
        ({"RLJOB_MAX_RUN_S": "600"}, "RLJOB_STOP_MARGIN_S", "leaves no time to run"),  # the default margin
        ({"RLJOB_MAX_RUN_S": "3600", "RLJOB_STOP_MARGIN_S": "x"}, "RLJOB_STOP_MARGIN_S", "number of seconds"),
    ],
)
def test_unusable_settings_are_refused_naming_the_variable(environ, field, reason):
    with pytest.raises(RunStopConfigError) as error:
        stop_deadline(environ, started_at=0.0)
    assert error.value.field == field and reason in error.value.reason


def test_the_cli_refuses_a_bad_max_run_before_touching_anything(tmp_path, tiny_spec_dict, monkeypatch, capsys):
    import yaml

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec_dict))
    monkeypatch.setenv("RLJOB_MAX_RUN_S", "a week")
    assert main(["run", "--spec", str(spec)]) == ExitCode.INVALID_SPEC
    assert "RLJOB_MAX_RUN_S: must be a number of seconds, not 'a week'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_stop_request_says_why_a_signal_or_the_deadline():
    now = [0.0]
    request = StopRequest(deadline=10.0, clock=lambda: now[0])
    assert request.reason() is None
    now[0] = 10.0
    assert request.reason() is not None and "RLJOB_MAX_RUN_S" in request.reason()
    signalled = StopRequest()
    signalled.handle(signal.SIGTERM, None)
    assert signalled.reason() == "signal SIGTERM"


def test_an_installed_stop_request_records_sigterm_and_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    request = StopRequest()
    with request.installed():
        os.kill(os.getpid(), signal.SIGTERM)
        assert request.reason() == "signal SIGTERM"
    assert signal.getsignal(signal.SIGTERM) == before


def _stage_module(tmp_path: Path, body: str) -> Path:
    modules = tmp_path / "mods"
    modules.mkdir(exist_ok=True)
    (modules / "stage.py").write_text(body)
    return modules


def test_the_deadline_stops_a_running_stage_with_sigterm(tmp_path):
    # The stage notes the SIGTERM and exits 75 as train_rl's graceful stop does.
    body = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('got SIGTERM', flush=True), sys.exit(75)))\n"
        "print('running', flush=True)\ntime.sleep(20)\n"
    )
    command = StageCommand("stage", (), {"PYTHONPATH": str(_stage_module(tmp_path, body))}, graceful_stop=True)
    started = time.monotonic()
    with pytest.raises(StageInterrupted, match="the run deadline"):
        run_stage_command(command, tmp_path / "stage.log", stop=StopRequest(deadline=time.monotonic() + 1.0))
    assert time.monotonic() - started < 30
    assert "got SIGTERM" in (tmp_path / "stage.log").read_text()


# A stage with a helper process in its group (as train_rl has MaxText's math-verify pool): on SIGTERM it
# looks whether the helper still runs, as its last step would need it to.
STAGE_WITH_HELPER = """
import signal, subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
def stop(*_):
    time.sleep(0.5)
    print("helper alive" if helper.poll() is None else "helper killed", flush=True)
    helper.kill()
    sys.exit(75)
signal.signal(signal.SIGTERM, stop)
print("running", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize(("graceful", "seen"), [(True, "helper alive"), (False, "helper killed")])
def test_a_graceful_stage_gets_the_stop_alone_and_others_on_their_whole_group(tmp_path, graceful, seen):
    modules = _stage_module(tmp_path, STAGE_WITH_HELPER)
    command = StageCommand("stage", (), {"PYTHONPATH": str(modules)}, graceful_stop=graceful)
    with pytest.raises(StageInterrupted):
        run_stage_command(command, tmp_path / "stage.log", stop=StopRequest(deadline=time.monotonic() + 2.0))
    assert seen in (tmp_path / "stage.log").read_text()


def test_a_stop_requested_before_a_stage_starts_starts_nothing(tmp_path):
    marker = tmp_path / "ran"
    modules = _stage_module(tmp_path, f"open({str(marker)!r}, 'w').write('x')\n")
    stop = StopRequest()
    stop.handle(signal.SIGTERM, None)
    with pytest.raises(StageInterrupted, match="signal SIGTERM before stage started"):
        run_stage_command(StageCommand("stage", (), {"PYTHONPATH": str(modules)}), tmp_path / "stage.log", stop=stop)
    assert not marker.exists()


def test_a_stage_that_ends_before_the_deadline_is_not_interrupted(tmp_path):
    command = StageCommand("stage", (), {"PYTHONPATH": str(_stage_module(tmp_path, "print('done')\n"))})
    run_stage_command(command, tmp_path / "stage.log", stop=StopRequest(deadline=time.monotonic() + 30.0))
    assert "done" in (tmp_path / "stage.log").read_text()


def test_a_stage_that_stopped_itself_with_75_is_retryable():
    assert classify_failure(StageFailed("train_rl", int(ExitCode.RETRYABLE), Path("l"), "")) == ExitCode.RETRYABLE


def test_a_stop_between_stages_runs_no_further_stage_and_exits_retryable(tmp_path, tiny_spec_dict):
    layout = RunLayout(str(tmp_path / "runs"), "rl-test")
    Path(layout.root).mkdir(parents=True)
    spec = JobSpec.model_validate({**tiny_spec_dict, "dataset": {"name": "openai/gsm8k"}})
    calls: list[str] = []
    stop = StopRequest()
    stop.handle(signal.SIGTERM, None)  # arrived after the previous stage, before this one
    reporter = EventReporter(store_for(layout.root), layout.events, layout.job_id, stdout=io.StringIO())
    ctx = JobContext(
        spec=spec,
        layout=layout,
        work_dir=Path(layout.root),
        reporter=reporter,
        run_command=lambda command, log, **kw: calls.append(command.module),
        model=resolve_model(spec),
        stop=stop,
    )
    assert run_pipeline(ctx) == ExitCode.RETRYABLE
    assert calls == []
    final = [parse_event(line) for line in Path(layout.events).read_text().splitlines()][-1]
    assert final.type == "run_finished" and final.exit_code == ExitCode.RETRYABLE
    assert "stopped by signal SIGTERM before the convert stage" in final.message
