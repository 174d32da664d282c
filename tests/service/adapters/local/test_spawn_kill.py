"""A service SIGKILLed between starting a job's runner and recording it (process.json) leaves no trainer
running that nothing knows about: the runner starts the trainer only once the launcher has recorded it.

Otherwise the restarted service finds no record, relaunches the job (it is LAUNCHING), and two trainers
run the same job in the same run directory. The window is short (a /proc read and a file write after
Popen returns), so the child process here SIGKILLs itself exactly there, as a real crash could.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.adapters.local import LocalProcessLauncher, procs
from tests.service.service_helpers import spec_body, wait_until
from trainer.contract import JobSpec

REPO = Path(__file__).resolve().parents[4]
JOB_ID = "rl-spawnkill0001"
pytestmark = pytest.mark.timeout(120)

# Launches one job and dies (SIGKILL) right after Popen returned, before process.json is written.
LAUNCH_AND_DIE = """
import os, signal, sys
from pathlib import Path
from service.adapters.local import LocalProcessLauncher, procs
from trainer.contract import JobSpec

state_dir, spec_file, job_id, *trainer = sys.argv[1:]
procs.start_ticks = lambda pid: os.kill(os.getpid(), signal.SIGKILL)
LocalProcessLauncher(Path(state_dir), trainer).launch(job_id, JobSpec.model_validate_json(Path(spec_file).read_text()))
sys.exit(3)  # not killed: the launcher no longer reads the start time where this test expects
"""


def _runners(job_id: str) -> list[int]:
    """Live runner processes of the job (the wrapper the launcher starts), found through /proc."""
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and procs.is_our_process(int(p.name), marker="job_runner.py", job_id=job_id, ticks=None)
    ]


@pytest.fixture
def job_processes_stopped() -> Iterator[None]:
    yield
    for pid in _runners(JOB_ID):  # the runners lead their own process groups: the trainers go with them
        procs.signal_group(pid, signal.SIGKILL)


def test_a_launch_killed_before_its_record_starts_no_trainer_behind_the_relaunch(
    tmp_path: Path, fake_trainer_command: list[str], job_processes_stopped: None
) -> None:
    spec = JobSpec.model_validate(spec_body(tmp_path, labels={"fake-gate": "true"}))
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    died = subprocess.run(
        [sys.executable, "-c", LAUNCH_AND_DIE, str(tmp_path / "jobs"), str(spec_file), JOB_ID, *fake_trainer_command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert died.returncode == -9, f"the launcher was not killed after Popen (exit {died.returncode}): {died.stderr[-2000:]}"
    assert not (tmp_path / "jobs" / JOB_ID / "process.json").exists()

    # The restarted service: no record, so recovery relaunches the job.
    launcher = LocalProcessLauncher(tmp_path / "jobs", fake_trainer_command, poll_interval_s=0.05)
    relaunched = launcher.launch(JOB_ID, spec)
    starts = tmp_path / "runs" / JOB_ID / "starts"
    wait_until(lambda: starts.exists() and len(starts.read_text().splitlines()) >= 1)
    # Either the runner the dead service started is gone, or its trainer has started too (the bug).
    wait_until(lambda: _runners(JOB_ID) == [int(relaunched.object_name.split(":")[1])] or len(starts.read_text().splitlines()) > 1)
    assert len(starts.read_text().splitlines()) == 1, "two trainers run the job: one no record names"


def test_a_process_start_is_the_same_however_the_boot_time_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel keeps the boot time in whole seconds derived from the wall clock, so two readings may differ by
    one; a runner's start must not, or a second launcher takes it for another process and starts a second runner."""
    import psutil

    pid = os.getpid()
    before = procs.start_ticks(pid)
    real_boot_time = psutil.boot_time()
    monkeypatch.setattr(psutil, "boot_time", lambda: real_boot_time + 1.0)
    assert procs.start_ticks(pid) == before
