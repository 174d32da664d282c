"""The trainer's side of the reward sandbox: a small pool of worker processes (worker.py), each call under a deadline.

A worker starts with an empty environment (only what Python needs: WORKER_ENV) in a temporary directory of its own,
as another user than a root trainer (worker_user.py: it reads a copy of the reward file there), isolates itself and
sets its limits (worker.py, confinement.py), loads the user's file and answers calls over a pipe: bounded length-
prefixed JSON both ways; what it prints reaches the trainer's log bounded per call (output.py). The process that
starts workers is first marked not dumpable (process_privacy.py), so a worker cannot read its environment. The pool
waits for each reply until the call's deadline; a worker past it, one that died, or one whose reply is not a
message, is killed (its whole session: the keeper, the server and, in the server's PID namespace, whatever the
reward started) and replaced by a new one at the next call. Nothing here imports the user's file: the trainer
process never runs reward code.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainer.contract.spec.reward_sandbox import TRAIN_REWARD_WORKERS

from .host import HOST_ENV, RemoteRewardWorker, share_reward_file
from .link import WorkerFailed, WorkerLink
from .output import OutputRelay
from .process_privacy import hide_from_same_user
from .spawn import start_worker_process
from .stats import CallOutcome, RewardCallStats
from .worker_user import WorkerUser, make_decoys, make_workdir, stage_reward_file, worker_user


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 30.0  # each call, enforced here
    memory_mib: int = 2048  # the worker's address space (RLIMIT_AS)
    start_timeout_s: float = 120.0  # a worker's start: Python and the user's imports; not a call's deadline

    @property
    def cpu_s(self) -> int:
        """A worker's CPU time for its life (RLIMIT_CPU); the pool retires it at half, so the limit only ever ends
        a worker that spins in threads it should not have, not one that served many calls."""
        return max(600, int(self.timeout_s * 20))


@dataclass(frozen=True)
class CallResult:
    outcome: CallOutcome
    scores: list[float | None] | None = None
    error: str | None = None
    latency_s: float = 0.0


class RewardLoadFailed(Exception):
    """The reward file failed to load in a worker (it raised on import, or lacks a function): the job's error."""

    def __init__(self, message: str, error: str | None = None):
        super().__init__(message)
        self.error = error or message  # what the worker said (`ZeroDivisionError: division by zero`), or why it never did


