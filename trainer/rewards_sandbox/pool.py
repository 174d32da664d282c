"""The trainer's side of the reward sandbox: a small pool of worker processes (worker.py), each call under a deadline.

A worker starts with an empty environment (only what Python needs: WORKER_ENV) in a temporary directory of its own,
isolates itself and sets its limits (worker.py, confinement.py), loads the user's file and answers calls over a pipe:
bounded length-prefixed JSON both ways; what it prints reaches the trainer's log bounded per call (output.py). The
process that starts workers is first marked not dumpable (process_privacy.py), so a worker cannot read its
environment. The pool waits for each reply until the call's deadline; a worker past it, one that
died, or one whose reply is not a message, is killed (its whole session: the keeper, the server and, in the server's
PID namespace, whatever the reward started) and replaced by a new one at the next call. Nothing here imports the
user's file: the trainer process never runs reward code.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .output import OutputRelay
from .process_privacy import hide_from_same_user
from .stats import CallOutcome, RewardCallStats
from .worker import _HEADER, MAX_MESSAGE_BYTES, ProtocolError, decode_body, encode_message

WORKER_SCRIPT = str(Path(__file__).with_name("worker.py"))
MAX_REPLY_BYTES = 4 * 1024 * 1024  # one number per completion, or an error message; far more is a broken worker


def worker_env(workdir: str) -> dict[str, str]:
    """All a worker's environment: no HF token, no cloud credentials, no RLJOB_* setting, no proxy; one thread
    per numeric library (RLIMIT_NPROC refuses more to a non-root user anyway)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


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


class WorkerFailed(Exception):
    def __init__(self, outcome: CallOutcome, message: str):
        super().__init__(message)
        self.outcome = outcome


class RewardLoadFailed(Exception):
    """The reward file failed to load in a worker (it raised on import, or lacks a function): the job's error."""

    def __init__(self, message: str, error: str | None = None):
        super().__init__(message)
        self.error = error or message  # what the worker said (`ZeroDivisionError: division by zero`), or why it never did


class RewardWorker:
    """One worker process and its pipes. Not thread-safe: the pool hands it to one call at a time."""

    def __init__(self, python: str, clock: Callable[[], float]):
        self._clock = clock
        self.workdir = tempfile.mkdtemp(prefix="rljob-reward-")
        lifeline_read, self._lifeline = os.pipe()  # the write end stays here: the keeper sees it close when we die
        output_read, output_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [python, "-I", WORKER_SCRIPT, str(lifeline_read)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=output_write,
                env=worker_env(self.workdir),
                cwd=self.workdir,
                pass_fds=(lifeline_read,),
                start_new_session=True,  # its own process group: killed whole
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
        self._in, self._out = self.process.stdin.fileno(), self.process.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self.config_key: int | None = None  # which config object this worker holds (ConfigView)
        self.cpu_s = 0.0

    def exchange(self, message: dict[str, Any], deadline: float) -> dict[str, Any]:
        try:
            self._write(encode_message(message), deadline)
            reply = self._read(deadline)
        except (BrokenPipeError, EOFError, ConnectionResetError) as e:
            raise WorkerFailed(CallOutcome.CRASH, f"the reward worker died ({self._death()})") from e
        except ProtocolError as e:
            raise WorkerFailed(CallOutcome.CRASH, f"the reward worker sent a broken reply: {e}") from e
        self.cpu_s = float(reply.get("cpu_s") or 0.0) if isinstance(reply.get("cpu_s"), (int, float)) else self.cpu_s
        return reply

    def _wait(self, fd: int, events: int, deadline: float) -> None:
        """Until `fd` is ready (poll: a trainer may hold more than select's 1024 descriptors), or the deadline."""
        left = deadline - self._clock()
        poller = select.poll()
        poller.register(fd, events)
        if left <= 0 or not poller.poll(left * 1000):
            raise WorkerFailed(CallOutcome.TIMEOUT, "past its deadline")

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self._wait(self._in, select.POLLOUT, deadline)
            try:
                view = view[os.write(self._in, view) :]
            except BlockingIOError:
                continue

    def _read_exactly(self, size: int, deadline: float) -> bytes:
        chunks, left = [], size
        while left:
            self._wait(self._out, select.POLLIN, deadline)
            try:
                chunk = os.read(self._out, min(left, 1 << 20))
            except BlockingIOError:
                continue
            if not chunk:
                raise EOFError("the worker closed its pipe")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _read(self, deadline: float) -> dict[str, Any]:
        (size,) = _HEADER.unpack(self._read_exactly(_HEADER.size, deadline))
        if size > min(MAX_REPLY_BYTES, MAX_MESSAGE_BYTES):
            raise ProtocolError(f"a {size}-byte reply is over the {MAX_REPLY_BYTES}-byte bound")
        return decode_body(self._read_exactly(size, deadline))

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
    size: int = 2
    python: str = sys.executable
    clock: Callable[[], float] = time.monotonic
    stats: RewardCallStats = field(default_factory=RewardCallStats)
    params: dict[str, list[list[str]]] = field(default_factory=dict)  # each function's parameters [name, kind]
    isolation: dict[str, Any] = field(default_factory=dict)  # what the first worker obtained (worker.isolate)
    replaced: int = 0  # workers killed after a timeout, crash or fatal error
    last_failure: tuple[str, str, str] | None = None  # (function, outcome, error) of the newest failed call

    def __post_init__(self) -> None:
        self._idle: list[RewardWorker] = []
        self._live = 0
        self._closed = False
        self._cond = threading.Condition()

    def start(self) -> None:
        hide_from_same_user()  # before any worker exists: this process's environment holds the job's secrets
        worker = self._start_worker()
        with self._cond:
            self._live += 1
            self._idle.append(worker)

    def _start_worker(self) -> RewardWorker:
        worker = RewardWorker(self.python, self.clock)
        message = {"path": self.path, "names": self.names, "memory_bytes": self.limits.memory_mib * 1024 * 1024, "cpu_s": self.limits.cpu_s}
        try:
            reply = worker.exchange(message, self.clock() + self.limits.start_timeout_s)
        except WorkerFailed as e:
            worker.kill()
            raise RewardLoadFailed(f"the reward worker did not start: {e}") from None
        if not reply.get("ok"):
            worker.kill()
            raise RewardLoadFailed(f"loading {self.path} in the reward sandbox failed: {reply.get('error')}", str(reply.get("error")))
        self.params = reply.get("params") or {}
        self.isolation = reply.get("isolation") or {}
        return worker

    def _acquire(self) -> RewardWorker | str:
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

    def _release(self, worker: RewardWorker | None) -> None:
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
        worker.output.next_call()
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

    def _replace(self, worker: RewardWorker) -> None:
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
