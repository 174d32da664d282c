"""Whose uid a reward worker runs under, and the files the trainer prepares for it (pool.py).

A trainer running as root (the GKE image's default user, and gVisor's) starts each worker as WORKER_UID:WORKER_GID
with no supplementary groups, so the kernel's own permission checks refuse a reward every file of the trainer's
with an ordinary mode (written 0644: no write; 0600 or under a 0700 directory: no read either), on every runtime,
gVisor included, where Landlock is missing. Why one fixed uid rather than one per job: a GKE job is a pod of its
own, with its own filesystem and processes, so the uid is never shared between jobs there; 65532 is distroless's
`nonroot`, which images already treat as "no one in particular" and no package owns files as, and a fixed uid is
one a cluster's policy (runAsUser ranges, PodSecurity) can name. Where the local launcher runs several jobs as root
on one machine, their workers share the uid: each worker's directory is 0700 and deleted with it, and Landlock
(present on such machines' kernels) keeps a worker out of every other's; docs/reward-sandbox.md says so.

A trainer that is not root cannot change its workers' uid: they run as its own user, and what they cannot write is
only what Landlock refuses. Which held is never taken from here: the worker tries decoy files (file_probes.py) and
reports what it could do.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .reward_files import copy_reward_files

WORKER_UID = 65532
WORKER_GID = 65532
APPEND_DECOY = "append-me"  # mode 0644, the trainer's: a reward must not append to it
READ_DECOY = "read-me"  # mode 0600, the trainer's: a reward must not read it
DECOY_TEXT = b"a file of the trainer's\n"


@dataclass(frozen=True)
class WorkerUser:
    uid: int
    gid: int


def worker_user() -> tuple[WorkerUser | None, str]:
    """The user workers run as (None: the trainer's own), and why not another where it cannot be."""
    if not hasattr(os, "getuid") or os.getuid() != 0:
        return None, f"the trainer runs as uid {os.getuid()}, not root: its workers keep its uid"
    return WorkerUser(WORKER_UID, WORKER_GID), ""


def make_workdir(user: WorkerUser | None) -> str:
    """The worker's own directory: mode 0700, the worker's user's."""
    workdir = tempfile.mkdtemp(prefix="rljob-reward-")  # 0700
    if user is not None:
        os.chown(workdir, user.uid, user.gid)
    return workdir


def stage_reward_file(path: str, workdir: str, user: WorkerUser | None) -> str:
    """Where the worker reads the reward file: a copy of the reward's files (reward_files.py) in its own directory
    (files 0400, the worker's), since the original may sit in the run's 0700 work directory; as the trainer's own
    user, the file itself."""
    if user is None:
        return path
    return copy_reward_files(path, Path(workdir, "rewards"), file_mode=0o400, dir_mode=0o700, owner=(user.uid, user.gid))


def make_decoys() -> str:
    """A directory of the trainer's (mode 0755: anyone may enter it) holding APPEND_DECOY (0644) and READ_DECOY (0600):
    files with the modes the trainer's own files have, which the worker tries to append to, create beside and read."""
    directory = tempfile.mkdtemp(prefix="rljob-reward-decoys-")
    os.chmod(directory, 0o755)
    for name, mode in ((APPEND_DECOY, 0o644), (READ_DECOY, 0o600)):
        fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            os.write(fd, DECOY_TEXT)
        finally:
            os.close(fd)
        os.chmod(os.path.join(directory, name), mode)  # whatever the umask
    return directory


def decoys_untouched(directory: str) -> bool:
    """No file was added to the decoys' directory and the appendable one still holds only its text."""
    try:
        return (
            sorted(os.listdir(directory)) == sorted((APPEND_DECOY, READ_DECOY)) and Path(directory, APPEND_DECOY).read_bytes() == DECOY_TEXT
        )
    except OSError:
        return False
