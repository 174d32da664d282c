"""What the trainer holds in place of a user's reward function: a callable with its name and parameters that runs
the function in the sandbox pool (pool.py) and scores a failed call per grpo.rewards.on_error."""

from __future__ import annotations

import inspect
import json
import math
import sys
from collections.abc import Callable
from typing import Any

from trainer.contract.spec.reward_sandbox import MIN_FAILED_CALLS_TO_STOP, REWARD_FAILED_LINE_PREFIX, RewardErrorPolicy, RewardFailure

from .pool import RewardSandboxPool
from .stats import CallOutcome

MAX_DEPTH = 16
FAILURES_LOGGED = 20  # the first failed calls are each said in the log; the rest are counted in the metrics


class RewardFunctionFailed(RuntimeError):
    """A call failed under on_error: fail; raised into train_rl, which stops."""


def plain(value: Any, depth: int = 0) -> Any:
    """`value` as JSON can carry it to a worker: numpy arrays and scalars as lists and numbers, anything else as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth >= MAX_DEPTH:
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if hasattr(value, "tolist"):  # numpy (and JAX) arrays and scalars
        return plain(value.tolist(), depth + 1)
    if isinstance(value, (list, tuple)):
        return [plain(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {str(key): plain(item, depth + 1) for key, item in value.items()}
    return str(value)


def _scalar(value: Any) -> bool:
    return value is None or (isinstance(value, (bool, int, float, str)) and not (isinstance(value, float) and not math.isfinite(value)))


def config_values(config: Any) -> dict[str, Any]:
    """train_rl's config (`tmvp_config`) as its plain values: the worker's ConfigView. MaxText's HyperParameters
    keeps them in get_keys(); JAX dtypes and the like stay behind."""
    keys = config.get_keys() if hasattr(config, "get_keys") else vars(config)
    out: dict[str, Any] = {}
    for key, value in keys.items():
        if _scalar(value):
            out[str(key)] = value
        elif isinstance(value, dict):
            out[str(key)] = {str(k): v for k, v in value.items() if _scalar(v)}
    return out


def signature_of(params: list[list[str]] | None) -> inspect.Signature:
    """The user function's parameters (their names and kinds, from the worker), so that Tunix's reward manager, which
    passes a function the algorithm settings its parameters name (reward_manager.py), passes the same ones."""
    given = params or [["prompts", "KEYWORD_ONLY"], ["completions", "KEYWORD_ONLY"], ["kwargs", "VAR_KEYWORD"]]
    # Called with keywords only: every named parameter is keyword-only here, *args has nothing to receive.
    named = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY) for name, kind in given if kind not in ("VAR_POSITIONAL", "VAR_KEYWORD")
    ]
    rest = [inspect.Parameter(name, inspect.Parameter.VAR_KEYWORD) for name, kind in given if kind == "VAR_KEYWORD"]
    return inspect.Signature(named + rest[:1])


class SandboxedReward:
    """Called the way Tunix and MaxText call a reward function (keywords: prompts, completions, tmvp_config, ...)."""

    def __init__(
        self,
        pool: RewardSandboxPool,
        name: str,
        on_error: RewardErrorPolicy,
        *,
        report_line: Callable[[str], None] | None = None,
    ):
        self.pool, self.on_error = pool, on_error
        self.__name__ = self.__qualname__ = name
        self.__signature__ = signature_of(pool.params.get(name))
        self._report_line = report_line
        self._config: tuple[int, dict[str, Any]] | None = None

    def __call__(self, **kwargs: Any) -> list[float]:
        count = len(kwargs.get("completions") or [])
        config = kwargs.get("tmvp_config")
        sent = {key: (None if key == "tmvp_config" else plain(value)) for key, value in kwargs.items()}
        if config is not None and (self._config is None or self._config[0] != id(config)):
            self._config = (id(config), config_values(config))
        result = self.pool.call(self.__name__, sent, self._config if config is not None else None)
        if result.scores is not None:
            return [math.nan if score is None else score for score in result.scores]
        failure = RewardFailure(function=self.__name__, error=(result.error or "no reply")[:2000], outcome=str(result.outcome))
        if self.on_error == "fail":
            self._stop(failure)
        calls = sum(self.pool.stats.totals.values())
        failed = calls - self.pool.stats.totals[CallOutcome.OK]
        if failed <= FAILURES_LOGGED:
            more = "" if failed < FAILURES_LOGGED else "; further failures are only counted (the reward_errors and reward_timeouts metrics)"
            print(f"rljob: reward function {self.__name__!r} failed ({result.outcome}): {failure.error}; scored 0{more}", file=sys.stderr)
        mostly = RewardFailure.mostly_failed(failed, calls, self.pool.last_failure) if failed >= MIN_FAILED_CALLS_TO_STOP else None
        if mostly is not None:
            self._stop(mostly)
        return [0.0] * count

    def _stop(self, failure: RewardFailure) -> None:
        """Raise into train_rl, which stops; the stage's message comes from the line (trainer/stages/train.py)."""
        if self._report_line is not None:
            self._report_line(REWARD_FAILED_LINE_PREFIX + failure.model_dump_json())
        raise RewardFunctionFailed(failure.message())


