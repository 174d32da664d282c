"""One container attempt as a process tree: start, signal as a runtime does, exit status.

Two ways to give the process the container's view of the filesystem and its user (chosen in
`isolation()`): Linux namespaces (ns_exec.py: a user and a mount namespace with real bind mounts; the
default where this machine allows them) or proot (ptrace: every system call of the container stops in
proot, so importing MaxText's stack took 2 to 3 times as long under it here; used where namespaces are
refused, or when RLJOB_PODRUN_ISOLATION=proot asks for it).

A runtime sends SIGTERM to the container's PID 1 only and, after the grace period, SIGKILLs everything
in the container. With namespaces PID 1 is the process started here (ns_exec.py execs the container's
argv); with proot it is proot's first tracee (proot itself ignores SIGTERM), and "everything" is every
descendant of proot. An exit caused by a signal is reported as 128 + signal, as runc does;
proot says which signal killed its tracee on stderr ("proot info: pid N: terminated with signal S"),
and its own lines are kept out of the container's log.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .plan import ContainerPlan

_SIGNALLED = re.compile(r"pid (\d+): terminated with signal (\d+)")
PROOT_PREFIXES = ("proot info:", "proot warning:", "proot error:")
NS_EXEC = Path(__file__).with_name("ns_exec.py")
ISOLATIONS = ("namespaces", "proot")


def proot_binary() -> str:
    found = shutil.which("proot")
    if found is None:
        raise RuntimeError("proot is not installed: run scripts/install-system-deps.sh (Debian package proot)")
    return found


def _ns_exec_argv(plan_file: Path) -> list[str]:
    return [sys.executable, "-I", "-S", str(NS_EXEC), str(plan_file)]


@functools.cache
def namespaces_work() -> bool:
    """Whether this machine lets ns_exec.py start a process (a user namespace with mounts, once per process)."""
    with tempfile.TemporaryDirectory(prefix="podrun-probe-") as tmp:
        root, keep, plan = Path(tmp, "root"), Path(tmp, "keep"), Path(tmp, "plan.json")
        root.mkdir()
        keep.mkdir()
        plan.write_text(
            json.dumps(
                {
                    "uid": 1000,
                    "gid": 1000,
                    "root": str(root),
                    "keep": str(keep),
                    "binds": [],
                    "cwd": "/",
                    "argv": ["/bin/sh", "-c", "exit 0"],
                }
            )
        )
        try:
            done = subprocess.run(_ns_exec_argv(plan), capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0


def isolation() -> str:
    """How containers are isolated here: RLJOB_PODRUN_ISOLATION if set, else namespaces where they work."""
    asked = os.environ.get("RLJOB_PODRUN_ISOLATION", "")
    if asked:
        if asked not in ISOLATIONS:
            raise RuntimeError(f"RLJOB_PODRUN_ISOLATION={asked!r}: expected one of {', '.join(ISOLATIONS)}")
        return asked
    return "namespaces" if namespaces_work() else "proot"


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
        binds = [
            *((str(host), guest) for host, guest in plan.binds),
            *((str(guard_file), site) for site in plan.guard_paths),
        ]  # the guard, in the container's view only
        self.isolation = isolation()
        if self.isolation == "namespaces":
            scratch = guard_file.parent
            (scratch / "root").mkdir(exist_ok=True)
            (scratch / "keep").mkdir(exist_ok=True)
            plan_file = scratch / f"{plan.name}.ns.json"
            plan_file.write_text(
                json.dumps(
                    {
                        "uid": plan.uid,
                        "gid": plan.gid,
                        "root": str(scratch / "root"),
                        "keep": str(scratch / "keep"),
                        "binds": binds,
                        "cwd": plan.cwd,
                        "argv": plan.argv,
                    }
                )
            )  # the env goes as the process's own (secrets)
            self._argv = _ns_exec_argv(plan_file)
        else:
            self._argv = [proot_binary(), "-i", f"{plan.uid}:{plan.gid}", "-w", plan.cwd]
            for host, guest in binds:
                self._argv += ["-b", f"{host}:{guest}"]
            self._argv += plan.argv
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid1: int | None = None
        self._signal_of_pid1: int | None = None
        self._pump: threading.Thread | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self._argv,
            env=self.plan.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._pump = threading.Thread(target=self._copy_output, name=f"log-{self.plan.name}", daemon=True)
        self._pump.start()
        if self.isolation == "namespaces":  # ns_exec.py execs the container's process in its own place
            self.pid1 = self.proc.pid
            return
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
