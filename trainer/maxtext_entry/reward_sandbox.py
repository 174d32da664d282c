"""Inside train_rl: the job's reward functions run in the sandbox (trainer/rewards_sandbox/), never in this process.

Wrapped (MaxText 0.2.5, Tunix; checked against the installed versions by tests/trainer/test_reward_sandbox_wiring.py):
- `utils_rl.load_custom_callable(path, name, importable_by_workers=True)`: train_rl's build_reward_fns loads each of
  `reward_functions` from `reward_functions_path` through it (its only call with importable_by_workers=True; the
  custom process_data loader passes False and is left to MaxText). The wrapper starts the worker pool for the file
  once, which imports it in a worker, and returns a stand-in (proxy.SandboxedReward) with the function's name and
  parameters; MaxText wraps that in its _RewardFn and hands it to Tunix and to its evaluations as before.
- `SequenceRewardManager._compute_rewards(prompts, completions, **kwargs)`: after a training batch's rewards, the
  sandbox's counts and latencies since the last batch join the metrics Tunix logs for the step
  (contract/reward_sandbox.py names them), so the service folds them with the step's other metrics.
"""

from __future__ import annotations

import atexit
import sys
from typing import Any

import numpy as np

from trainer.contract.run.samples import tunix_metric_name
from trainer.contract.spec.reward_sandbox import (
    CALLS_METRIC,
    DEFAULT_MEMORY_MIB,
    DEFAULT_TIMEOUT_S,
    ERRORS_METRIC,
    LATENCY_P50_METRIC,
    LATENCY_P95_METRIC,
    NETWORK_ISOLATED_METRIC,
    REWARD_FAILED_LINE_PREFIX,
    TIMEOUTS_METRIC,
    WRITES_CONFINED_METRIC,
    RewardFailure,
    RewardSandboxSettings,
)
from trainer.rewards_sandbox.pool import RewardSandboxPool, SandboxLimits
from trainer.rewards_sandbox.proxy import SandboxedReward, describe_isolation, writes_confined
from trainer.rewards_sandbox.stats import CallOutcome, CallWindow

from .report_line import write_report_line


def reward_file_from_argv(argv: list[str]) -> tuple[str, list[str]] | None:
    """(reward_functions_path, names) as MaxText will read them from its argv; None without both."""
    values = {arg.split("=", 1)[0]: arg.split("=", 1)[1] for arg in argv if arg.startswith(("reward_functions_path=", "reward_functions="))}
    path, names = values.get("reward_functions_path"), [n.strip() for n in values.get("reward_functions", "").split(",") if n.strip()]
    return (path, names) if path and names else None


def window_metrics(window: CallWindow, isolation: dict[str, Any]) -> dict[str, tuple[np.ndarray, Any]]:
    """A window of calls in Tunix's (values, aggregate) form: Tunix buffers every batch of a step and aggregates them
    when the step ends, so counts add up, the median is averaged and the 95th percentile is the batches' worst."""
    metrics: dict[str, tuple[np.ndarray, Any]] = {
        tunix_metric_name(CALLS_METRIC): (np.asarray([window.calls]), np.sum),
        tunix_metric_name(ERRORS_METRIC): (np.asarray([window.errors]), np.sum),
        tunix_metric_name(TIMEOUTS_METRIC): (np.asarray([window.timeouts]), np.sum),
        tunix_metric_name(NETWORK_ISOLATED_METRIC): (np.asarray([1.0 if isolation.get("network_isolated") else 0.0]), np.min),
        tunix_metric_name(WRITES_CONFINED_METRIC): (np.asarray([1.0 if writes_confined(isolation) else 0.0]), np.min),
    }
    if window.latency_p50_s is not None and window.latency_p95_s is not None:
        metrics[tunix_metric_name(LATENCY_P50_METRIC)] = (np.asarray([window.latency_p50_s]), np.mean)
        metrics[tunix_metric_name(LATENCY_P95_METRIC)] = (np.asarray([window.latency_p95_s]), np.max)
    return metrics


