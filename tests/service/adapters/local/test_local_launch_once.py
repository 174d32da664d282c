"""A job id gets one trainer however many local launchers on its state directory are asked to launch it
(replicas sharing a machine, a deposed leader that has not noticed): the launch is idempotent per job
id, as a Kubernetes Job name is."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from service.adapters.local import launcher as launcher_module
from service.adapters.local import procs
from tests.service.conftest import MakeLocalLauncher
from tests.service.service_helpers import spec_body, wait_until
from trainer.contract import JobSpec, RunLayout

JOB_ID = "rl-launchedonce"


def test_two_launchers_asked_at_once_start_one_runner(make_local_launcher: MakeLocalLauncher, tmp_path: Path) -> None:
    spec = JobSpec.model_validate(spec_body(tmp_path, labels={"fake-gate": "true"}))
    (first, _), (second, _) = make_local_launcher(), make_local_launcher()
    start = threading.Barrier(2)
    results = {}

    def launch(name: str, launcher) -> None:  # type: ignore[no-untyped-def]
        start.wait()
        results[name] = launcher.launch(JOB_ID, spec)

    threads = [threading.Thread(target=launch, args=(n, launcher)) for n, launcher in (("a", first), ("b", second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    log = tmp_path / "jobs" / JOB_ID / "output.log"
    wait_until(lambda: "waiting for the gate file" in log.read_text(), timeout_s=30)
    assert log.read_text().count("=== rljob: starting") == 1  # one runner was started
    assert results["a"].object_name == results["b"].object_name  # both name that one (pid:N)
    pid = int(results["a"].object_name.removeprefix("pid:"))
    assert procs.is_alive(pid)
    # Asked again later, a launcher that did not start it finds it rather than starting another.
    assert second.launch(JOB_ID, spec).object_name == results["a"].object_name
    assert log.read_text().count("=== rljob: starting") == 1
    (Path(RunLayout(str(tmp_path / "runs"), JOB_ID).root) / "gate").touch()


def test_a_runner_still_in_exec_is_not_started_again(
    make_local_launcher: MakeLocalLauncher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Popen returns before the kernel has finished the runner's exec, and until it has, the runner's
    /proc/<pid>/cmdline reads empty (milliseconds on a loaded machine; it started two runners in CI, the test
    above). Here that moment lasts a second, so another launcher asked at once always looks inside it."""
    spec = JobSpec.model_validate(spec_body(tmp_path, labels={"fake-gate": "true"}))
    (first, _), (second, _) = make_local_launcher(), make_local_launcher()
    exec_done_at: dict[int, float] = {}
    real_popen, real_cmdline = subprocess.Popen, psutil.Process.cmdline

    def popen(*args, **kwargs):  # type: ignore[no-untyped-def]
        process = real_popen(*args, **kwargs)
        exec_done_at[process.pid] = time.monotonic() + 1.0
        return process

    def cmdline(self: psutil.Process) -> list[str]:
        return [] if time.monotonic() < exec_done_at.get(self.pid, 0.0) else real_cmdline(self)

    monkeypatch.setattr(launcher_module.subprocess, "Popen", popen)
    monkeypatch.setattr(psutil.Process, "cmdline", cmdline)
    started = first.launch(JOB_ID, spec)
    assert second.launch(JOB_ID, spec).object_name == started.object_name
    log = tmp_path / "jobs" / JOB_ID / "output.log"
    wait_until(lambda: "waiting for the gate file" in log.read_text(), timeout_s=30)
    assert log.read_text().count("=== rljob: starting") == 1
    (Path(RunLayout(str(tmp_path / "runs"), JOB_ID).root) / "gate").touch()


def test_a_jobs_directory_is_its_users_alone(tmp_path):
    """The job's spec, log and lock: mode 0700, so neither another user of the machine nor a root trainer's reward
    worker (another uid: trainer/rewards_sandbox/worker_user.py) reads them."""
    from service.adapters.local.local_launch_lock import job_dir_lock

    with job_dir_lock(tmp_path / "rl-aaaaaaaaaaaa"):
        pass
    assert (tmp_path / "rl-aaaaaaaaaaaa").stat().st_mode & 0o777 == 0o700
