"""A reward's files: the reward file and the Python beside it that it may import.

MaxText's loader puts the reward file's directory on sys.path (utils_rl.load_custom_callable), and so does the
worker (worker.py), so a reward may import a neighbour: `helpers.py`, or a package (a directory with `__init__.py`).
Wherever the file is copied for a worker that cannot read the original (the reward container, a worker running as
another uid, a gs:// file staged for the train stage) the same set goes with it, chosen by one rule here:
- the reward file itself, and every `*.py` regular file in its directory;
- each subdirectory holding an `__init__.py`, recursively, its `*.py` files likewise, at most PACKAGE_DEPTH deep;
- nothing else (data files, caches, symlinks), and at most MAX_FILES files and MAX_BYTES bytes in all: a reward file
  left in a large directory is refused with the bound it broke, not copied in part.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

MAX_FILES = 64
MAX_BYTES = 8 * 1024 * 1024
PACKAGE_DEPTH = 3


class RewardFilesRefused(ValueError):
    """The reward's directory holds more Python than a reward's files may be: the message names the bound."""


def select_reward_files(entries: Iterable[tuple[str, int]], reward_name: str) -> list[str]:
    """From (relative posix path, size) of every regular file under the reward file's directory, the ones that go
    with it, in a stable order. Raises RewardFilesRefused past MAX_FILES or MAX_BYTES."""
    sized = {path: size for path, size in entries}
    packages = {str(PurePosixPath(p).parent) for p in sized if PurePosixPath(p).name == "__init__.py"}

    def wanted(path: str) -> bool:
        parts = PurePosixPath(path).parts
        if path == reward_name:
            return True
        if not path.endswith(".py") or len(parts) > PACKAGE_DEPTH + 1:
            return False
        # every directory on the way is a package: a/b/c.py needs a/__init__.py and a/b/__init__.py
        return all("/".join(parts[:i]) in packages for i in range(1, len(parts)))

    chosen = sorted(p for p in sized if wanted(p))
    total = sum(sized[p] for p in chosen)
    if len(chosen) > MAX_FILES or total > MAX_BYTES:
        raise RewardFilesRefused(
            f"the reward file's directory holds {len(chosen)} Python files of {total} bytes that it may import; a reward "
            f"takes at most {MAX_FILES} files and {MAX_BYTES // (1024 * 1024)} MiB: put the reward file and what it "
            "imports in a directory of their own"
        )
    return chosen


def local_reward_files(path: str) -> list[str]:
    """The reward's files beside `path` on this machine (relative to its directory). Symlinks are never followed."""
    root = Path(path).parent
    entries: list[tuple[str, int]] = []
    for directory, subdirs, files in os.walk(root, followlinks=False):
        depth = len(Path(directory).relative_to(root).parts)
        if depth >= PACKAGE_DEPTH:
            subdirs.clear()
        subdirs[:] = [d for d in subdirs if os.path.isfile(os.path.join(directory, d, "__init__.py"))]
        for name in files:
            full = os.path.join(directory, name)
            info = os.lstat(full)
            if os.path.isfile(full) and not os.path.islink(full) and info.st_size >= 0:
                entries.append((Path(full).relative_to(root).as_posix(), info.st_size))
    return select_reward_files(entries, Path(path).name)


def copy_reward_files(path: str, target: Path, file_mode: int = 0o644, dir_mode: int = 0o755, owner: tuple[int, int] | None = None) -> str:
    """The reward's files copied under `target` (which must not exist), with these modes (whatever the umask) and
    owner; returns where the reward file now is."""
    root = Path(path).parent
    names = local_reward_files(path)
    made = [target]
    target.mkdir(mode=dir_mode)
    for name in names:
        destination = target / name
        for parent in reversed(PurePosixPath(name).parents[:-1]):
            if not (target / parent).exists():
                (target / parent).mkdir(mode=dir_mode)
                made.append(target / parent)
        with open(root / name, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NOFOLLOW)) as source:
            with open(destination, "xb") as out:
                shutil.copyfileobj(source, out)
        made.append(destination)
    for entry in made:
        entry.chmod(dir_mode if entry.is_dir() else file_mode)
        if owner is not None:
            os.chown(entry, *owner)
    return str(target / Path(path).name)
