"""Both ways the pod runner isolates a container (harness/podrun/pods/process.py) show it the same container:
Linux namespaces (ns_exec.py, the default where this machine allows them) and proot (the fallback)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from harness.podrun.pods.process import ISOLATIONS

from .conftest import log, make_pod, python, state, wait_until
from .test_pod_runner import GRACEFUL

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=ISOLATIONS)
def isolated(request, runs, monkeypatch):
    monkeypatch.setenv("RLJOB_PODRUN_ISOLATION", request.param)
    return runs


def test_the_container_sees_its_user_workdir_venv_and_volumes_and_the_host_gains_nothing(isolated, request):
    isolation = request.node.callspec.params["isolated"]
    tag = uuid.uuid4().hex[:8]
    # Mount paths this machine lacks, one under a host directory (/etc) and one at the top level.
    conf, scratch = f"/etc/podrun-{tag}", f"/podrun-{tag}/deep"
    isolated.add("ConfigMap", "cfg", data={"level": "debug"})
    probe = (
        "import os, sys, time\n"
        f"print(os.getuid(), os.getgid(), os.getcwd(), sys.prefix, open('{conf}/level').read())\n"
        f"open('{scratch}/written', 'w').write('x')\n"
        "print('ready', flush=True); time.sleep(2)\n"
    )
    pod = make_pod(
        python(probe, volumeMounts=[{"name": "conf", "mountPath": conf}, {"name": "s", "mountPath": scratch}]),
        volumes=[{"name": "conf", "configMap": {"name": "cfg"}}, {"name": "s", "emptyDir": {}}],
    )
    runner = isolated.start(pod)
    wait_until(lambda: "ready" in log(runner), f"the container under {isolation}")
    if isolation == "namespaces":  # proot makes a placeholder on the host while it runs and removes it at exit
        assert not Path(conf).exists() and not Path(f"/podrun-{tag}").exists()
    assert runner.wait(20) and state(runner)["terminated"]["exitCode"] == 0, log(runner)
    assert log(runner).split()[:5] == ["1000", "1000", "/home/rljob", "/opt/venv", "debug"]  # the trainer image's
    assert not Path(conf).exists() and not Path(f"/podrun-{tag}").exists()


def test_pid_1_gets_sigterm_and_everything_sigkill_after_the_grace_period(isolated):
    graceful = isolated.start(make_pod(python(GRACEFUL, "7")))
    wait_until(lambda: "up" in log(graceful), "started")
    graceful.terminate(grace_s=5)
    assert graceful.wait(10) and state(graceful)["terminated"]["exitCode"] == 7 and "SIGTERM" in log(graceful)
    # A child that ignores SIGTERM in a PID 1 that ignores it too: both go at the end of the grace period.
    stubborn_tree = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
        "signal.SIG_IGN); time.sleep(60)']); print('up', flush=True); time.sleep(60)"
    )
    stubborn = isolated.start(make_pod(python(stubborn_tree)))
    wait_until(lambda: "up" in log(stubborn), "started")
    stubborn.terminate(grace_s=0.5)
    assert stubborn.wait(10) and state(stubborn)["terminated"]["exitCode"] == 137


def test_a_read_only_root_refuses_a_python_write(isolated):
    bad = isolated.run(
        make_pod(python(f"open('/var/log/podrun-{uuid.uuid4().hex[:8]}', 'w')", securityContext={"readOnlyRootFilesystem": True}))
    )
    assert state(bad)["terminated"]["exitCode"] == 1 and "Read-only file system" in log(bad)
