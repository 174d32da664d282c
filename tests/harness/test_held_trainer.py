"""harness/held_trainer.py: the stand-in workload of the dashboard's browser tests and the running-job bench exits
when told to, and also when its run directory is removed (a bench's temporary directory, deleted before the poll saw
the exit code: it lingered 30 minutes before)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HELD_TRAINER = Path(__file__).resolve().parents[2] / "harness" / "held_trainer.py"


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"output": str(tmp_path / "runs")}))
    run_dir = tmp_path / "runs" / "rl-held"
    run_dir.mkdir(parents=True)
    held = subprocess.Popen(
        [sys.executable, str(HELD_TRAINER), "run", "--spec", str(spec), "--job-id", "rl-held"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while held.stdout is not None and "waiting for" not in held.stdout.readline() and time.monotonic() < deadline:
        pass
    return held, run_dir


def test_it_exits_with_the_code_written_for_it(tmp_path):
    held, run_dir = _start(tmp_path)
    try:
        (run_dir / "exit_code").write_text("3")
        assert held.wait(timeout=10) == 3
    finally:
        held.kill()


def test_it_waits_for_the_code_in_a_file_created_but_not_yet_written(tmp_path):
    """write_text opens (creating the file) and then writes: a poll between the two reads an empty file, which is no
    code yet (CI once saw the held trainer exit 0 there, where 3 was being written)."""
    held, run_dir = _start(tmp_path)
    try:
        (run_dir / "exit_code").touch()
        time.sleep(0.5)  # polled at least once with the file empty
        assert held.poll() is None
        (run_dir / "exit_code").write_text("3")
        assert held.wait(timeout=10) == 3
    finally:
        held.kill()


def test_it_exits_when_its_run_directory_is_removed(tmp_path):
    held, run_dir = _start(tmp_path)
    try:
        time.sleep(0.3)  # polled at least once with the directory there
        shutil.rmtree(run_dir)
        assert held.wait(timeout=10) == 1
        assert "run directory was removed" in (held.stderr.read() if held.stderr else "")
    finally:
        held.kill()
