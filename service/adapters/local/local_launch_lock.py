"""One runner per job id across every service process on a state directory.

Replicas (on PostgreSQL) that share a machine and a state directory, or a deposed leader that has not
noticed yet, may each be asked to launch the same job. An exclusive flock on a file in the job's
directory, held while the launcher checks for a live runner and starts one, makes that one step; the
kernel drops the lock if the holder dies.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = "launch.lock"


@contextmanager
def job_dir_lock(job_dir: Path) -> Iterator[None]:
    job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(job_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock
