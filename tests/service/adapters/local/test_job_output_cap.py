"""A job's output.log is bounded as it is written: the local launcher's runner (service/adapters/local/job_runner.py)
cuts each line the trainer prints at LOG_LINE_BYTES and stops at the job's LOG_BUDGET_BYTES, with one marker line,
and the bytes it left out in the exit record and the job's status. Before the cap, one 64 MiB line wrote 67,109,350
bytes into the service's state directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.adapters.local import job_runner
from service.adapters.local.job_runner import LOG_LINE_BYTES, MARKER_ROOM_BYTES, OutputCap
from service.domain.records.ports import ObservedState
from tests.service.conftest import MakeLocalLauncher
from tests.service.service_helpers import spec_body, wait_until
from trainer.contract import JobSpec

MIB = 1024 * 1024
BUDGET_MARKER = "job_runner: output.log reached this job's"
# One 64 MiB line (the issue's), a line after it, then the exit code the job must still get.
ONE_HUGE_LINE = "import sys\nsys.stdout.write('x' * (64 * 1024 * 1024) + '\\nafter\\n')\nsys.exit(3)\n"


def _admit_all(cap: OutputCap, *chunks: bytes) -> bytes:
    return b"".join(cap.admit(chunk) for chunk in chunks) + cap.finish()


def test_a_long_line_keeps_its_start_and_names_what_was_cut_across_chunks() -> None:
    cap = OutputCap(budget_bytes=MIB, line_bytes=10)
    written = _admit_all(cap, b"short\n" + b"x" * 40, b"y" * 60 + b"\nnext\n", b"z" * 25)
    lines = written.decode().splitlines()
    assert lines[0] == "short" and lines[2] == "next"
    assert lines[1].startswith("x" * 10 + " [... 90 more bytes of this line dropped")
    assert lines[3].startswith("z" * 10 + " [... 15 more bytes")  # an unfinished last line is cut and named too
    assert cap.dropped == 90 + 15 and not cap.spent


def test_past_the_budget_one_marker_line_and_the_rest_only_counted() -> None:
    budget = MARKER_ROOM_BYTES + 100
    cap = OutputCap(budget_bytes=budget, line_bytes=1000)
    line = b"0123456789" * 3 + b"\n"  # 31 bytes: three fit in the 100 bytes left
    written = _admit_all(cap, line * 2, line * 2, line * 50)
    lines = written.decode().splitlines()
    assert lines[:3] == [line.decode().strip()] * 3
    assert len(lines) == 4 and lines[3].startswith(BUDGET_MARKER)  # said once, however much more comes
    assert len(written) <= budget and cap.spent and cap.dropped == 51 * len(line)


def test_an_earlier_attempts_output_counts_against_the_jobs_budget() -> None:
    cap = OutputCap(budget_bytes=MARKER_ROOM_BYTES + 100, line_bytes=1000, already_written=90)
    written = _admit_all(cap, b"a" * 20 + b"\n")
    assert written.decode().startswith(BUDGET_MARKER) and cap.dropped == 21


def _run_runner(tmp_path: Path, trainer: str, *options: str) -> tuple[int, Path, dict[str, object]]:
    log, exit_file = tmp_path / "output.log", tmp_path / "exit.json"
    with log.open("ab") as out:
        done = subprocess.run(
            [sys.executable, job_runner.__file__, "--job-id", "rl-outputcap000", "--exit-file", str(exit_file), *options]
            + ["--", sys.executable, "-c", trainer],
            input=job_runner.START_LINE,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
    return done.returncode, log, json.loads(exit_file.read_text())


def test_the_runner_writes_a_64_mib_line_as_its_first_16_kib(tmp_path: Path) -> None:
    returncode, log, recorded = _run_runner(tmp_path, ONE_HUGE_LINE)
    lines = log.read_bytes().splitlines()
    assert returncode == 3 and recorded["exit_code"] == 3
    assert log.stat().st_size < 2 * LOG_LINE_BYTES  # was 67,109,350 bytes
    assert lines[0].startswith(b"x" * LOG_LINE_BYTES + b" [... ") and lines[1] == b"after"
    assert recorded["output_dropped_bytes"] == 64 * MIB - LOG_LINE_BYTES


def test_the_runner_stops_the_log_at_the_jobs_budget_across_attempts(tmp_path: Path) -> None:
    chatty = "for i in range(20000):\n    print('step', i, 'y' * 60)\n"  # about 1.4 MB
    budget = "--log-budget-bytes=200000"
    _, log, recorded = _run_runner(tmp_path, chatty, budget)
    first = log.read_text().splitlines()
    assert 200000 - MARKER_ROOM_BYTES - 100 < log.stat().st_size <= 200000
    assert [n for n, line in enumerate(first) if line.startswith(BUDGET_MARKER)] == [len(first) - 1]
    assert int(recorded["output_dropped_bytes"]) > 1_000_000  # type: ignore[call-overload]
    # A second attempt appends to the same log: the budget is the job's, so it only says it is spent.
    _, log, recorded = _run_runner(tmp_path, chatty, budget)
    second = log.read_text().splitlines()[len(first) :]
    assert len(second) == 1 and second[0].startswith(BUDGET_MARKER) and log.stat().st_size <= 200000 + 300


@pytest.fixture
def fake_trainer_command() -> list[str]:
    # The launcher appends `run --spec ... --job-id ...`: `python -c` leaves them in sys.argv.
    return [sys.executable, "-c", ONE_HUGE_LINE]


def test_the_job_status_says_how_much_output_was_left_out(make_local_launcher: MakeLocalLauncher, tmp_path: Path) -> None:
    launcher, rec = make_local_launcher()
    job_id = "rl-outputcap001"
    launcher.launch(job_id, JobSpec.model_validate(spec_body(tmp_path)))
    wait_until(lambda: ObservedState.FAILED in rec.states(job_id), timeout_s=60)
    failed = rec.last(job_id)
    assert failed is not None and failed.exit_code == 3
    assert f"{64 * MIB - LOG_LINE_BYTES:,} bytes of its output were left out of output.log" in failed.message
    log = [line for line in launcher.logs(job_id) if line is not None]  # no None without follow
    assert log[-1] == "after" and all(len(line) < 2 * LOG_LINE_BYTES for line in log)
    assert os.path.getsize(tmp_path / "jobs" / job_id / "output.log") < 2 * LOG_LINE_BYTES + 1024