class RewardWorker(WorkerLink):
    """One worker process of this machine (or container) and its pipes. Not thread-safe: the pool hands it to one call
    at a time."""

    def __init__(self, python: str, clock: Callable[[], float], reward_path: str, user: WorkerUser | None = None):
        self.workdir = make_workdir(user)
        try:
            self.reward_path = stage_reward_file(reward_path, self.workdir, user)  # where this worker reads it
        except OSError:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        lifeline_read, self._lifeline = os.pipe()  # the write end stays here: the keeper sees it close when we die
        output_read, output_write = os.pipe()
        try:
            self.process = start_worker_process(
                python, self.workdir, lifeline_read, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=output_write, user=user
            )
        except OSError:
            os.close(self._lifeline)
            os.close(output_read)
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        finally:
            os.close(lifeline_read)
            os.close(output_write)
        self.output = OutputRelay(output_read)
        if self.process.stdin is None or self.process.stdout is None:  # PIPE was asked for: never, but typed so
            raise OSError("the reward worker has no pipes")
        super().__init__(self.process.stdin.fileno(), self.process.stdout.fileno(), clock)

    def next_call(self) -> None:
        self.output.next_call()

    def _death(self) -> str:
        try:
            code = self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "its pipe closed"
        return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"

    def kill(self) -> None:
        """The whole session: the keeper and the server (and, with a PID namespace, all the server's namespace)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass  # a process in uninterruptible sleep; its lifeline closes below
        self.output.join(timeout_s=2)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        try:
            os.close(self._lifeline)
        except OSError:
            pass
        shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass
class RewardSandboxPool:
    """Workers for one reward file. `start()` loads it once (a file that fails to load fails the job); `call()` runs a
    function under the call deadline and always returns: a failure is an outcome, counted in `stats`."""

    path: str
    names: list[str]
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    size: int = TRAIN_REWARD_WORKERS  # the reward container's resources count these (service/adapters/k8s/reward_container.py)
    python: str = sys.executable
    clock: Callable[[], float] = time.monotonic
    stats: RewardCallStats = field(default_factory=RewardCallStats)
    params: dict[str, list[list[str]]] = field(default_factory=dict)  # each function's parameters [name, kind]
    isolation: dict[str, Any] = field(default_factory=dict)  # what the first worker obtained (worker.isolate)
    replaced: int = 0  # workers killed after a timeout, crash or fatal error
    last_failure: tuple[str, str, str] | None = None  # (function, outcome, error) of the newest failed call
    # The pod's reward container's socket (host.py): workers start there, not here. Set by the pod template.
    host: str | None = field(default_factory=lambda: os.environ.get(HOST_ENV) or None)

    def __post_init__(self) -> None:
        self._worker_path = self.path  # where a worker reads the reward file (a copy, in the reward container)
        self._user: WorkerUser | None = None  # whom local workers run as (worker_user.py)
        self._user_refused = ""  # why they run as the trainer's own user
        self._decoys: str | None = None  # the trainer's files each worker tries (file_probes.py)
        self._idle: list[WorkerLink] = []
        self._live = 0
        self._closed = False
        self._cond = threading.Condition()

    def start(self) -> None:
        hide_from_same_user()  # before any worker exists: this process's environment holds the job's secrets
        if self.host:
            self._worker_path = share_reward_file(self.path, self.host)
        else:
            self._user, self._user_refused = worker_user()
            self._decoys = make_decoys()
        worker = self._start_worker()
        with self._cond:
            self._live += 1
            self._idle.append(worker)

    def _start_worker(self) -> WorkerLink:
        if self.host:
            try:
                worker: WorkerLink = RemoteRewardWorker(self.host, self.clock, connect_timeout_s=self.limits.start_timeout_s)
            except OSError as e:
                raise RewardLoadFailed(f"the reward worker did not start: {e}") from None
        else:
            worker = self._local_worker()
        message = {"path": self._worker_path, "names": self.names, "memory_bytes": self.limits.memory_mib * 1024 * 1024}
        message["cpu_s"] = self.limits.cpu_s
        if isinstance(worker, RewardWorker):
            message.update(path=worker.reward_path, import_dir=os.path.dirname(os.path.abspath(self.path)), decoys=self._decoys)
        try:
            reply = worker.exchange(message, self.clock() + self.limits.start_timeout_s)
        except WorkerFailed as e:
            worker.kill()
            raise RewardLoadFailed(f"the reward worker did not start: {e}") from None
        if not reply.get("ok"):
            worker.kill()
            raise RewardLoadFailed(f"loading {self.path} in the reward sandbox failed: {reply.get('error')}", str(reply.get("error")))
        self.params = reply.get("params") or {}
        self.isolation = {**(reply.get("isolation") or {}), "reward_container": bool(self.host), "trainer_uid": os.getuid()}
        if self._user_refused:
            self.isolation["uid_refused"] = self._user_refused
        return worker

    def _local_worker(self) -> RewardWorker:
        """A worker as the chosen user; where the system refuses to start it so (a root without CAP_SETUID, an
        interpreter the user cannot reach), as the trainer's own user, and the refusal is reported."""
        if self._user is not None:
            try:
                return RewardWorker(self.python, self.clock, self.path, self._user)
            except OSError as e:
                self._user_refused = f"uid {self._user.uid} could not start {self.python}: {e.strerror or e}"
                self._user = None
        return RewardWorker(self.python, self.clock, self.path)

    def _acquire(self) -> WorkerLink | str:
        with self._cond:
            while not self._idle and self._live >= self.size and not self._closed:
                self._cond.wait()
            if self._closed:
                return "the reward sandbox is closed"
            if self._idle:
                return self._idle.pop()
            self._live += 1
        try:
            return self._start_worker()
        except (RewardLoadFailed, OSError) as e:
            self._release(None)
            return str(e)

    def _release(self, worker: WorkerLink | None) -> None:
        with self._cond:
            if worker is not None and not self._closed:
                self._idle.append(worker)
            else:
                self._live -= 1
                if worker is not None:
                    worker.kill()
            self._cond.notify()

    def call(self, name: str, kwargs: dict[str, Any], config: tuple[int, dict[str, Any]] | None = None) -> CallResult:
        """Run `name(**kwargs)` in a worker; `config` is (a key, the values) of tmvp_config, sent once per worker."""
        result = self._call(name, kwargs, config)
        if result.outcome is not CallOutcome.OK:
            self.last_failure = (name, str(result.outcome), result.error or "no reply")
        return result

    def _call(self, name: str, kwargs: dict[str, Any], config: tuple[int, dict[str, Any]] | None) -> CallResult:
        acquired = self._acquire()
        if isinstance(acquired, str):
            self.stats.record(CallOutcome.CRASH, 0.0)
            return CallResult(CallOutcome.CRASH, error=acquired)
        worker = acquired
        worker.next_call()
        message: dict[str, Any] = {"call": name, "kwargs": kwargs}
        if config is not None and worker.config_key != config[0]:
            message["config"] = config[1]
        started = self.clock()
        try:
            reply = worker.exchange(message, started + self.limits.timeout_s)
        except WorkerFailed as e:
            latency = self.clock() - started
            self._replace(worker)
            self.stats.record(e.outcome, latency)
            error = f"past its {self.limits.timeout_s:g} s deadline" if e.outcome is CallOutcome.TIMEOUT else str(e)
            return CallResult(e.outcome, error=error, latency_s=latency)
        latency = self.clock() - started
        if config is not None:
            worker.config_key = config[0]
        if reply.get("fatal") or worker.cpu_s > self.limits.cpu_s / 2:
            self._replace(worker)
        else:
            self._release(worker)
        if not reply.get("ok"):
            self.stats.record(CallOutcome.ERROR, latency)
            return CallResult(CallOutcome.ERROR, error=str(reply.get("error"))[:2000], latency_s=latency)
        scores = reply.get("scores")
        if not isinstance(scores, list) or not all(s is None or (isinstance(s, (int, float)) and not isinstance(s, bool)) for s in scores):
            self.stats.record(CallOutcome.ERROR, latency)
            return CallResult(CallOutcome.ERROR, error="the reward worker's reply has no scores", latency_s=latency)
        self.stats.record(CallOutcome.OK, latency)
        return CallResult(CallOutcome.OK, scores=[None if s is None else float(s) for s in scores], latency_s=latency)

    def _replace(self, worker: WorkerLink) -> None:
        worker.kill()
        with self._cond:
            self._live -= 1
            self.replaced += 1
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._live -= len(idle)
            self._cond.notify_all()
        for worker in idle:
            worker.kill()
        if self._decoys is not None:
            shutil.rmtree(self._decoys, ignore_errors=True)
