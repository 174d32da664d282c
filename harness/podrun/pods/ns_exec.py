"""Become one container's PID 1: a user and a mount namespace of its own, its binds, then exec its argv.

Run by process.py as `python -I -S ns_exec.py PLAN.json` (standard library only: it runs before the
container's view exists). What it does, in the order a runtime does it:

1. unshare(CLONE_NEWUSER | CLONE_NEWNS) and map the container's uid/gid to ours. So `os.getuid()` says
   the pod's runAsUser while files are reached as this machine's user, as proot's `-i` did; and the
   process may mount inside its own mount namespace (its capabilities there end at exec unless uid 0).
2. A new root: a tmpfs holding a bind of each entry of this machine's `/`. Nothing on this machine
   changes: a mount point that does not exist yet is made on a tmpfs laid over its directory (the
   entries there bound back), except inside a bound volume or scratch directory, where it is made on
   the host as runc makes it.
3. The plan's binds, shallowest first so a deeper bind lands inside the one above it (proot's rule:
   the deepest bind covering a path wins). Symbolic links on the way are followed inside the new root.
4. chroot, chdir to the working directory, execve. This process is the container's PID 1.

Any failure before the exec prints one line to stderr and exits 128, as a runtime's StartError.
"""

from __future__ import annotations

import ctypes
import json
import os
import posixpath
import stat
import sys
import tempfile

MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)
_MAX_LINKS = 40  # Linux's limit on symbolic links followed in one lookup


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def c(s: str | None) -> bytes | None:
        return None if s is None else os.fsencode(s)

    if _libc.mount(c(source), c(target), c(fstype), ctypes.c_ulong(flags), c(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or fstype} on {target}: {os.strerror(err)}")


def _map_ids(uid: int, gid: int, outer_uid: int, outer_gid: int) -> None:
    with open("/proc/self/setgroups", "w") as f:  # required before an unprivileged gid_map
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {outer_uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {outer_gid} 1")


class NewRoot:
    """The container's root directory tree, built under `root` (a host path) without touching the host."""

    def __init__(self, root: str, keep: str) -> None:
        self.root, self.keep = root, keep
        self.own_dirs: set[str] = set()  # container dirs on a tmpfs of ours: a mount point is made there
        self.bound: list[str] = []  # container paths of binds made so far

    def host(self, guest: str) -> str:
        return self.root + guest if guest != "/" else self.root

    def build(self) -> None:
        _mount("tmpfs", self.root, "tmpfs", 0, "mode=755")
        self._mirror("/", "/")
        self.own_dirs.add("/")

    def _mirror(self, source: str, guest: str) -> None:
        """Each entry of the host directory `source` at the same name in `guest` (a tmpfs of ours)."""
        for name in sorted(os.listdir(source)):
            src, dst = posixpath.join(source, name), self.host(posixpath.join(guest, name))
            st = os.lstat(src)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(src), dst)
                continue
            if stat.S_ISDIR(st.st_mode):
                if os.path.realpath(src) == os.path.realpath(self.root):
                    continue  # the new root itself, reached through the host tree
                os.mkdir(dst)
            else:
                os.close(os.open(dst, os.O_CREAT | os.O_WRONLY, 0o644))
            _mount(src, dst, None, MS_BIND | MS_REC)

    def _shadow(self, guest: str) -> None:
        """Lay a tmpfs over the container directory `guest` with its entries bound back, so a new entry
        can be made there without creating it on the host."""
        saved = tempfile.mkdtemp(dir=self.keep)
        _mount(self.host(guest), saved, None, MS_BIND | MS_REC)
        _mount("tmpfs", self.host(guest), "tmpfs", 0, "mode=755")
        self._mirror(saved, guest)
        self.own_dirs.add(guest)

    def _may_create_in(self, guest: str) -> bool:
        if guest in self.own_dirs:
            return True
        return any(guest == b or guest.startswith(b.rstrip("/") + "/") for b in self.bound)

    def mount_point(self, guest: str, directory: bool) -> str:
        """The container path `guest` resolved through its links, made to exist as a directory or file."""
        path, todo, links = "/", [p for p in guest.split("/") if p], 0
        while todo:
            name = todo.pop(0)
            if name == ".":
                continue
            if name == "..":
                path = posixpath.dirname(path)
                continue
            nxt = posixpath.join(path, name)
            host = self.host(nxt)
            if os.path.islink(host):
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(f"too many levels of symbolic links resolving {guest}")
                target = os.readlink(host)
                path = "/" if target.startswith("/") else path
                todo = [p for p in target.split("/") if p] + todo
                continue
            if not os.path.lexists(host):
                if not self._may_create_in(path):
                    self._shadow(path)
                if todo or directory:
                    os.mkdir(host)
                else:
                    os.close(os.open(host, os.O_CREAT | os.O_WRONLY, 0o644))
            path = nxt
        return path

    def bind(self, source: str, guest: str) -> None:
        resolved = self.mount_point(guest, os.path.isdir(source))
        _mount(source, self.host(resolved), None, MS_BIND | MS_REC)
        self.bound.append(resolved)


def main(plan_path: str) -> None:
    with open(plan_path) as f:
        plan = json.load(f)
    outer_uid, outer_gid = os.geteuid(), os.getegid()
    os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNS)
    _map_ids(plan["uid"], plan["gid"], outer_uid, outer_gid)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here propagates back to the host
    root = NewRoot(plan["root"], plan["keep"])
    root.build()
    for host, guest in sorted(plan["binds"], key=lambda b: (b[1].rstrip("/").count("/"), b[1])):
        root.bind(host, guest)
    cwd = root.mount_point(plan["cwd"], True)
    os.chroot(root.root)
    os.chdir(cwd)  # noqa: TID251 - one thread, about to exec: this is the container's working directory
    argv = plan["argv"]
    os.execve(argv[0], argv, os.environ)  # the container's: process.py starts this with it


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except OSError as e:
        print(f"podrun: starting the container failed: {e}", file=sys.stderr, flush=True)
        os._exit(128)
