"""The reward sandbox against hostile reward functions (trainer/rewards_sandbox/): each is contained, scored per
grpo.rewards.on_error, counted, and the calls after it score as they should. Real worker processes, no MaxText."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from trainer.contract.spec.reward_sandbox import REWARD_FAILED_LINE_PREFIX, RewardFailure
from trainer.rewards_sandbox.pool import RewardLoadFailed, RewardSandboxPool, SandboxLimits
from trainer.rewards_sandbox.proxy import RewardFunctionFailed, SandboxedReward
from trainer.rewards_sandbox.stats import CallOutcome

HOSTILE = """
import os, socket, time

def length(prompts, completions, tmvp_config=None, **kwargs):
    return [float(len(c)) for c in completions]

def leaked_secrets(prompts, completions, **kwargs):
    names = ("HF_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS", "RLJOB_TOKEN")
    return [float(sum(len(os.environ.get(n, "")) for n in names))] * len(completions)

def read_credentials(prompts, completions, **kwargs):
    with open(os.environ["GOOGLE_APPLICATION_CREDENTIALS"]) as f:
        return [float(len(f.read()))] * len(completions)

def call_home(prompts, completions, port, **kwargs):
    socket.create_connection(("127.0.0.1", port), timeout=2).sendall(b"stolen")
    return [1.0] * len(completions)

def allocate(prompts, completions, **kwargs):
    held = [bytearray(256 << 20) for _ in range(6)]  # 1.5 GiB: beyond the test's 512 MiB address space
    return [float(len(held))] * len(completions)

def sleep_forever(prompts, completions, **kwargs):
    time.sleep(3600)

def fork_and_leave(prompts, completions, **kwargs):
    if os.fork() == 0:
        os.setsid()  # out of the worker's process group too
        time.sleep(3600)
        os._exit(0)
    return [1.0] * len(completions)

def uses_config(prompts, completions, tmvp_config, **kwargs):
    return [tmvp_config.reward_exact_answer] * len(completions)

def jax_on_cpu(prompts, completions, **kwargs):
    return [float(os.environ.get("JAX_PLATFORMS") == "cpu")] * len(completions)
"""
NAMES = [
    "length",
    "leaked_secrets",
    "read_credentials",
    "call_home",
    "allocate",
    "sleep_forever",
    "fork_and_leave",
    "uses_config",
    "jax_on_cpu",
]
BATCH = {"prompts": ["p1", "p2"], "completions": ["abc", "de"]}


@pytest.fixture
def pool(tmp_path, monkeypatch):
    """A pool over the hostile file, the trainer's environment holding secrets the workers must not get."""
    credentials = tmp_path / "sa.json"
    credentials.write_text('{"private_key": "never-in-a-reward"}')
    monkeypatch.setenv("HF_TOKEN", "hf_secret_from_the_trainer")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
    monkeypatch.setenv("RLJOB_TOKEN", "rljob-secret")
    path = tmp_path / "hostile_rewards.py"
    path.write_text(HOSTILE)
    sandbox = RewardSandboxPool(str(path), NAMES, SandboxLimits(timeout_s=2.0, memory_mib=512), size=1)
    sandbox.start()
    yield sandbox
    sandbox.close()


def assert_still_scores(pool: RewardSandboxPool) -> None:
    result = pool.call("length", BATCH)
    assert result.outcome is CallOutcome.OK and result.scores == [3.0, 2.0]


def test_a_good_function_scores_and_is_counted(pool):
    assert_still_scores(pool)
    window = pool.stats.drain()
    assert (window.calls, window.errors, window.timeouts) == (1, 0, 0) and window.latency_p50_s is not None


def test_the_worker_gets_no_token_credentials_or_rljob_settings_from_the_trainers_environment(pool):
    result = pool.call("leaked_secrets", BATCH)
    assert result.outcome is CallOutcome.OK and result.scores == [0.0, 0.0]


