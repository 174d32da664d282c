"""A TCP port on the loopback interface that nothing listens on, for `rljob demo` and the tests to start
a server on: the server is a child process (or another thread) that must be told its port up front.

The port is free when the OS hands it out; the probe socket is closed before the server binds it, so
another process could take it in between: a race `rljob demo` and the tests accept (the server then
fails to start, loudly), which binding port 0 in the server itself would avoid only by reporting the
port back some other way.
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]  # (host, port) for an AF_INET socket
        return port
