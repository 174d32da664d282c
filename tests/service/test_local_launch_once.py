"""A job id gets one trainer however many local launchers on its state directory are asked to launch it
(replicas sharing a machine, a deposed leader that has not noticed): the launch is idempotent per job
id, as a Kubernetes Job name is."""

from __future__ import annotations

import threading
from pathlib import Path

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
