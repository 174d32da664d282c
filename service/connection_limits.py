"""The connections the service keeps open: a connection waiting for a request is closed after a deadline, the
number open is capped below the process's file-descriptor limit, with a log line when the cap refuses one, and
those on which no request has passed the token check are capped below that.

Why: uvicorn starts no timer before a connection's first request (its keep-alive timer runs only after a
response) and accepts until accept() fails, so 1,100 idle connections under a 1,024 descriptor limit took the
service down (the store and the run files could no longer be opened) with nothing in the log. The request
middleware (api/overload.py) cannot help: it sees requests, never a connection that sends none.

`BoundedH11Protocol` is uvicorn's h11 protocol with these rules; `rljob serve` passes a subclass bound to its
settings (`bounded_protocol`), the image names it on uvicorn's command line (`--http
service.connection_limits:BoundedH11Protocol`) and it reads the RLJOB_ settings from the environment, as the
image's app factory does. A connection over the cap gets a 503 with Retry-After and is closed at once; a
request whose headers are in is never cut here (its body has its own deadline: api/overload.py).

The third keeps those without a token from holding the slots teams need: connections no request has authenticated
yet are capped per peer and in total, at most half the connection cap (unauthenticated_connections.py says how and
why); each request's scope carries its connection's handle (CONNECTION_EXTENSION) for the token check to call.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import logging
import resource
import termios
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar
from weakref import WeakKeyDictionary

from uvicorn.protocols.http.h11_impl import H11Protocol

from service.unauthenticated_connections import CONNECTION_EXTENSION, UnauthenticatedConnections

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send
    from uvicorn.server import ServerState

    from service.config import Settings

log = logging.getLogger(__name__)

FD_HEADROOM = 128  # descriptors kept for the store, run files, log files and the launcher's pipes
CAP_LOG_INTERVAL_S = 10.0  # a flood logs one line per interval, with the count refused since the last


def _refusal(text: bytes) -> bytes:
    """A 503 written straight to a connection no request of which is being answered, then closed."""
    head = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: "
    return head + str(len(text)).encode() + b"\r\nConnection: close\r\n\r\n" + text


REFUSAL = _refusal(b"the service has too many connections open; retry in a moment")
UNAUTHENTICATED_REFUSAL = _refusal(
    b"the service has too many connections open without a valid token; retry in a moment, sending your token at once"
)


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int
    request_timeout_s: float  # a connection waiting for a request's headers is closed after this
    unauthenticated: int  # connections no request has authenticated yet, in total
    unauthenticated_per_peer: int  # the same, from one peer (unauthenticated_connections.peer_key)

    @classmethod
    def of(
        cls,
        max_connections: int,
        request_timeout_s: float,
        fd_limit: int | None = None,
        *,
        unauthenticated: int,
        unauthenticated_per_peer: int,
    ) -> ConnectionLimits:
        """The configured caps, the connection cap lowered to fit the descriptor limit (RLIMIT_NOFILE's soft limit by
        default), the unauthenticated one to at most half the connection cap: the other half is always the teams'."""
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
        capped = min(max_connections, fits)
        without_token = min(unauthenticated, max(1, capped // 2))
        if without_token < unauthenticated:
            log.info(
                "at most %d connections without a valid token: RLJOB_MAX_UNAUTHENTICATED_CONNECTIONS is %d, half the "
                "connection cap %d is kept for teams",
                without_token,
                unauthenticated,
                capped,
            )
        return cls(
            max_connections=capped,
            request_timeout_s=request_timeout_s,
            unauthenticated=without_token,
            unauthenticated_per_peer=min(unauthenticated_per_peer, without_token),
        )

    @classmethod
    def from_settings(cls, settings: Settings, fd_limit: int | None = None) -> ConnectionLimits:
        return cls.of(
            settings.max_connections,
            settings.request_header_timeout_s,
            fd_limit,
            unauthenticated=settings.max_unauthenticated_connections,
            unauthenticated_per_peer=settings.max_unauthenticated_connections_per_peer,
        )

    @classmethod
    def from_env(cls) -> ConnectionLimits:
        from service.config import Settings

        return cls.from_settings(Settings())


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


class _UnauthenticatedCapLog:
    """One warning per CAP_LOG_INTERVAL_S while the unauthenticated caps close or refuse connections, with how many."""

    def __init__(self) -> None:
        self.closed, self.refused, self.last = 0, 0, float("-inf")

    def note(self, closed: int, refused: int, limits: ConnectionLimits) -> None:
        self.closed, self.refused = self.closed + closed, self.refused + refused
        now = time.monotonic()
        if now - self.last >= CAP_LOG_INTERVAL_S:
            log.warning(
                "closed %d idle connection(s) and refused %d with 503 that had sent no request with a valid token: at most "
                "%d such are kept, %d from one address (RLJOB_MAX_UNAUTHENTICATED_CONNECTIONS, _PER_PEER)",
                self.closed,
                self.refused,
                limits.unauthenticated,
                limits.unauthenticated_per_peer,
            )
            self.closed, self.refused, self.last = 0, 0, now


@dataclass
class _ServerCounts:
    """What one server's connections share (uvicorn's ServerState holds the set of them; this, the rest)."""

    unauthenticated: UnauthenticatedConnections[BoundedH11Protocol]
    closing: set[BoundedH11Protocol] = field(default_factory=set)  # closed here, not yet lost: no longer open
    cap_log: _CapLog = field(default_factory=_CapLog)
    unauthenticated_log: _UnauthenticatedCapLog = field(default_factory=_UnauthenticatedCapLog)


_COUNTS: WeakKeyDictionary[ServerState, _ServerCounts] = WeakKeyDictionary()  # one event loop per server: no lock


class BoundedH11Protocol(H11Protocol):
    limits: ClassVar[ConnectionLimits | None] = None  # None: from the RLJOB_ environment, at the first connection

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._request_deadline: asyncio.TimerHandle | None = None
        self.app = _WithConnection(self.app, self)
        counts = _COUNTS.get(self.server_state)
        if counts is None:
            limits = self._limits()
            unauthenticated = UnauthenticatedConnections[BoundedH11Protocol](limits.unauthenticated_per_peer, limits.unauthenticated)
            counts = _COUNTS[self.server_state] = _ServerCounts(unauthenticated)
        self.counts = counts

    @classmethod
    def _limits(cls) -> ConnectionLimits:
        if cls.limits is None:
            cls.limits = ConnectionLimits.from_env()
        return cls.limits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limits, counts = self._limits(), self.counts
        # Those closed here and not yet lost no longer count: a flood's evictions would otherwise fill the cap for a turn.
        open_now = len(self.connections) - len(counts.closing)
        if open_now > limits.max_connections:  # this one included
            counts.cap_log.refused_one(open_now, limits.max_connections)
            self._refuse(REFUSAL)
            return
        admission = counts.unauthenticated.admit(self, self.client[0] if self.client else None, _idle)
        for evicted in admission.evicted:
            evicted._close()
        if admission.evicted or admission.refused:
            counts.unauthenticated_log.note(len(admission.evicted), int(admission.refused), limits)
        if admission.refused:
            self._refuse(UNAUTHENTICATED_REFUSAL)
            return
        self._await_request()

    def mark_authenticated(self) -> None:
        """A request on this connection passed the token check: it no longer counts as unauthenticated."""
        self.counts.unauthenticated.discard(self)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_request()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._request_deadline is not None:
            self._request_deadline.cancel()
        self.counts.unauthenticated.discard(self)
        self.counts.closing.discard(self)
        super().connection_lost(exc)

    def _close(self) -> None:
        self.counts.closing.add(self)
        self.transport.close()

    def _refuse(self, answer: bytes) -> None:
        self.transport.write(answer)
        self._close()

    def _await_request(self) -> None:
        """From now the connection must deliver a request's headers within the deadline."""
        if self._request_deadline is not None:
            self._request_deadline.cancel()
        self._request_deadline = self.loop.call_later(self._limits().request_timeout_s, self._close_if_waiting)

    def _close_if_waiting(self) -> None:
        self._request_deadline = None
        waiting = self.cycle is None or self.cycle.response_complete  # no request's headers in since the last response
        if waiting and not self.transport.is_closing():
            self._close()


def _idle(conn: BoundedH11Protocol) -> bool:
    """No request in progress and no byte of the next one waiting in the socket (the loop may not have read it yet)."""
    if conn.transport.is_closing():
        return True
    if conn.cycle is not None and not conn.cycle.response_complete:
        return False
    sock = conn.transport.get_extra_info("socket")
    if sock is None:
        return True
    waiting = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, waiting)
    except OSError:
        return True  # not a socket the kernel can say this of: no request can be seen waiting
    return waiting[0] == 0


class _WithConnection:
    """The app, with the connection's handle in each request's scope, for the token check to call."""

    def __init__(self, app: ASGIApp, conn: BoundedH11Protocol) -> None:
        self.app, self.handle = app, {"authenticated": conn.mark_authenticated}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault("extensions", {})[CONNECTION_EXTENSION] = self.handle
        await self.app(scope, receive, send)


def bounded_protocol(limits: ConnectionLimits) -> type[BoundedH11Protocol]:
    """BoundedH11Protocol with these limits (`rljob serve`, tests)."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"limits": limits})
