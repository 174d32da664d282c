"""How a reward worker process starts: by the trainer's pool (pool.py) or, in the pod's reward container, by the
host (host.py). Either way the same script, environment, directory and session."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import IO

from .worker_user import WorkerUser

WORKER_SCRIPT = str(Path(__file__).with_name("worker.py"))


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
        # A reward that imports JAX takes the CPU: on a TPU host the trainer holds the chips, and libtpu lets one
        # process open them, so JAX's default would fail (or wait) on its lock.
        "JAX_PLATFORMS": "cpu",
    }


def start_worker_process(
    python: str,
    workdir: str,
    lifeline_read: int,
    *,
    stdin: int | IO[bytes],
    stdout: int | IO[bytes],
    stderr: int,
    user: WorkerUser | None = None,
) -> subprocess.Popen[bytes]:
    """`python -I worker.py LIFELINE_FD` in `workdir`, leading a session of its own (killed whole); as `user` (its
    uid and gid, no supplementary group) where given, set before the exec."""
    return subprocess.Popen(
        [python, "-I", WORKER_SCRIPT, str(lifeline_read)],
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=worker_env(workdir),
        cwd=workdir,
        pass_fds=(lifeline_read,),
        start_new_session=True,
        user=None if user is None else user.uid,
        group=None if user is None else user.gid,
        extra_groups=None if user is None else [],
    )