def test_a_reward_that_imports_jax_is_sent_to_the_cpu_whatever_the_trainer_uses(pool, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")  # the trainer's, on a TPU host; the worker's environment is its own
    result = pool.call("jax_on_cpu", BATCH)
    assert result.outcome is CallOutcome.OK and result.scores == [1.0, 1.0]


def test_a_credentials_file_named_by_the_trainers_environment_is_not_named_in_the_workers(pool):
    result = pool.call("read_credentials", BATCH)
    assert result.outcome is CallOutcome.ERROR and "KeyError" in (result.error or "")
    assert_still_scores(pool)


def test_a_socket_to_a_loopback_listener_never_connects(pool):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    result = pool.call("call_home", {**BATCH, "port": port})
    assert result.outcome is CallOutcome.ERROR
    with pytest.raises(TimeoutError):
        listener.accept()  # nothing reached the trainer's loopback
    listener.close()
    assert_still_scores(pool)


def test_an_allocation_beyond_the_address_space_limit_fails_and_the_worker_is_replaced(pool):
    result = pool.call("allocate", BATCH)
    assert result.outcome in (CallOutcome.ERROR, CallOutcome.CRASH) and "MemoryError" in (result.error or "MemoryError")
    assert pool.replaced == 1
    assert_still_scores(pool)


def test_a_call_past_its_deadline_is_a_timeout_and_the_worker_is_replaced(pool):
    done: list = []
    caller = threading.Thread(target=lambda: done.append(pool.call("sleep_forever", BATCH)), daemon=True)
    caller.start()
    caller.join(timeout=15)
    assert done, "the pool did not enforce the call's deadline"
    assert done[0].outcome is CallOutcome.TIMEOUT and pool.replaced == 1
    assert pool.stats.drain().timeouts == 1
    assert_still_scores(pool)


def _processes_with(workdir: str) -> list[int]:
    """Processes whose environment is this worker's (every process it or its reward started inherits TMPDIR)."""
    marker = f"TMPDIR={workdir}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def test_a_process_the_reward_starts_does_not_outlive_the_call(pool):
    workdir = pool._idle[0].workdir
    assert len(_processes_with(workdir)) == 2  # the keeper and the server
    result = pool.call("fork_and_leave", BATCH)
    # The seccomp filter refuses a new process to every uid (RLIMIT_NPROC alone would not bind root);
    # test_reward_sandbox_runtimes.py shows the filter held, here and under each emulated runtime.
    assert result.outcome is CallOutcome.ERROR and "PermissionError" in (result.error or "")
    assert len(_processes_with(workdir)) == 2
    assert_still_scores(pool)


def test_on_error_zero_scores_the_completions_zero_and_on_error_fail_names_the_function(pool):
    assert SandboxedReward(pool, "read_credentials", "zero")(**BATCH) == [0.0, 0.0]
    lines: list[str] = []
    failing = SandboxedReward(pool, "read_credentials", "fail", report_line=lines.append)
    with pytest.raises(RewardFunctionFailed, match="'read_credentials' failed.*KeyError"):
        failing(**BATCH)
    failure = RewardFailure.model_validate_json(lines[0].removeprefix(REWARD_FAILED_LINE_PREFIX))
    assert failure.function == "read_credentials" and failure.outcome == "error"


def test_the_reward_reads_train_rls_config_values_and_keeps_its_signature(pool):
    class Config:  # MaxText's HyperParameters keeps its values in get_keys()
        def get_keys(self):
            return {"reward_exact_answer": 2.5, "dtype": object()}

    reward = SandboxedReward(pool, "uses_config", "fail")
    assert reward(**BATCH, tmvp_config=Config()) == [2.5, 2.5]
    assert list(reward.__signature__.parameters) == ["prompts", "completions", "tmvp_config", "kwargs"]


def test_a_file_that_fails_to_import_fails_the_start_with_its_error(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('no rewards today')\n")
    with pytest.raises(RewardLoadFailed, match="no rewards today"):
        RewardSandboxPool(str(path), ["f"]).start()
