"""The reward sandbox's part of the contract (trainer/rewards_sandbox/ runs a job's reward functions out of process).

What the service reads: each train step's metrics carry the step's reward calls (made since the previous step's,
evaluations' included), their errors and timeouts, the calls' latency p50 and p95, and whether the workers' network
was isolated; the service adds the counts up for the job (REWARD_CALL_TOTALS) and keeps the newest latencies.
What the train stage reads: a `RLJOB_REWARD_FAILED {...}` line when a call failed under `on_error: fail`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RewardErrorPolicy = Literal["zero", "fail"]

# Seconds one reward call may take (a whole batch's completions for one function); a worker's start is apart.
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 3600.0
DEFAULT_MEMORY_MIB = 2048
MIN_MEMORY_MIB = 256  # Python with numpy imported needs about this much address space
MAX_MEMORY_MIB = 262_144
TRAIN_REWARD_WORKERS = 2  # a training job's reward workers (the pool's size)
EVAL_REWARD_WORKERS = 1  # an eval job's: it scores one row at a time
REWARD_WORKER_MILLICPU = 500  # the reward container's CPU per worker (requested and limited)
REWARD_HOST_OVERHEAD_MIB = 256  # the reward container's server and its workers' keepers (Python, no numpy)

# TensorBoard tags of a train step's metrics (Tunix logs `rewards/<name>` as rewards/train/<name>).
CALLS_METRIC = "rewards/train/sandbox_calls"
ERRORS_METRIC = "rewards/train/sandbox_errors"  # the function raised, returned a wrong shape, or its worker died
TIMEOUTS_METRIC = "rewards/train/sandbox_timeouts"
LATENCY_P50_METRIC = "rewards/train/sandbox_latency_p50_s"
LATENCY_P95_METRIC = "rewards/train/sandbox_latency_p95_s"
NETWORK_ISOLATED_METRIC = "rewards/train/sandbox_network_isolated"  # 1: no socket (seccomp) or a network namespace
# 1: the workers could write only their own directory (Landlock) or ran in the pod's reward container; 0: anywhere
# their user may (gVisor without the reward container: docs/reward-sandbox.md)
WRITES_CONFINED_METRIC = "rewards/train/sandbox_writes_confined"

# The job's totals and newest values as JobPublic.metrics names them (service/domain/progress.py folds them).
REWARD_CALL_TOTALS = {CALLS_METRIC: "reward_calls", ERRORS_METRIC: "reward_errors", TIMEOUTS_METRIC: "reward_timeouts"}
REWARD_CALL_LATEST = {
    LATENCY_P50_METRIC: "reward_latency_p50_s",
    LATENCY_P95_METRIC: "reward_latency_p95_s",
    NETWORK_ISOLATED_METRIC: "reward_network_isolated",
    WRITES_CONFINED_METRIC: "reward_writes_confined",
}

REWARD_FAILED_LINE_PREFIX = "RLJOB_REWARD_FAILED "

# A job whose reward calls mostly fail trains on zeros (on_error: zero) and must not end as if it trained: its train
# stage stops once more than MAX_FAILED_SHARE of its calls have failed, checked after every failed call from the
# MIN_FAILED_CALLS_TO_STOP-th failure on (so a long job stops early, not at its end), and over all its calls when
# train_rl ends (so a short job with fewer failures cannot finish SUCCEEDED on them).
MAX_FAILED_SHARE = 0.5
MIN_FAILED_CALLS_TO_STOP = 10


class RewardSandboxSettings(BaseModel):
    """What the train stage hands the entry shim (its shim configuration's reward_sandbox), from grpo.rewards."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(gt=0, le=MAX_TIMEOUT_S)
    memory_mib: int = Field(ge=MIN_MEMORY_MIB, le=MAX_MEMORY_MIB)
    on_error: RewardErrorPolicy


class RewardFailure(BaseModel):
    """A call that failed under `on_error: fail`: the train stage's message names the function and the error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    function: str = Field(max_length=200)
    error: str = Field(max_length=2000)
    outcome: str = Field(max_length=20)
    # Set when the stage stops because most calls failed (under on_error: zero); `function` and `error` are the last.
    failed: int | None = Field(default=None, ge=0)
    calls: int | None = Field(default=None, ge=0)

    def message(self) -> str:
        if self.calls is not None:
            return (
                f"{self.failed} of {self.calls} reward calls failed, more than {MAX_FAILED_SHARE:.0%}: the job was training on "
                f"the zeros they score, so the train stage stops (the last: {self.function!r} ({self.outcome}): {self.error}); "
                "fix the reward function (each failure is in train.log; on_error: zero tolerates a few) and rerun"
            )
        return (
            f"reward function {self.function!r} failed ({self.outcome}): {self.error}; grpo.rewards.on_error is fail, so the "
            "train stage stops (on_error: zero scores such a call 0 and goes on)"
        )

    @classmethod
    def mostly_failed(cls, failed: int, calls: int, last: tuple[str, str, str] | None) -> RewardFailure | None:
        """The failure that stops a stage whose calls mostly failed, or None while they have not."""
        if not calls or failed <= MAX_FAILED_SHARE * calls:
            return None
        function, outcome, error = last or ("?", "error", "no failure was recorded")
        return cls(function=function[:200], outcome=outcome[:20], error=error[:2000], failed=failed, calls=calls)
