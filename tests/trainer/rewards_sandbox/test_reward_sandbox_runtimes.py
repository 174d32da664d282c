"""The reward sandbox where users run it: under gVisor and under containerd's RuntimeDefault seccomp profile, as root
and as a non-root user (harness/runtime_emulation.py emulates each; bench/results/reward_sandbox_runtimes.json holds
the same check on the TPU machine's real gVisor). Each case runs `trainer sandbox-check`'s child
(trainer/rewards_sandbox/self_check.py: the trainer's real pool over rewards that try what a hostile reward would) in
a process of the emulated runtime, and what the rewards got is judged from outside the worker: the secret in the
trainer's environment, a loopback listener, a bystander process of the same user, a directory the trainer may write.

Before the confinement layers (seccomp, capabilities, Landlock, the SIGCHLD keeper), every case failed here: under
gVisor the worker died on pidfd_open, and under RuntimeDefault the worker read the trainer's environment, opened
sockets through ctypes and a subprocess, killed the bystander and wrote outside its directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from trainer.rewards_sandbox import reach_probes
from trainer.rewards_sandbox.worker_user import WORKER_UID

REPO = Path(__file__).resolve().parents[3]
# A new secret for each probe: the cases run concurrently on pytest-xdist's workers, two of them as the same uid
# 65534 outside any PID namespace, and with one secret a reward could read the other case's starting processes
# (same user, still dumpable), which is not the trainer it runs under. A pod has only its own processes to see.
SECRET_PREFIX = "rljob-test-secret-in-the-trainers-environment-"
NOBODY = 65534
CASES = [
    pytest.param(("runtime-default", "root"), id="runtime-default-root"),
    pytest.param(("runtime-default", "user"), id="runtime-default-user"),
    pytest.param(("gvisor", "root"), id="gvisor-root"),
    pytest.param(("gvisor", "user"), id="gvisor-user"),
]


def run_probe(runtime: str, who: str, outside: Path) -> dict:
    command = [sys.executable, "-m", "harness.runtime_emulation", "--runtime", runtime]
    if who == "root" and os.getuid() != 0:
        pytest.skip("the root cases run only when the tests run as root (a non-root user cannot become root)")
    if who == "user" and os.getuid() == 0:
        command += ["--uid", str(NOBODY)]
    secret = SECRET_PREFIX + uuid.uuid4().hex
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "PYTHONPATH": str(REPO), "RLJOB_SANDBOX_CHECK_SECRET": secret}
    command += ["--", sys.executable, "-m", "trainer.rewards_sandbox.self_check", "--outside-dir", str(outside)]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module", params=CASES)
def probed(request):
    runtime, who = request.param
    # Not under pytest's basetemp, which only its owner may enter; the trainer's own (the non-root user's), as a run
    # directory is, so that only the sandbox can stop the write.
    with tempfile.TemporaryDirectory(prefix=f"rljob-outside-{runtime}-{who}-") as outside:
        os.chmod(outside, 0o755)  # enterable by anyone: what refuses a reward must be the files' own modes
        if who == "user" and os.getuid() == 0:
            os.chown(outside, NOBODY, NOBODY)
        result = run_probe(runtime, who, Path(outside))
    result["case"] = (runtime, who)
    return result


def outcome(result: dict, name: str) -> tuple[str, list | None, str]:
    call = result["results"][name]
    return call["outcome"], call["scores"], call["error"] or ""


def test_the_case_runs_as_it_says(probed):
    runtime, who = probed["case"]
    assert probed["secret_set"]
    assert (probed["uid"] == 0) == (who == "root")
    refused = probed["isolation"]["refused"]
    assert "Function not implemented" in refused if runtime == "gvisor" else "Operation not permitted" in refused
    assert probed["isolation"]["namespaces"] == ""  # neither runtime grants one: the other layers have to hold


def test_a_reward_call_runs_and_is_scored(probed):
    assert outcome(probed, "score") == ("ok", [3.0], "")
    assert probed["workers_replaced"] == 0  # no call failed because a worker died


def test_no_process_environment_holding_the_trainers_secret_can_be_read(probed):
    assert outcome(probed, "environ_secrets") == ("ok", [0.0], "")


def test_no_internet_socket_opens_by_any_route_and_nothing_reaches_the_listener(probed):
    for route in ("socket_reimported", "socket_ctypes", "socket_subprocess"):
        result, scores, error = outcome(probed, route)
        assert result == "error" and "PermissionError" in error, (route, result, scores, error)
    assert probed["connections_reached_listener"] == 0
    assert probed["isolation"]["network_isolated"] and probed["isolation"]["seccomp"]


def test_no_signal_reaches_a_process_outside_the_worker(probed):
    assert outcome(probed, "kill_bystander")[0] == "error" and probed["bystander_alive"]
    assert outcome(probed, "signal_trainer")[0] == "error"
    assert probed["isolation"]["signals_confined"]


@pytest.mark.parametrize("route", reach_probes.SIGNAL_ROUTES + reach_probes.PROCESS_ROUTES)
def test_no_route_reaches_a_decoy_process(probed, route):
    """Each route to another process (signals, SIGIO, rlimits, priority, scheduling, I/O class, memory, pidfds), tried
    by a reward against a decoy of the same user that holds no capabilities: refused, and the decoy alive."""
    tried = probed["routes"][route]
    assert tried["held"] and tried["decoy_alive"], (route, tried)


def test_the_workers_own_report_of_other_processes_comes_from_routes_it_tried(probed):
    isolation = probed["isolation"]
    assert isolation["routes_tried"] == len(reach_probes.SIGNAL_ROUTES + reach_probes.PROCESS_ROUTES)
    assert isolation["routes_not_held"] == []
    assert isolation["signals_confined"] and isolation["processes_confined"]


def test_the_trainers_open_files_and_memory_cannot_be_opened(probed):
    assert outcome(probed, "trainer_files") == ("ok", [0.0], "")


def test_the_trainers_files_are_neither_written_nor_read_where_it_is_root_and_reported_where_not(probed):
    """As root (the GKE image's user, and gVisor's) the workers run as another uid: the kernel's own permissions refuse
    a reward the trainer's 0644 file (append), its directory (a new file) and its 0600 file (read), with or without
    Landlock. Judged from outside the worker, and the worker's own report comes from the same tries. A trainer that
    is not root cannot change its workers' uid: see `_check_a_user_trainers_files`."""
    runtime, who = probed["case"]
    if who == "user":
        _check_a_user_trainers_files(probed)
        return
    isolation = probed["isolation"]
    assert isolation["worker_uid"] == isolation["worker_gid"] == WORKER_UID and isolation["worker_groups"] == []
    assert outcome(probed, "write_outside")[0] == "error" and not probed["outside_file_written"]
    result, _, error = outcome(probed, "append_trainer_file")
    assert result == "error" and "PermissionError" in error and not probed["trainer_file_appended"]
    result, _, error = outcome(probed, "read_trainer_file")
    assert result == "error" and "PermissionError" in error
    assert isolation["writes_confined"] and isolation["reads_confined"]
    assert set(isolation["file_routes"].values()) == {"EACCES"}
    assert isolation["filesystem_confined"] is (runtime != "gvisor")  # under gVisor the uid alone held