def writes_confined(isolation: dict[str, Any]) -> bool:
    """The worker tried to write the trainer's files (file_probes.py: append to a 0644 file, create one beside it)
    and was refused, or it runs in the pod's reward container (host.py), where no file of the trainer's is."""
    return bool(isolation.get("writes_confined") or isolation.get("reward_container"))


def _files(isolation: dict[str, Any]) -> str:
    """What the worker's tries on the trainer's files answered, and which layers were there to refuse them."""
    uid, trainer_uid = isolation.get("worker_uid"), isolation.get("trainer_uid")
    layers = [f"uid {uid}, not the trainer's {trainer_uid}"] if uid is not None and uid != trainer_uid else []
    layers += [f"Landlock ABI {isolation.get('landlock_abi')}"] if isolation.get("filesystem_confined") else []
    tried = ", ".join(f"{route} {answer}" for route, answer in sorted((isolation.get("file_routes") or {}).items()))
    if isolation.get("writes_confined"):
        files = f"no write outside its own directory ({'; '.join(layers)}; tried: {tried})"
    elif isolation.get("reward_container"):
        return "in the pod's reward container: no file of the trainer's to write or read (Landlock not available there)"
    else:
        why = [isolation.get("landlock_refused") or "Landlock not tried", isolation.get("uid_refused") or ""]
        files = (
            f"FILESYSTEM WRITES NOT CONFINED ({'; '.join(w for w in why if w)}; tried: {tried or 'nothing'}): a reward can "
            "write what the trainer's user can"
        )
    if isolation.get("reads_confined"):
        return files + f", no read of the trainer's private (0600) files (uid {uid})"
    return files + ", READS THE TRAINER'S PRIVATE FILES (its user's: 0600 files included)"


def describe_isolation(isolation: dict[str, Any]) -> str:
    """One line for the train log: what the reward workers were denied, and what not (worker.py reports each layer)."""
    if isolation.get("namespaces") and isolation.get("network_isolated") and "net" in str(isolation.get("namespaces")):
        network = f"no network (Linux namespaces: {isolation.get('namespaces')})"
    elif isolation.get("network_isolated"):
        network = f"no network (seccomp refuses every socket; namespaces refused: {isolation.get('refused') or 'none asked'})"
    else:
        network = (
            "NETWORK NOT ISOLATED: Linux refused a network namespace "
            f"({isolation.get('refused') or 'unknown'}) and the seccomp filter ({isolation.get('seccomp_refused') or 'unknown'}); "
            "Python's sockets raise in the workers, which code can get around"
        )
    files = _files(isolation)
    if isolation.get("seccomp"):
        processes = "no new process, exec or ptrace (seccomp)"
    else:
        processes = "processes a reward starts are killed by " + (
            "its PID namespace" if isolation.get("pid_namespace") else "a subreaper after each call"
        )
    if isolation.get("signals_confined") and isolation.get("processes_confined"):  # tried by the worker: reach_probes.py
        reach = f"no signal or other route to another process ({isolation.get('routes_tried')} tried, each refused)"
    else:
        reach = "OTHER PROCESSES REACHABLE, not refused: " + ", ".join(isolation.get("routes_not_held") or ["none tried"])
    capabilities = "no capabilities" if isolation.get("capabilities_dropped") else "CAPABILITIES KEPT"
    return (
        f"reward functions run in sandboxed worker processes: empty environment, own working directory, rlimits (address "
        f"space, CPU time, open files, no core files), {capabilities}, {network}, {files}, {processes}, {reach}; the trainer's "
        f"processes are not dumpable; isolation: {json.dumps(isolation, sort_keys=True)}"
    )
