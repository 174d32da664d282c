"""Read-only mounts and `readOnlyRootFilesystem`, enforced for Python code in the container.

The runner does not build a real container root filesystem, so it cannot mount anything read-only.
Instead every Python process in the container starts with an audit hook that refuses, with EROFS "Read-only file system"
as the kernel would, any write-like operation (open for writing, mkdir, remove, rename, chmod, SQLite
connect, ...) on a path under a read-only mount, or, with readOnlyRootFilesystem, on any path outside
the writable mounts and /dev, /proc, /sys. Writes by native code that bypass Python's audit events
(a C library opening files itself, a non-Python child process) are not caught.

The hook is installed by a line appended to a copy of a `.pth` file the venv's site-packages already
has, bound over it in the container's view only: site runs `.pth` lines that start with `import` at
every interpreter start (`-I` included, `-S` not). Not a `sitecustomize.py`: proot makes a missing
bind target visible by creating an empty placeholder in the host directory and deletes it when it
exits, so with pods starting and stopping side by side Python's listing of site-packages sometimes
missed the file and the process ran unguarded (about 1 start in 6 with four pods at a time). A file
that exists on the host needs no placeholder.
"""

from __future__ import annotations

_TEMPLATE = r"""# Installed by harness/podrun (guard.py) into this container's view only; see there.
import errno as _errno
import os as _os
import sys as _sys

_POLICY = __POLICY__
_EXEMPT = ("/dev", "/proc", "/sys")
_WRITE_FLAGS = _os.O_WRONLY | _os.O_RDWR | _os.O_APPEND | _os.O_CREAT | _os.O_TRUNC


def _under(path, prefixes):
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def _check(path):
    if isinstance(path, int) or path is None:
        return
    try:
        text = _os.path.abspath(_os.fsdecode(path))
    except (TypeError, ValueError):
        return
    if _under(text, _POLICY["read_only"]):
        raise OSError(_errno.EROFS, "Read-only file system", text)
    if _POLICY["read_only_root"] and not _under(text, _POLICY["writable"]) and not _under(text, _EXEMPT):
        raise OSError(_errno.EROFS, "Read-only file system", text)


def _hook(event, args):
    if event == "open":
        path, mode, flags = (list(args) + [None, None])[:3]
        writes = isinstance(mode, str) and any(c in mode for c in "wax+")
        writes = writes or (isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
        if writes:
            _check(path)
    elif event in ("os.mkdir", "os.rmdir", "os.remove", "os.truncate", "os.chmod", "os.chown", "os.utime",
                   "os.mkfifo", "os.mknod"):
        dir_fd = None if event == "os.truncate" else args[-1]
        if dir_fd is None:  # relative to a directory fd: cannot be resolved here (shutil.rmtree is checked whole)
            _check(args[0])
    elif event == "shutil.rmtree":
        _check(args[0])
    elif event in ("os.rename", "os.replace"):
        _check(args[0])
        _check(args[1])
    elif event in ("os.link", "os.symlink"):
        _check(args[1])
    elif event == "sqlite3.connect":
        db = args[0] if args else None
        if isinstance(db, (str, bytes)) and _os.fsdecode(db) not in ("", ":memory:") and not _os.fsdecode(db).startswith("file:"):
            _check(db)


_sys.addaudithook(_hook)
"""


def guard_source(*, read_only_root: bool, writable: list[str], read_only: list[str]) -> str:
    policy = {"read_only_root": read_only_root, "writable": sorted(writable), "read_only": sorted(read_only)}
    return _TEMPLATE.replace("__POLICY__", repr(policy))


def guarded_pth(original: str, source: str) -> str:
    """The `.pth` text the container sees: the venv's own lines, then one that runs the guard in a namespace
    of its own (site execs `.pth` lines inside a function, whose locals the hook's functions could not see)."""
    line = f"import builtins; builtins.exec(compile({source!r}, '<podrun guard>', 'exec'), {{'__name__': '_podrun_guard'}})"
    return original + ("" if not original or original.endswith("\n") else "\n") + line + "\n"