class RewardSandbox:
    """The pool of one job's reward file, started when MaxText first asks for one of its functions."""

    def __init__(self, path: str, names: list[str], settings: RewardSandboxSettings):
        self.path, self.names, self.settings = path, names, settings
        self.pool: RewardSandboxPool | None = None

    def function(self, name: str) -> SandboxedReward:
        if self.pool is None:
            pool = RewardSandboxPool(
                self.path, self.names, SandboxLimits(timeout_s=self.settings.timeout_s, memory_mib=self.settings.memory_mib)
            )
            pool.start()  # RewardLoadFailed: the file does not load; train_rl stops with the reason, as MaxText's loader would
            self.pool = pool
            atexit.register(self.close)
            print(f"rljob: reward sandbox: {describe_isolation(pool.isolation)}", file=sys.stderr)
        if name not in self.names:
            raise ValueError(f"{name!r} is not among the job's reward functions {self.names}")
        return SandboxedReward(self.pool, name, self.settings.on_error, report_line=write_report_line)

    def step_metrics(self) -> dict[str, tuple[np.ndarray, Any]]:
        if self.pool is None:
            return {}
        return window_metrics(self.pool.stats.drain(), self.pool.isolation)

    def close(self) -> None:
        """At train_rl's end (atexit): the totals, and the stage's stop when most calls failed (whatever their number:
        a short job's few calls count as much as a long job's many)."""
        if self.pool is None:
            return
        totals = self.pool.stats.totals
        calls = sum(totals.values())
        print(
            f"rljob: reward sandbox: {calls} calls, {totals[CallOutcome.ERROR] + totals[CallOutcome.CRASH]} errors, "
            f"{totals[CallOutcome.TIMEOUT]} timeouts, {self.pool.replaced} workers replaced",
            file=sys.stderr,
        )
        mostly = RewardFailure.mostly_failed(calls - totals[CallOutcome.OK], calls, self.pool.last_failure)
        if mostly is not None:
            write_report_line(REWARD_FAILED_LINE_PREFIX + mostly.model_dump_json())
        self.pool.close()
        self.pool = None  # closed once: atexit calls this again


def install_for_job(argv: list[str], settings: RewardSandboxSettings | None) -> RewardSandbox | None:
    """The train stage's settings (its shim configuration's reward_sandbox), or the spec's defaults without them:
    reward code is never imported here either way."""
    defaults = RewardSandboxSettings(timeout_s=DEFAULT_TIMEOUT_S, memory_mib=DEFAULT_MEMORY_MIB, on_error="zero")
    return install(argv, settings or defaults)


def install(argv: list[str], settings: RewardSandboxSettings) -> RewardSandbox | None:
    """Route the job's reward functions through the sandbox; None when the job has none (MaxText's built-ins run as
    shipped: they are MaxText's code, not the user's)."""
    found = reward_file_from_argv(argv)
    if found is None:
        return None
    sandbox = RewardSandbox(found[0], found[1], settings)

    from maxtext.trainers.post_train.rl import utils_rl
    from tunix.rl import reward_manager

    load_custom_callable = utils_rl.load_custom_callable
    compute_rewards = reward_manager.SequenceRewardManager._compute_rewards

    def _load_custom_callable(module_path: str, function_name: str, importable_by_workers: bool = False) -> Any:
        if not importable_by_workers:  # MaxText's process_data: a data transform, loaded as MaxText does
            return load_custom_callable(module_path, function_name, importable_by_workers)
        if module_path != sandbox.path:  # never import reward code here, whatever MaxText asks for
            raise ValueError(f"train_rl asked for reward functions from {module_path!r}; the job's sandbox serves {sandbox.path!r}")
        return sandbox.function(function_name)

    def _compute_rewards(self: Any, prompts: Any, completions: Any, **kwargs: Any) -> Any:
        info = compute_rewards(self, prompts, completions, **kwargs)
        if "train" in str(kwargs.get("mode", "")).lower():
            try:
                info["log_metrics"].update(sandbox.step_metrics())
            except Exception as e:  # noqa: BLE001 - measuring rewards must never stop training
                print(f"rljob: reward sandbox metrics failed, training goes on: {type(e).__name__}: {e}", file=sys.stderr)
        return info

    utils_rl.load_custom_callable = _load_custom_callable
    reward_manager.SequenceRewardManager._compute_rewards = _compute_rewards
    return sandbox
