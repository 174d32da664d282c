"""The one subprocess seam: every MaxText stage runs as `python -m <module> args...` through here.

Secrets travel only in the child's environment. They never appear in argv, and any echo of a
command or line of output that might contain one passes through `redact` first.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, TextIO

from trainer.run_stop import DEADLINE_REASON, StopRequest

# Environment variables whose values are secrets: forwarded to the child, redacted everywhere else.
SECRET_ENV_VARS: tuple[str, ...] = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
REDACTED = "<redacted>"
# MaxText config keys that would carry a secret if anyone put one on a command line.
SECRET_ARG_KEYS: tuple[str, ...] = ("hf_access_token",)
# Stage modules that print their stacks on SIGUSR1 (trainer/maxtext_entry/__init__.py registers the handler); to any
# other module (MaxText's own, run directly) SIGUSR1 is its default: the end of the process.
STACK_DUMPING_MODULES = "trainer.maxtext_entry."
_running_lock = threading.Lock()
_running: list[subprocess.Popen[str]] = []  # stage processes started and not yet reaped, for the hang watchdog


def running_stages(*, dumping_stacks: bool = False) -> list[subprocess.Popen[str]]:
    """The stage processes running now; with `dumping_stacks`, only those that print their stacks on SIGUSR1."""
    with _running_lock:
        return [p for p in _running if not dumping_stacks or _module_of(p).startswith(STACK_DUMPING_MODULES)]


def _module_of(proc: subprocess.Popen[str]) -> str:
    args = list(proc.args) if isinstance(proc.args, (list, tuple)) else []
    return str(args[args.index("-m") + 1]) if "-m" in args and args.index("-m") + 1 < len(args) else ""


@dataclass(frozen=True)
class StageCommand:
    """A MaxText module invocation: what `plan` prints and what `run` executes."""

    module: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # non-secret additions to the child env
    # The stage saves its state on SIGTERM and exits by itself (train_rl: maxtext_entry/graceful_stop.py),
    # so a stop signals its main process only: helpers it started (MaxText's math-verify worker pool)
    # keep working until it has finished its step. Other stages get it on their whole process group.
    graceful_stop: bool = False

    def argv(self, python: str = sys.executable) -> list[str]:
        return [python, "-m", self.module, *self.args]

    def display(self, secrets: Iterable[str] = ()) -> str:
        env_part = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        cmd = shlex.join(["python", "-m", self.module, *self.args])
        return redact(f"{env_part} {cmd}".strip(), secrets)


def secret_values(environ: Mapping[str, str]) -> list[str]:
    return [environ[name] for name in SECRET_ENV_VARS if environ.get(name)]


def redact(text: str, secrets: Iterable[str]) -> str:
    for value in secrets:
        if value:
            text = text.replace(value, REDACTED)
    for key in SECRET_ARG_KEYS:
        marker = f"{key}="
        if marker in text:
            head, _, tail = text.partition(marker)
            rest = tail.split(" ", 1)
            text = head + marker + REDACTED + (" " + rest[1] if len(rest) > 1 else "")
    return text


class StageFailed(Exception):
    def __init__(self, module: str, returncode: int, log_path: Path, tail: str, *, message: str | None = None):
        self.module, self.returncode, self.log_path, self.tail = module, returncode, log_path, tail
        # `message`: what the stage knows of why (a reward function that failed under on_error: fail), before the exit.
        super().__init__(f"{message + '; ' if message else ''}{module} exited with {returncode}; see {log_path}")


class StageInterrupted(Exception):
    """The trainer was asked to stop (SIGTERM/SIGINT) while a stage ran; the child was stopped too."""


def run_stage_command(
    command: StageCommand,
    log_path: Path,
    *,
    base_env: Mapping[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
    cwd: Path | None = None,
    python: str = sys.executable,
    stop: StopRequest | None = None,
) -> None:
    """Run the command, appending its redacted output to log_path; raise StageFailed on non-zero exit.

    A stop signal to this process, or reaching `stop`'s deadline, sends the stage SIGTERM and raises
    StageInterrupted once it has exited; a stop already requested starts nothing."""
    if stop is not None and (why := stop.reason()) is not None:
        raise StageInterrupted(f"stopped by {why} before {command.module} started")
    start_stage_command(command, base_env=base_env, cwd=cwd, python=python).follow(log_path, on_line=on_line, stop=stop)


def start_stage_command(
    command: StageCommand,
    *,
    base_env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    python: str = sys.executable,
    with_stdin: bool = False,
) -> StartedStage:
    """Start the command now and follow it later (StartedStage.follow). With `with_stdin`, the command
    can do its slow set-up while something else runs and wait for a go line on its stdin."""
    env = dict(os.environ if base_env is None else base_env)
    env.update(command.env)
    proc = subprocess.Popen(
        _dying_with_parent(command.argv(python)),
        env=env,
        cwd=str(cwd) if cwd else None,
        stdin=subprocess.PIPE if with_stdin else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,  # so a stop signal reaches the whole MaxText process group
    )
    with _running_lock:
        _running.append(proc)
    return StartedStage(command, proc, secret_values(env))


class StartedStage:
    """A running stage process. Its output waits in the pipe until follow() reads it into the log."""

    def __init__(self, command: StageCommand, proc: subprocess.Popen[str], secrets: list[str]):
        self.command, self.proc, self.secrets = command, proc, secrets

    def follow(
        self,
        log_path: Path,
        *,
        on_line: Callable[[str], None] | None = None,
        stop: StopRequest | None = None,
        stdin_line: str | None = None,
    ) -> None:
        """Send `stdin_line` (if any, then end its stdin), append the output to log_path until the
        process exits, and raise as run_stage_command does."""
        command, proc, secrets = self.command, self.proc, self.secrets
        log_path.parent.mkdir(parents=True, exist_ok=True)
        tail: list[str] = []
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"$ {command.display(secrets)}\n")
            log.flush()
            forwarder = _forward_stop_signals(proc, whole_group=not command.graceful_stop, request=stop)
            if stop is not None and stop.signum is not None:  # it came while the stage was starting
                forwarder._handle(stop.signum, None)
            deadline = None
            if stop is not None and stop.deadline is not None:
                deadline = threading.Timer(max(0.0, stop.deadline - stop.clock()), forwarder.deadline_reached)
                deadline.daemon = True
                deadline.start()
            try:
                if proc.stdin is not None:
                    _send_and_close(proc.stdin, stdin_line)
                assert proc.stdout is not None
                for raw in proc.stdout:
                    line = redact(raw.rstrip("\n"), secrets)
                    log.write(line + "\n")
                    log.flush()
                    tail = (tail + [line])[-40:]
                    if on_line:
                        _call_on_line(on_line, line, log)
                returncode = proc.wait()
            finally:
                _reaped(proc)
                if deadline is not None:
                    deadline.cancel()
                if proc.poll() is None:  # we are leaving early (an error here): never leave the stage running
                    self.cancel()
                forwarder.restore()
        if forwarder.reason:
            raise StageInterrupted(f"stopped by {forwarder.reason} during {command.module}")
        if returncode != 0:
            raise StageFailed(command.module, returncode, log_path, "\n".join(tail))

    def cancel(self) -> None:
        """Kill the stage's process group and reap it, unless it has exited (then it only closes the pipes)."""
        if self.proc.poll() is None:  # not once reaped: its pid, and so its group id, may be reused
            _kill_group(self.proc)
            self.proc.wait()
        _reaped(self.proc)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):  # a line it never read: nothing is waiting for it now
                    pipe.close()


