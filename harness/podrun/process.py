"""One container attempt as a process tree under proot: start, signal as a runtime does, exit status.

A runtime sends SIGTERM to the container's PID 1 only and, after the grace period, SIGKILLs everything
in the container. Here PID 1 is proot's first tracee (proot itself ignores SIGTERM), and "everything"
is every descendant of proot. An exit caused by a signal is reported as 128 + signal, as runc does;
proot says which signal killed its tracee on stderr ("proot info: pid N: terminated with signal S"),
and its own lines are kept out of the container's log.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from .plan import ContainerPlan

_SIGNALLED = re.compile(r"pid (\d+): terminated with signal (\d+)")
PROOT_PREFIXES = ("proot info:", "proot warning:", "proot error:")


def proot_binary() -> str:
    found = shutil.which("proot")
    if found is None:
        raise RuntimeError("proot is not installed: run scripts/install-system-deps.sh (Debian package proot)")
    return found


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


class ContainerProcess:
    def __init__(self, plan: ContainerPlan, log_path: Path, guard_file: Path) -> None:
        self.plan, self.log_path = plan, log_path
        guard_file.parent.mkdir(parents=True, exist_ok=True)
        guard_file.write_text(plan.guard)
        self._argv = [proot_binary(), "-i", f"{plan.uid}:{plan.gid}", "-w", plan.cwd]
        for host, guest in plan.binds:
            self._argv += ["-b", f"{host}:{guest}"]
        for site in plan.guard_paths:  # the guard, in the container's view only (guard.py)
            self._argv += ["-b", f"{guard_file}:{site}"]
        self._argv += plan.argv
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid1: int | None = None
        self._signal_of_pid1: int | None = None
        self._pump: threading.Thread | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self._argv, env=self.plan.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self._pump = threading.Thread(target=self._copy_output, name=f"log-{self.plan.name}", daemon=True)
        self._pump.start()
        deadline = time.monotonic() + 5
        while self.pid1 is None and time.monotonic() < deadline and self.proc.poll() is None:
            kids = children(self.proc.pid)
            self.pid1 = kids[0] if kids else None
            if self.pid1 is None:
                time.sleep(0.01)

    def _copy_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.log_path.open("ab", buffering=0) as log:
            for line in self.proc.stdout:
                text = line.decode(errors="replace")
                if text.startswith(PROOT_PREFIXES):
                    m = _SIGNALLED.search(text)
                    if m and self.pid1 is not None and int(m.group(1)) == self.pid1:
                        self._signal_of_pid1 = int(m.group(2))
                    continue
                log.write(line)

    def wait(self) -> int:
        """The container's exit code, once the process and its output are done."""
        assert self.proc is not None
        rc = self.proc.wait()
        if self._pump is not None:
            self._pump.join(timeout=10)
        if self._signal_of_pid1 is not None:
            return 128 + self._signal_of_pid1
        return 128 - rc if rc < 0 else rc  # proot itself was killed (SIGKILL at the end of the grace period)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def term(self) -> None:
        """SIGTERM to PID 1 only."""
        if self.pid1 is not None and self.running():
            try:
                os.kill(self.pid1, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL to every process in the container."""
        if self.proc is None:
            return
        for pid in [*descendants(self.proc.pid), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
