"""What a confined worker can do to the trainer's files, tried by the worker itself before it loads the reward file.

The pool (worker_user.make_decoys) hands it a directory of the trainer's holding a 0644 file and a 0600 file. The
worker tries to append to the first, to create a file beside it, and to read the second; `writes_confined` and
`reads_confined` are what those tries answered, whichever layer refused them (another uid than the trainer's,
Landlock), never which layers were installed. A try that succeeds writes nothing: the append opens the file and
closes it, and a created file is removed at once.

Standard library only: worker.py loads this file by path.
"""

from __future__ import annotations

import errno
import os
from typing import Any

APPEND_DECOY, READ_DECOY = "append-me", "read-me"  # worker_user.py's names (the worker imports nothing of rljob)
CREATED = "created-by-a-reward"


def _answer(error: OSError | None) -> str:
    if error is None:
        return "allowed"
    return errno.errorcode.get(error.errno or 0, str(error.errno))


def _try(path: str, flags: int) -> OSError | None:
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        return e
    os.close(fd)
    if flags & os.O_CREAT:
        try:
            os.unlink(path)
        except OSError:
            pass
    return None


def probe_files(decoys: str | None) -> dict[str, Any]:
    """Each route tried on the trainer's decoys: the answers, and whether writes and reads were refused. Refused means
    EACCES or EPERM; a missing decoy (ENOENT) proves nothing and counts as not refused."""
    if not decoys:
        return {"file_routes": {}, "writes_confined": False, "reads_confined": False}
    tried = {
        "append_trainer_file": _try(os.path.join(decoys, APPEND_DECOY), os.O_WRONLY | os.O_APPEND),
        "create_beside_trainer_file": _try(os.path.join(decoys, CREATED), os.O_WRONLY | os.O_CREAT | os.O_EXCL),
        "read_trainer_private_file": _try(os.path.join(decoys, READ_DECOY), os.O_RDONLY),
    }

    def refused(route: str) -> bool:
        error = tried[route]
        return error is not None and error.errno in (errno.EACCES, errno.EPERM)

    return {
        "file_routes": {route: _answer(error) for route, error in tried.items()},
        "writes_confined": refused("append_trainer_file") and refused("create_beside_trainer_file"),
        "reads_confined": refused("read_trainer_private_file"),
    }