def _reaped(proc: subprocess.Popen[str]) -> None:
    with _running_lock:
        if proc in _running:
            _running.remove(proc)


def _send_and_close(stdin: IO[str], line: str | None) -> None:
    """A process that already exited (it failed in its set-up) cannot read: its exit code and output say why."""
    try:
        if line is not None:
            stdin.write(line + "\n")
        stdin.close()
    except BrokenPipeError:
        pass


def _call_on_line(on_line: Callable[[str], None], line: str, log: TextIO) -> None:
    """Progress parsing is a side channel: its failure (e.g. a transient storage error writing a
    gs:// events file; the reporter sends the event with its next write) must not stop the stage."""
    try:
        on_line(line)
    except Exception as e:  # noqa: BLE001
        note = f"rljob: reading progress from this line failed, the stage goes on: {type(e).__name__}: {e}"
        log.write(note + "\n")
        log.flush()
        print(note, file=sys.stderr)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@functools.cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


def _dying_with_parent(argv: list[str]) -> list[str]:
    """Linux: the stage gets SIGKILL when the trainer dies, even by SIGKILL (no orphaned MaxText).

    util-linux's setpriv sets the parent-death signal and execs the stage, so the stage keeps its pid,
    process group and command line. Not preexec_fn: Python documents it as unsafe in a process with
    threads, and the trainer has them (the events flusher, the TensorBoard tailer). Without setpriv (not Linux),
    the stage runs as it is and a SIGKILLed trainer can leave it behind.
    """
    setpriv = _setpriv()
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


# What signal.signal accepts and returns (signal.Handlers are ints).
_SignalHandler = Callable[[int, FrameType | None], Any] | int | None


class _StopForwarder:
    def __init__(self, proc: subprocess.Popen[str], *, whole_group: bool, request: StopRequest | None):
        self.proc = proc
        self.whole_group = whole_group
        self.request = request  # told of a signal too, so the stages after this one are not started
        self.reason: str | None = None  # why the stage was asked to stop, once it was
        self._previous: dict[int, _SignalHandler] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.reason = f"signal {signal.Signals(signum).name}"
        if self.request is not None:
            self.request.handle(signum, frame)
        self._stop_stage()

    def deadline_reached(self) -> None:
        """Called from a timer thread: the same stop as a preemption notice."""
        self.reason = DEADLINE_REASON
        self._stop_stage()

    def _stop_stage(self) -> None:
        try:
            if self.whole_group:
                os.killpg(self.proc.pid, signal.SIGTERM)
            else:
                self.proc.send_signal(signal.SIGTERM)  # a no-op once the stage has been reaped
        except ProcessLookupError:
            pass

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def _forward_stop_signals(proc: subprocess.Popen[str], *, whole_group: bool, request: StopRequest | None) -> _StopForwarder:
    forwarder = _StopForwarder(proc, whole_group=whole_group, request=request)
    forwarder.install()
    return forwarder