def _check_a_user_trainers_files(probed: dict) -> None:
    """Its workers keep its uid: its own 0600 file is read on every runtime (Landlock confines writes, not reads), and
    without Landlock its files are written; the worker's report says so."""
    runtime, _ = probed["case"]
    isolation = probed["isolation"]
    assert isolation["worker_uid"] == NOBODY and "not root" in isolation["uid_refused"]
    assert outcome(probed, "read_trainer_file") == ("ok", [float(len("the trainer's\n"))], "")
    assert not isolation["reads_confined"]
    if runtime == "gvisor":  # no Landlock there: the gap is reported (docs/reward-sandbox.md says what closes it)
        assert not isolation["filesystem_confined"] and not isolation["writes_confined"]
        assert "Function not implemented" in isolation["landlock_refused"]
        assert outcome(probed, "append_trainer_file")[0] == "ok" and probed["trainer_file_appended"]
    else:
        assert isolation["filesystem_confined"] and isolation["writes_confined"]
        assert outcome(probed, "write_outside")[0] == "error" and not probed["outside_file_written"]
        assert outcome(probed, "append_trainer_file")[0] == "error" and not probed["trainer_file_appended"]


@pytest.mark.parametrize("who", ["user", "root"])
def test_the_shipped_check_says_what_held_under_gvisor_and_exits_0_when_every_required_guarantee_did(who):
    """`python -m trainer sandbox-check`, the deploy guide's one-pod check, as an operator runs it in a sandboxed pod:
    as a user, the trainer's files are the workers' too (said, not held); as root, the workers' uid keeps them out."""
    if who == "root" and os.getuid() != 0:
        pytest.skip("the root case runs only when the tests run as root")
    command = [sys.executable, "-m", "harness.runtime_emulation", "--runtime", "gvisor"]
    command += ["--uid", str(NOBODY)] if who == "user" and os.getuid() == 0 else []
    command += ["--", sys.executable, "-m", "trainer", "sandbox-check"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "no network (seccomp refuses" in lines[0]
    assert "  held: no internet socket opens (Python, ctypes, a subprocess)" in lines
    files = ("writes stay in the worker's directory", "the trainer's 0600 files stay unread")
    if who == "user":
        assert "FILESYSTEM WRITES NOT CONFINED (Landlock is not available" in lines[0] and "not root" in lines[0]
        assert "READS THE TRAINER'S PRIVATE FILES" in lines[0]
        assert all(f"  not held: {what} (where the runtime allows)" in lines for what in files)
    else:
        assert f"no write outside its own directory (uid {WORKER_UID}, not the trainer's 0; tried:" in lines[0]
        assert f"no read of the trainer's private (0600) files (uid {WORKER_UID})" in lines[0]
        assert all(f"  held: {what} (where the runtime allows)" in lines for what in files)


def test_the_check_exits_1_naming_what_did_not_hold(monkeypatch, capsys):
    from trainer import cli
    from trainer.rewards_sandbox import self_check

    def leaky_check() -> dict:
        result = {"isolation": {}, "outside_file_written": False, "connections_reached_listener": 1, "bystander_alive": True}
        result["trainer_file_appended"] = False
        result["workers_replaced"] = 0
        result["results"] = {name: {"outcome": "ok", "scores": [0.0]} for name in self_check.NAMES}
        result["routes"] = {route: {"held": True} for route in reach_probes.SIGNAL_ROUTES + reach_probes.PROCESS_ROUTES}
        result["routes"]["sigio_fcntl_setown"] = result["routes"]["prlimit64"] = {"held": False}
        result["verdict"] = self_check.verdict(result)
        return result

    monkeypatch.setattr(self_check, "check", leaky_check)
    assert cli.main(["sandbox-check"]) == 1
    out = capsys.readouterr().out
    assert "  NOT HELD: no internet socket opens (Python, ctypes, a subprocess)" in out
    assert "  NOT HELD: no signal leaves the worker" in out and "  held: a reward call is scored" in out
    assert "  NOT HELD: no other process is limited, reniced, rescheduled, moved or opened" in out
