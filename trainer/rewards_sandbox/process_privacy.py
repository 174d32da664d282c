"""Keep a process's environment and memory from other processes of its own user: the processes above a reward worker.

A reward worker runs as the trainer's user. Linux lets a same-user process read another's /proc/<pid>/environ (the HF
token, cloud credentials, a database URL, the service's bootstrap token), its memory and open files, unless the other
is not dumpable: then only a holder of CAP_SYS_PTRACE may, and the worker drops every capability
(confinement.py). Every process between a pod's (or `rljob serve`'s) start and a reward worker
marks itself so before any worker starts: the trainer's pipeline (a pod's PID 1), each stage process, the local
launcher's runner and the service (those two hold their own copy of the call: the runner is a standard-library
script, and the service imports nothing of the trainer's but its contract). Exec resets the flag, so each process
sets its own. Standard library only, like the rest of this package's worker side.

The cost: no core dumps of these processes, and a non-root process can no longer read its own 0400 /proc files
(environ, io); nothing in rljob reads them.
"""

from __future__ import annotations

import ctypes

_PR_SET_DUMPABLE, _PR_GET_DUMPABLE = 4, 3


def hide_from_same_user() -> bool:
    """Mark this process not dumpable; True if it now is not (False off Linux or where prctl is refused)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 and libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False
