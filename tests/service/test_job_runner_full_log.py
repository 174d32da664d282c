"""A trainer that finishes is not failed because its log cannot be written: the local launcher's runner
(service/adapters/local/job_runner.py) copies the trainer's output into the log, and a log on a full
disk (here /dev/full, which fails every write with ENOSPC) costs log lines, not the exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from service.adapters.local import job_runner

# Writes plenty, then exits 0; writing that output straight to a full disk fails its flush (exit 120).
TRAINER = "import sys\nfor i in range(2000):\n    print('step', i, 'x' * 200)\nsys.exit(0)\n"


def _run(tmp_path: Path, log: str) -> tuple[int, dict[str, object]]:
    exit_file = tmp_path / "exit.json"
    with open(log, "wb") as out:
        done = subprocess.run([sys.executable, job_runner.__file__, "--job-id", "rl-fulllogfull0", "--exit-file", str(exit_file),
                               "--", sys.executable, "-c", TRAINER], input=job_runner.START_LINE, stdout=out,
                              stderr=subprocess.STDOUT, timeout=60)  # fmt: skip
    return done.returncode, json.loads(exit_file.read_text())


def test_a_full_log_disk_loses_lines_not_the_trainers_exit_code(tmp_path: Path) -> None:
    returncode, recorded = _run(tmp_path, "/dev/full")
    assert returncode == 0 and recorded["exit_code"] == 0


def test_the_log_still_gets_every_line_when_it_can_be_written(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    returncode, recorded = _run(tmp_path, str(log))
    lines = log.read_text().splitlines()
    assert returncode == 0 and recorded["exit_code"] == 0
    assert len(lines) == 2000 and lines[0].startswith("step 0 ") and lines[-1].startswith("step 1999 ")


def test_without_the_runner_the_same_trainer_fails_on_a_full_disk() -> None:
    # The control: the trainer writing to the full disk itself exits with an error.
    with open("/dev/full", "wb") as out:
        done = subprocess.run([sys.executable, "-c", TRAINER], stdout=out, stderr=subprocess.STDOUT, timeout=60)
    assert done.returncode != 0
