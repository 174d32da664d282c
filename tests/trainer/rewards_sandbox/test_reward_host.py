"""Reward workers in a container of their own (trainer/rewards_sandbox/host.py): the trainer's pool reaches them
through the host's unix socket, and the host runs them under another user with none of the trainer's files. Here
the host runs as the pod's reward container would under gVisor (harness/runtime_emulation.py: no Landlock, no
namespaces; uid 65534 when the tests run as root), the pool in this process, as the trainer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainer.rewards_sandbox.pool import RewardLoadFailed, RewardSandboxPool, SandboxLimits
from trainer.rewards_sandbox.stats import CallOutcome

REPO = Path(__file__).resolve().parents[3]
REWARDS = """
import os, time

def length(prompts, completions, **kwargs):
    return [float(len(c)) for c in completions]

def where(prompts, completions, **kwargs):
    return [float(os.getuid()), float(os.getppid())]

def write_to(prompts, completions, path, **kwargs):
    with open(path, "w") as f:
        f.write("a reward wrote here")
    return [1.0] * len(completions)

def sleep_long(prompts, completions, **kwargs):
    time.sleep(60)
"""
NAMES = ["length", "where", "write_to", "sleep_long"]
BATCH = {"prompts": ["p", "q"], "completions": ["abc", "de"]}


@pytest.fixture
def host() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The reward container's server on a socket in a directory both sides reach (the pod's shared emptyDir)."""
    shared = tempfile.mkdtemp(prefix="rljob-reward-share-")
    os.chmod(shared, 0o777)
    socket_path = os.path.join(shared, "host.sock")
    command = [sys.executable, "-m", "harness.runtime_emulation", "--runtime", "gvisor"]
    command += ["--uid", "65534"] if os.getuid() == 0 else []
    command += ["--", sys.executable, "-m", "trainer.rewards_sandbox.host", "--socket", socket_path]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    yield socket_path, process
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    subprocess.run(["rm", "-rf", shared], check=False)


@pytest.fixture
def pool(tmp_path, host) -> Iterator[RewardSandboxPool]:
    path = tmp_path / "rewards.py"
    path.write_text(REWARDS)
    sandbox = RewardSandboxPool(str(path), NAMES, SandboxLimits(timeout_s=2.0, start_timeout_s=30), size=1, host=host[0])
    sandbox.start()
    yield sandbox
    sandbox.close()


def test_calls_are_scored_by_a_worker_of_the_reward_container_not_of_the_trainer(pool):
    assert pool.call("length", BATCH).scores == [3.0, 2.0]
    uid, parent = pool.call("where", BATCH).scores or []
    assert parent != os.getpid()  # the host started it, not this process
    assert uid == (65534 if os.getuid() == 0 else os.getuid())
    assert pool.isolation["reward_container"] and pool.isolation["seccomp"] and not pool.isolation["filesystem_confined"]


def test_the_reward_container_receives_what_the_reward_imports(tmp_path, host):
    """The reward container has no mount of the trainer's files: the pool shares the reward's files (the file, its
    Python neighbours and packages: reward_files.py) beside the socket, so a reward that imports them scores there."""
    from tests.trainer.rewards_sandbox.test_reward_files import write_reward

    reward = write_reward(tmp_path / "inputs" / "rewards")
    (tmp_path / "inputs").chmod(0o700)  # as the run's work directory: the container's user could not read it
    sandbox = RewardSandboxPool(str(reward), ["scored"], SandboxLimits(timeout_s=5, start_timeout_s=30), size=1, host=host[0])
    sandbox.start()
    try:
        result = sandbox.call("scored", BATCH)
    finally:
        sandbox.close()
    assert result.scores == [3.0, 3.0], result
    assert sandbox.isolation["reward_container"]


def test_a_reward_cannot_write_the_trainers_files_from_the_reward_container(pool, tmp_path):
    """Under gVisor a worker cannot confine its own writes (no Landlock): in the reward container, the trainer's run
    directory is not there to write (here: another user's directory; in a pod, not mounted at all)."""
    target = tmp_path / "run" / "events.jsonl"
    target.parent.mkdir()
    target.parent.chmod(0o700)
    if os.getuid() != 0:
        pytest.skip("the host runs as this same user when the tests are not root: only a pod's own user separates them")
    result = pool.call("write_to", {**BATCH, "path": str(target)})
    assert result.outcome is CallOutcome.ERROR and "Permission denied" in (result.error or "")
    assert not target.exists()


def _workers_of(host: subprocess.Popen[str]) -> list[int]:
    """The host's worker processes (keepers and servers): its descendants."""
    import psutil

    try:
        return [child.pid for child in psutil.Process(host.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_a_call_past_its_deadline_ends_its_worker_in_the_reward_container(pool, host):
    before = set(_workers_of(host[1]))
    assert before, "no worker in the reward container"
    done: list = []
    caller = threading.Thread(target=lambda: done.append(pool.call("sleep_long", BATCH)), daemon=True)
    caller.start()
    caller.join(timeout=15)
    assert done and done[0].outcome is CallOutcome.TIMEOUT
    deadline = time.monotonic() + 10
    while before & set(_workers_of(host[1])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not before & set(_workers_of(host[1])), "the timed-out worker outlived its closed connection"
    assert pool.call("length", BATCH).scores == [3.0, 2.0]  # a new worker serves the next call


def test_the_trainer_dying_mid_call_ends_its_workers_in_the_reward_container(tmp_path, host):
    path = tmp_path / "rewards.py"
    path.write_text(REWARDS)
    trainer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, threading\nfrom trainer.rewards_sandbox.pool import RewardSandboxPool, SandboxLimits\n"
            "p = RewardSandboxPool(sys.argv[1], ['sleep_long'], SandboxLimits(timeout_s=300), host=sys.argv[2]); p.start()\n"
            "print('started', flush=True)\np.call('sleep_long', {'prompts': ['p'], 'completions': ['c']})",
            str(path),
            host[0],
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert trainer.stdout is not None and trainer.stdout.readline().strip() == "started"
    workers = set(_workers_of(host[1]))
    assert workers
    trainer.kill()
    trainer.wait()
    deadline = time.monotonic() + 10
    while workers & set(_workers_of(host[1])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not workers & set(_workers_of(host[1]))


def test_no_reward_container_is_a_clear_start_failure(tmp_path):
    path = tmp_path / "rewards.py"
    path.write_text(REWARDS)
    pool = RewardSandboxPool(str(path), ["length"], SandboxLimits(start_timeout_s=0.5), host=str(tmp_path / "nobody.sock"))
    with pytest.raises(RewardLoadFailed, match=r"reward container's socket .*nobody.sock \(RLJOB_REWARD_HOST\) did not answer"):
        pool.start()


def test_the_shipped_check_runs_through_the_reward_container(host):
    """`trainer sandbox-check` in a trainer container with RLJOB_REWARD_HOST: the writes gVisor leaves open are held."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "PYTHONPATH": str(REPO), "RLJOB_REWARD_HOST": host[0]}
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "sandbox-check", "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["isolation"]["reward_container"] and not result["isolation"]["filesystem_confined"]
    if os.getuid() == 0:  # the reward container's own user can neither write the trainer's files nor read its 0600 one
        assert result["verdict"]["reported"] == {
            "writes stay in the worker's directory": True,
            "the trainer's 0600 files stay unread": True,
        }
