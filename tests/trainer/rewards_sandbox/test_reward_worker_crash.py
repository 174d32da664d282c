"""A reward call whose worker dies says why: the keeper (trainer/rewards_sandbox/worker.py) wakes on SIGCHLD when its
server dies and exits with the server's status, which the pool reports as the call's cause. Without that wake-up the
keeper sleeps on, the pool's wait for it runs out (2 s more per crash) and the cause is only "its pipe closed"."""

from __future__ import annotations

import pytest

from trainer.rewards_sandbox.pool import RewardSandboxPool, SandboxLimits
from trainer.rewards_sandbox.stats import CallOutcome

REWARDS = """
import os

def length(prompts, completions, **kwargs):
    return [float(len(c)) for c in completions]

def dies(prompts, completions, **kwargs):
    os._exit(7)  # as a crash in native code leaves a process: no reply, no exception
"""
BATCH = {"prompts": ["p1", "p2"], "completions": ["abc", "de"]}


@pytest.fixture
def pool(tmp_path):
    path = tmp_path / "rewards.py"
    path.write_text(REWARDS)
    sandbox = RewardSandboxPool(str(path), ["length", "dies"], SandboxLimits(timeout_s=30.0, memory_mib=512), size=1)
    sandbox.start()
    yield sandbox
    sandbox.close()


def test_a_crashed_call_reports_the_workers_exit_status(pool: RewardSandboxPool) -> None:
    result = pool.call("dies", BATCH)
    assert result.outcome is CallOutcome.CRASH
    assert result.error == "the reward worker died (exit status 7)"
    assert pool.last_failure == ("dies", str(CallOutcome.CRASH), "the reward worker died (exit status 7)")
    after = pool.call("length", BATCH)  # a fresh worker takes the next call
    assert after.outcome is CallOutcome.OK and after.scores == [3.0, 2.0] and pool.replaced == 1
