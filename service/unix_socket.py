"""The Unix socket `rljob serve --uds PATH` listens on instead of a TCP port (a TPU VM may have no TCP at all, not even
loopback): bound here, with its mode fixed before anyone can connect, and handed to uvicorn as a ready socket.

Why not uvicorn's own `uds=`: uvicorn 0.54 chmods the socket to 0o666 after binding it (server.py, `startup`), so any
local user could reach the API until someone noticed, and asyncio's `create_unix_server` first deletes whatever
socket is at the path, a running service's included. Here:
- the socket is bound under umask 0o177, so the file is 0600 from the moment it exists: only the user who started the
  service (and root) can connect; a token is still required on every request;
- a missing parent directory is created 0700 (one that exists is left as it is);
- a path that exists and is not a socket is refused and left untouched; a socket that someone answers on (or that
  does not answer within PROBE_TIMEOUT_S) is refused; a socket nobody answers on (left by a service that was killed)
  is replaced;
- the service holds an exclusive flock on `PATH.lock` from before that check until it exits, so two services started
  on one path at once cannot both find it stale and the second unlink the first's socket;
- on exit the socket is removed, unless the path no longer holds the file this process bound.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

SOCKET_MODE = 0o600
DIRECTORY_MODE = 0o700
# sockaddr_un.sun_path on Linux; Python refuses a longer path with "AF_UNIX path too long".
MAX_PATH_BYTES = 108
BACKLOG = 2048  # uvicorn's default
PROBE_TIMEOUT_S = 2.0  # a live service accepts at once; one that does not within this is not one to replace


class UnixSocketRefused(ValueError):
    """The socket cannot be made at this path; the message says why and what to do."""


@dataclass(frozen=True)
class BoundUnixSocket:
    sock: socket.socket
    path: Path
    identity: tuple[int, int]  # (st_dev, st_ino) of the file bound: what `close` checks is still there
    lock_fd: int  # PATH.lock, flocked while this service owns the path

    def close(self) -> None:
        """Close the socket (uvicorn closes it too when it stops), remove its file if the path still holds the one
        this process bound, then let go of the path's lock."""
        self.sock.close()
        with contextlib.suppress(OSError):
            found = os.lstat(self.path)
            if (found.st_dev, found.st_ino) == self.identity:
                os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(self.lock_fd)


def _lock_path(path: Path) -> int:
    """An exclusive flock on PATH.lock (made 0600 if missing), held until closed; UnixSocketRefused if another holds it."""
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, SOCKET_MODE)
    except OSError as e:
        raise UnixSocketRefused(f"cannot open the socket's lock file {lock}: {e.strerror or e}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UnixSocketRefused(
            f"another rljob serve holds {lock}: it is starting or serving on {path}; stop it first, or choose another path"
        ) from None
    return fd


def socket_path(given: str | os.PathLike[str]) -> Path:
    """The absolute path a socket is bound at and named by (`unix:PATH`), `~` expanded; not resolved, so the URL
    names the path the operator chose."""
    return Path(os.path.abspath(os.path.expanduser(given)))


def bind_unix_socket(given: str | os.PathLike[str]) -> BoundUnixSocket:
    """A listening Unix socket at `given`, mode 0600; UnixSocketRefused when the path cannot be used."""
    path = socket_path(given)
    if len(os.fsencode(path)) > MAX_PATH_BYTES:
        raise UnixSocketRefused(
            f"{path} is {len(os.fsencode(path))} bytes long; a Unix socket's path may have at most {MAX_PATH_BYTES}: choose a shorter one"
        )
    _make_parent(path.parent)
    lock_fd = _lock_path(path)
    try:
        _clear_stale(path)
        sock = _listen(path)
    except BaseException:
        os.close(lock_fd)
        raise
    found = os.lstat(path)
    return BoundUnixSocket(sock, path, (found.st_dev, found.st_ino), lock_fd)


def _listen(path: Path) -> socket.socket:
    sock, bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), False
    try:
        # The umask is the process's: bind before any thread that creates files starts (serve does it first).
        previous = os.umask(0o777 & ~SOCKET_MODE)
        try:
            sock.bind(str(path))
            bound = True
        finally:
            os.umask(previous)
        # A default ACL on the directory overrides the umask; nobody can connect before listen(), so this leaves no window.
        os.chmod(path, SOCKET_MODE)
        found = os.lstat(path)
        if stat.S_IMODE(found.st_mode) != SOCKET_MODE:
            raise OSError(errno.EPERM, f"its mode is {stat.S_IMODE(found.st_mode):o} after chmod {SOCKET_MODE:o}")
        sock.listen(BACKLOG)
    except OSError as e:
        sock.close()
        if bound:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise UnixSocketRefused(f"cannot listen on {path}: {e.strerror or e}") from e
    return sock


def _make_parent(directory: Path) -> None:
    if directory.is_dir():
        return
    try:
        directory.mkdir(mode=DIRECTORY_MODE, parents=True)
    except OSError as e:
        raise UnixSocketRefused(f"cannot create the socket's directory {directory}: {e.strerror or e}") from e


def _clear_stale(path: Path) -> None:
    """Nothing at `path`, or a socket nobody answers on (removed); else UnixSocketRefused, the file left untouched."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise UnixSocketRefused(f"cannot check {path}: {e.strerror or e}") from e
    if not stat.S_ISSOCK(found.st_mode):
        raise UnixSocketRefused(f"{path} exists and is not a socket; it was left untouched: remove it or choose another path")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT_S)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        pass  # nobody listens: a socket left by a service that did not remove it (killed)
    except TimeoutError:
        raise UnixSocketRefused(
            f"a service on {path} did not accept a connection in {PROBE_TIMEOUT_S:g} s: it may be stuck; stop it first, "
            "or choose another path"
        ) from None
    except OSError as e:
        raise UnixSocketRefused(f"cannot check whether a service listens on {path}: {e.strerror or e}") from e
    else:
        raise UnixSocketRefused(f"a service already listens on {path}: stop it first, or choose another path")
    finally:
        probe.close()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise UnixSocketRefused(f"{path} is a socket nobody listens on, and it cannot be removed: {e.strerror or e}") from e
