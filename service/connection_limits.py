"""The connections the service keeps open: a connection waiting for a request is closed after a deadline, and
the number open is capped below the process's file-descriptor limit, with a log line when the cap refuses one.

Why: uvicorn starts no timer before a connection's first request (its keep-alive timer runs only after a
response) and accepts until accept() fails, so 1,100 idle connections under a 1,024 descriptor limit took the
service down (the store and the run files could no longer be opened) with nothing in the log. The request
middleware (api/overload.py) cannot help: it sees requests, never a connection that sends none.

`BoundedH11Protocol` is uvicorn's h11 protocol with both rules; `rljob serve` passes a subclass bound to its
settings (`bounded_protocol`), the image names it on uvicorn's command line (`--http
service.connection_limits:BoundedH11Protocol`) and it reads the RLJOB_ settings from the environment, as the
image's app factory does. A connection over the cap gets a 503 with Retry-After and is closed at once; a
request whose headers are in is never cut here (its body has its own deadline: api/overload.py).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

FD_HEADROOM = 128  # descriptors kept for the store, run files, log files and the launcher's pipes
CAP_LOG_INTERVAL_S = 10.0  # a flood logs one line per interval, with the count refused since the last
_REFUSAL_TEXT = b"the service has too many connections open; retry in a moment"
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: "
    + str(len(_REFUSAL_TEXT)).encode()
    + b"\r\nConnection: close\r\n\r\n"
    + _REFUSAL_TEXT
)


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int
    request_timeout_s: float  # a connection waiting for a request's headers is closed after this

    @classmethod
    def of(cls, max_connections: int, request_timeout_s: float, fd_limit: int | None = None) -> ConnectionLimits:
        """The configured cap, lowered to fit the descriptor limit (RLIMIT_NOFILE's soft limit by default)."""
        if fd_limit is None:
            fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        fits = max(1, fd_limit - FD_HEADROOM) if fd_limit != resource.RLIM_INFINITY else max_connections
        if fits < max_connections:
            log.info(
                "at most %d connections: RLJOB_MAX_CONNECTIONS is %d, the descriptor limit %d (less %d kept for files)",
                fits,
                max_connections,
                fd_limit,
                FD_HEADROOM,
            )
        return cls(max_connections=min(max_connections, fits), request_timeout_s=request_timeout_s)

    @classmethod
    def from_env(cls) -> ConnectionLimits:
        from service.config import Settings

        settings = Settings()
        return cls.of(settings.max_connections, settings.request_header_timeout_s)


class _CapLog:
    """One warning per CAP_LOG_INTERVAL_S while the cap refuses connections, with how many."""

    def __init__(self) -> None:
        self.refused, self.last = 0, float("-inf")

    def refused_one(self, open_now: int, cap: int) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self.last >= CAP_LOG_INTERVAL_S:
            log.warning(
                "refused %d connection(s) with 503: %d open, the cap is %d (RLJOB_MAX_CONNECTIONS, or the descriptor limit less %d)",
                self.refused,
                open_now,
                cap,
                FD_HEADROOM,
            )
            self.refused, self.last = 0, now


class BoundedH11Protocol(H11Protocol):
    limits: ClassVar[ConnectionLimits | None] = None  # None: from the RLJOB_ environment, at the first connection
    cap_log: ClassVar[_CapLog] = _CapLog()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._request_deadline: asyncio.TimerHandle | None = None

    @classmethod
    def _limits(cls) -> ConnectionLimits:
        if cls.limits is None:
            cls.limits = ConnectionLimits.from_env()
        return cls.limits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limits = self._limits()
        if len(self.connections) > limits.max_connections:  # this one included
            self.cap_log.refused_one(len(self.connections), limits.max_connections)
            transport.write(REFUSAL)
            transport.close()
            return
        self._await_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_request()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._request_deadline is not None:
            self._request_deadline.cancel()
        super().connection_lost(exc)

    def _await_request(self) -> None:
        """From now the connection must deliver a request's headers within the deadline."""
        if self._request_deadline is not None:
            self._request_deadline.cancel()
        self._request_deadline = self.loop.call_later(self._limits().request_timeout_s, self._close_if_waiting)

    def _close_if_waiting(self) -> None:
        self._request_deadline = None
        waiting = self.cycle is None or self.cycle.response_complete  # no request's headers in since the last response
        if waiting and not self.transport.is_closing():
            self.transport.close()


def bounded_protocol(limits: ConnectionLimits) -> type[BoundedH11Protocol]:
    """BoundedH11Protocol with these limits (`rljob serve`, tests); its refusal log is its own."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"limits": limits, "cap_log": _CapLog()})
