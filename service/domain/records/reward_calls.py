"""A job's calls of its own reward functions, as the sandbox counted them (trainer/contract/spec/reward_sandbox.py): what
the service folded from the train steps' metrics (progress.fold_reward_calls) into the job's latest metrics."""

from __future__ import annotations

from pydantic import BaseModel, Field

from trainer.contract.spec.reward_sandbox import REWARD_CALL_LATEST, REWARD_CALL_TOTALS

_CALLS, _ERRORS, _TIMEOUTS = REWARD_CALL_TOTALS.values()
_P50, _P95, _ISOLATED, _WRITES_CONFINED = REWARD_CALL_LATEST.values()


class RewardCalls(BaseModel):
    """Totals over the job's reported train steps; latencies and isolation as of the newest step."""

    calls: int = Field(description="calls of the job's reward functions (each scores a batch's completions)")
    errors: int = Field(description="calls that raised, returned something else than one number per completion, or crashed their worker")
    timeouts: int = Field(description="calls past grpo.rewards.timeout_s: the worker was killed and replaced")
    latency_p50_s: float | None = Field(default=None, description="median call latency of the newest step, seconds")
    latency_p95_s: float | None = Field(default=None, description="95th percentile call latency of the newest step, seconds")
    network_isolated: bool | None = Field(
        default=None,
        description="whether the reward workers could open no socket (seccomp, or a network namespace); else: see the train log",
    )
    writes_confined: bool | None = Field(
        default=None,
        description="whether the reward workers could write only their own directory (Landlock) or their own container "
        "(RLJOB_K8S_REWARD_CONTAINER); false: anywhere the trainer's user may (gVisor: docs/reward-sandbox.md)",
    )

    @classmethod
    def of_metrics(cls, latest: dict[str, float]) -> RewardCalls | None:
        """None for a job whose trainer reported no sandboxed calls (MaxText's built-in rewards, or not trained yet)."""
        if _CALLS not in latest:
            return None
        isolated, confined = latest.get(_ISOLATED), latest.get(_WRITES_CONFINED)
        return cls(
            calls=int(latest[_CALLS]),
            errors=int(latest.get(_ERRORS, 0)),
            timeouts=int(latest.get(_TIMEOUTS, 0)),
            latency_p50_s=latest.get(_P50),
            latency_p95_s=latest.get(_P95),
            network_isolated=None if isolated is None else isolated >= 1,
            writes_confined=None if confined is None else confined >= 1,
        )

    def says(self) -> str:
        """One line for `rljob status`."""
        latency = "-" if self.latency_p50_s is None else f"p50 {self.latency_p50_s:.3g} s, p95 {self.latency_p95_s or 0:.3g} s"
        network = {True: "no network", False: "NETWORK NOT ISOLATED (see the train log)", None: "network: unknown"}[self.network_isolated]
        writes = {True: "", False: ", WRITES NOT CONFINED (see the train log)", None: ""}[self.writes_confined]
        return f"{self.calls} calls, {self.errors} errors, {self.timeouts} timeouts; latency {latency}; sandboxed, {network}{writes}"
