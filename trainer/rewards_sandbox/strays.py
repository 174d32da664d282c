"""After each call, a reward worker's server kills every process the reward started (only possible where the seccomp
filter is missing): in its own PID namespace by `kill(-1)`, else as a child subreaper, one descendant tree at a time.

Standard library only: worker.py loads this file by path.
"""

from __future__ import annotations

import os
import signal


def kill_strays(pid_namespace: bool) -> None:
    """Kill every process the reward started, and reap them."""
    if pid_namespace and os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)  # pid 1 of its own namespace: every other process of that namespace
        except (ProcessLookupError, PermissionError):
            pass  # none, or the seccomp filter refused it: with the filter, no process could have been started
    else:
        for _ in range(100):  # a fork bomb's children race the kill; RLIMIT_NPROC bounds it for a non-root user
            children = _children(os.getpid())
            if not children:
                break
            for child in children:
                _kill_tree(child)
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return out


def _kill_tree(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGSTOP)  # stop it forking while its own children are found
    except ProcessLookupError:
        return
    for child in _children(pid):
        _kill_tree(child)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
