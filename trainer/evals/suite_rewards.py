"""A user suite's reward functions, run in the reward sandbox (trainer/rewards_sandbox/), never in the eval job's process.

The eval job loads the suite's reward file in a sandbox worker (an empty environment, its own directory, rlimits, no
network where Linux grants a namespace: docs/reward-sandbox.md) with the suite's limits (`reward_timeout_s`,
`reward_memory_mib`) and scores through stand-ins that send each call there. A call that raises, returns something
that is not one number per completion, passes its deadline or kills its worker scores per `reward_on_error`: `zero`
gives None for the call's completions (scored incorrect and counted as unscored, as a raising reward always was);
`fail` stops the evaluation with SuiteRewardFailed, a DataError naming the function and the error. Either way, an
evaluation whose calls mostly fail stops too (trainer/contract/spec/reward_sandbox.py's rule, as for training): its
scores would count the failures as incorrect answers.
The built-in suites' rewards are the trainer's own code and are called in process (builtin_suites.py).
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from typing import Any

from trainer.contract.spec.eval_suite import SuiteSpec
from trainer.contract.spec.reward_sandbox import EVAL_REWARD_WORKERS, MIN_FAILED_CALLS_TO_STOP, RewardErrorPolicy, RewardFailure
from trainer.rewards_sandbox.pool import RewardLoadFailed, RewardSandboxPool, SandboxLimits
from trainer.rewards_sandbox.proxy import FAILURES_LOGGED, config_values, describe_isolation, plain
from trainer.rewards_sandbox.stats import CallOutcome
from trainer.sources import DataError

WORKERS = EVAL_REWARD_WORKERS  # the evaluation scores one row at a time


class SuiteRewardFailed(DataError):
    """A reward call failed under reward_on_error: fail; the eval job stops (the suite's fault, not retried)."""


class SandboxedSuiteReward:
    """Called as scoring.call_reward calls a reward function (keywords: prompts, completions, question, answer,
    tmvp_config); returns one score (or None) per completion."""

    def __init__(self, pool: RewardSandboxPool, name: str, on_error: RewardErrorPolicy):
        self.pool, self.name, self.on_error = pool, name, on_error
        self.__name__ = name
        self._config: tuple[int, dict[str, Any]] | None = None

    def __call__(self, **kwargs: Any) -> list[float | None]:
        count = len(kwargs.get("completions") or [])
        config = kwargs.get("tmvp_config")
        sent = {key: (None if key == "tmvp_config" else plain(value)) for key, value in kwargs.items()}
        if config is not None and (self._config is None or self._config[0] != id(config)):
            self._config = (id(config), config_values(config))
        result = self.pool.call(self.name, sent, self._config if config is not None else None)
        if result.scores is not None:
            return result.scores
        error = (result.error or "no reply")[:2000]
        if self.on_error == "fail":
            raise SuiteRewardFailed(
                f"reward function {self.name!r} failed ({result.outcome}): {error}; the suite's reward_on_error is fail, so the "
                "evaluation stops (reward_on_error: zero scores such a call's completions incorrect and goes on)"
            )
        failed = sum(self.pool.stats.totals.values()) - self.pool.stats.totals[CallOutcome.OK]
        if failed <= FAILURES_LOGGED:
            print(f"rljob evaluate: reward function {self.name!r} failed ({result.outcome}): {error}; scored incorrect", file=sys.stderr)
        if failed >= MIN_FAILED_CALLS_TO_STOP and (problem := mostly_failed(self.pool)):
            raise SuiteRewardFailed(problem)
        return [None] * count


def mostly_failed(pool: RewardSandboxPool) -> str | None:
    """Why an evaluation whose reward calls mostly failed stops; None while they have not."""
    totals = pool.stats.totals
    calls = sum(totals.values())
    failure = RewardFailure.mostly_failed(calls - totals[CallOutcome.OK], calls, pool.last_failure)
    if failure is None:
        return None
    return (
        f"{failure.failed} of {failure.calls} reward calls failed, more than half: the suite's scores would count them as "
        f"incorrect answers, so the evaluation stops (the last: {failure.function!r} ({failure.outcome}): {failure.error}); "
        "fix the reward function (each failure is in the evaluate log) and evaluate again"
    )


@dataclass(frozen=True)
class SandboxedRewards:
    pool: RewardSandboxPool
    functions: dict[str, SandboxedSuiteReward]

    def isolation_line(self) -> str:
        return describe_isolation(self.pool.isolation)

    def mostly_failed(self) -> str | None:
        return mostly_failed(self.pool)

    def summary_line(self) -> str:
        totals = self.pool.stats.totals
        errors = totals[CallOutcome.ERROR] + totals[CallOutcome.CRASH]
        return (
            f"reward sandbox: {sum(totals.values())} calls, {errors} errors, {totals[CallOutcome.TIMEOUT]} timeouts, "
            f"{self.pool.replaced} workers replaced"
        )

    def close(self) -> None:
        self.pool.close()


def start_sandboxed_rewards(path: str, spec: SuiteSpec, origin: str) -> SandboxedRewards:
    """Load `spec.rewards` from the file at `path` in a sandbox worker; DataError when it does not load there."""
    limits = SandboxLimits(timeout_s=spec.reward_timeout_s, memory_mib=spec.reward_memory_mib)
    pool = RewardSandboxPool(path, list(spec.rewards), limits, size=WORKERS)
    try:
        pool.start()
    except RewardLoadFailed as e:
        raise DataError(f"importing {origin} in the reward sandbox raised {e.error}") from None
    except OSError as e:
        raise DataError(f"the reward sandbox did not start for {origin}: {e}") from e
    rewards = SandboxedRewards(pool, {name: SandboxedSuiteReward(pool, name, spec.reward_on_error) for name in spec.rewards})
    weakref.finalize(rewards, pool.close)  # a suite dropped without close() does not leave its worker behind
    return rewards
