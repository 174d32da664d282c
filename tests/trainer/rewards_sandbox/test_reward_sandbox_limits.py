"""What bounds a reward call, from the spec to the worker: grpo.rewards' timeout_s and memory_mib, as the train stage
hands them to the entry shim (its flag), reach the pool that runs the calls (trainer/maxtext_entry/reward_sandbox.py),
and a reward's output reaches the trainer's log bounded per call (trainer/rewards_sandbox/output.py)."""

from __future__ import annotations

import os
import re
import threading
import time

import pytest

from trainer.contract import JobSpec, RunLayout
from trainer.contract.run.shim_config import pop_shim_config
from trainer.maxtext_entry.reward_sandbox import RewardSandbox
from trainer.rewards_sandbox.output import PER_CALL_BYTES
from trainer.rewards_sandbox.pool import RewardSandboxPool, SandboxLimits
from trainer.rewards_sandbox.stats import CallOutcome
from trainer.sources import resolve_model
from trainer.stages.train import build_train_command

REWARDS = """
import sys, time

def slow(prompts, completions, **kwargs):
    time.sleep(8)
    return [1.0] * len(completions)

def big(prompts, completions, **kwargs):
    held = bytearray(640 << 20)  # over a 512 MiB address space with Python's own, under the 2048 MiB default
    return [float(len(held) > 0)] * len(completions)

def chatty(prompts, completions, size, **kwargs):
    sys.stdout.write("x" * size)
    sys.stdout.flush()
    return [1.0] * len(completions)
"""
BATCH = {"prompts": ["q"], "completions": ["a"]}


@pytest.fixture
def sandbox_from_the_stage(tmp_path, tiny_spec_dict):
    """The sandbox as the train stage's command configures it: the spec's limits, through the shim's flag."""
    path = tmp_path / "rewards.py"
    path.write_text(REWARDS)
    data = dict(tiny_spec_dict)
    data["grpo"] = {
        **data["grpo"],
        "rewards": {"functions_path": str(path), "functions": ["slow", "big"], "timeout_s": 1.5, "memory_mib": 512},
    }
    spec = JobSpec.model_validate(data)
    command = build_train_command(spec, RunLayout(str(tmp_path / "out"), "rl-x"), resolve_model(spec))
    settings = pop_shim_config(list(command.args))[0].reward_sandbox
    assert settings is not None
    sandbox = RewardSandbox(str(path), ["slow", "big"], settings)
    yield sandbox
    sandbox.close()


def test_the_specs_call_deadline_reaches_the_worker_pool(sandbox_from_the_stage):
    slow = sandbox_from_the_stage.function("slow")
    results: list[list[float]] = []
    caller = threading.Thread(target=lambda: results.append(slow(**BATCH)), daemon=True)
    caller.start()
    caller.join(timeout=6)  # the default 30 s deadline would still be running; the reward sleeps 8 s
    assert results == [[0.0]], "the call was not stopped at the spec's 1.5 s deadline"
    assert sandbox_from_the_stage.pool.stats.totals[CallOutcome.TIMEOUT] == 1
    assert sandbox_from_the_stage.pool.last_failure == ("slow", "timeout", "past its 1.5 s deadline")


def test_the_specs_memory_limit_reaches_the_worker_pool(sandbox_from_the_stage):
    assert sandbox_from_the_stage.function("big")(**BATCH) == [0.0]  # the allocation failed: scored 0 (on_error: zero)
    function, outcome, error = sandbox_from_the_stage.pool.last_failure
    assert (function, outcome) == ("big", "error") and "MemoryError" in error


def test_a_rewards_output_reaches_the_log_bounded_per_call(tmp_path, capfd):
    path = tmp_path / "chatty.py"
    path.write_text(REWARDS)
    pool = RewardSandboxPool(str(path), ["chatty"], SandboxLimits(timeout_s=20), size=1)
    pool.start()
    try:
        capfd.readouterr()
        assert pool.call("chatty", {**BATCH, "size": 4 * PER_CALL_BYTES}).outcome is CallOutcome.OK
        assert pool.call("chatty", {**BATCH, "size": 1000}).outcome is CallOutcome.OK
    finally:
        pool.close()
    err = capfd.readouterr().err
    output = [len(run) for run in re.findall("x{100,}", err)]
    assert output == [PER_CALL_BYTES, 1000]  # the first call's allowance, then the second call's whole output
    assert f"{3 * PER_CALL_BYTES} bytes of a reward worker's output were dropped" in err


def test_a_chunk_read_just_before_a_call_begins_counts_to_the_call_that_wrote_it(monkeypatch):
    # Each read lingers before its chunk is counted, which widens the moment CI once hit by chance: the previous
    # call's last chunk read from the pipe, not yet counted, as the next call begins. Counted to the next call, it
    # would reach the log on that call's allowance: runs of [PER_CALL_BYTES, PER_CALL_BYTES] instead of [.., 1000].
    from trainer.rewards_sandbox import output

    real_read = output.os.read

    def lingering_read(fd: int, n: int) -> bytes:
        chunk = real_read(fd, n)
        time.sleep(0.2)
        return chunk

    monkeypatch.setattr(output.os, "read", lingering_read)
    read_end, write_end = os.pipe()
    sunk: list[bytes] = []
    relay = output.OutputRelay(read_end, sink=sunk.append)
    os.write(write_end, b"x" * (4 * PER_CALL_BYTES))  # returns once the last byte is in the pipe, as a call's reply does
    relay.next_call()
    os.write(write_end, b"x" * 1000)
    os.close(write_end)
    relay.join(10)
    assert [len(run) for run in re.findall(b"x{100,}", b"".join(sunk))] == [PER_CALL_BYTES, 1000]
