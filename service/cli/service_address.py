"""Where the CLI reaches the service: an http(s):// URL, or `unix:PATH`, the Unix socket of `rljob serve --uds PATH`.

Over a socket every request goes to the base URL `http://rljob`: HTTP needs a host name, the socket decides where the
request goes, and the service reads no Host header. A socket's peer cannot vanish without the kernel closing the
connection, so it needs none of the TCP keepalive a stream over the network has (client.py).

When a socket cannot be reached, the message says which of the usual reasons it is: no socket there (the service is
not running), a socket nobody listens on (the service stopped without removing it), or permission denied (the socket's
file permissions decide who may connect: `rljob serve` makes it 0600, its own user's).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

UNIX_PREFIX = "unix:"
UNIX_BASE_URL = "http://rljob"


def unix_url(path: Path) -> str:
    """The URL `rljob serve --uds PATH` prints and writes for clients."""
    return f"{UNIX_PREFIX}{path}"


@dataclass(frozen=True)
class ServiceAddress:
    url: str  # as the user gave it, for messages
    base_url: str  # what httpx sends requests to
    socket: Path | None  # the Unix socket, when the URL is unix:PATH

    @classmethod
    def parse(cls, url: str) -> ServiceAddress:
        """`unix:PATH` (a relative PATH is taken from the current directory), or any URL httpx takes."""
        if not url.startswith(UNIX_PREFIX):
            return cls(url=url, base_url=url, socket=None)
        given = url.removeprefix(UNIX_PREFIX)
        if given.startswith("//"):  # unix:///run/x.sock, as some tools write it
            given = given[2:]
        if not given:
            raise ValueError(f"{url!r} names no socket: write unix:/path/to/rljob.sock")
        return cls(url=url, base_url=UNIX_BASE_URL, socket=Path(os.path.abspath(os.path.expanduser(given))))

    def owner_problem(self) -> str | None:
        """Why the CLI will not send its token to this socket: it belongs to another user, who could have put a
        socket of their own where the service's was (the token would be theirs to use). None when it is ours, absent,
        or not a socket (connecting then says what is wrong)."""
        if self.socket is None:
            return None
        try:
            found = os.stat(self.socket)
        except OSError:
            return None
        # One this user may not open is refused by its mode on connect, and that message says what decides access.
        if not stat.S_ISSOCK(found.st_mode) or found.st_uid == os.geteuid() or not os.access(self.socket, os.W_OK):
            return None
        return (
            f"{self.socket} belongs to uid {found.st_uid}, not to you (uid {os.geteuid()}): the CLI sends its token only to "
            "a socket its own user owns, as `rljob serve --uds` makes it; run the CLI as the user who started the service"
        )

    def connect_problem(self, error: Exception) -> str | None:
        """Why connecting to the socket failed, in words, when this is a Unix socket and the reason is known."""
        if self.socket is None:
            return None
        path = self.socket
        code = _errno(error)
        if code == errno.EACCES or code == errno.EPERM:
            return (
                f"permission denied on {path} (or a directory above it): access to the service's socket is decided by its "
                "file permissions (`rljob serve --uds` makes it 0600: only the user who started the service may connect); "
                "run the CLI as that user"
            )
        try:
            found = os.stat(path)
        except FileNotFoundError:
            return f"cannot reach the rljob service at {self.url}: no such socket (is `rljob serve --uds {path}` running?)"
        except OSError as e:
            return f"cannot reach the rljob service at {self.url}: {e.strerror or e}"
        if not stat.S_ISSOCK(found.st_mode):
            return f"cannot reach the rljob service at {self.url}: {path} is not a socket"
        if code == errno.ECONNREFUSED:
            return (
                f"cannot reach the rljob service at {self.url}: nothing listens on the socket (the service that made it has "
                f"stopped; start `rljob serve --uds {path}` again)"
            )
        return None


def _errno(error: BaseException) -> int | None:
    """The errno of the OSError under httpx's and httpcore's wrappers, if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            return current.errno
        current = current.__cause__ or current.__context__
    return None
