"""A directory path opened one level at a time, each level without following a link: what serving a run's files
(run_reads.py) and deleting its checkpoints (checkpoint_deleter.py) both stand on, so that a symlink a job planted in
its run directory never takes a read or a delete outside it."""

from __future__ import annotations

import os
from collections.abc import Callable

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# Called with (the fd of the level above, the name that failed, its depth in `names`, the error), while that fd is
# open: the exception to raise instead, or None to raise the error itself.
Refusal = Callable[[int, str, int, OSError], Exception | None]


def open_dir_chain(base: str, names: list[str], refusal: Refusal) -> int | None:
    """An fd of base/names..., `base` opened as given (the spec's output, as policy checked it) and every name below it
    with O_NOFOLLOW relative to the one above; None when any level is missing."""
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    for depth, name in enumerate(names):
        try:
            next_fd = os.open(name, DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            os.close(fd)
            return None
        except OSError as e:
            try:
                refused = refusal(fd, name, depth, e)
            finally:
                os.close(fd)
            if refused is None:
                raise
            raise refused from e
        os.close(fd)
        fd = next_fd
    return fd
