"""Nobody without a token holds the door (issue 51 part 4): connections on which no request has passed the token
check are capped per peer and in total, below the connection cap, so teams are served while a client without a token
re-opens idle connections as fast as they are closed (service/unauthenticated_connections.py).

Before: one such client kept every team at 503 (89 of 90 GETs); every connection slot was held by connections that
had never sent a byte. Here a real uvicorn on 127.0.0.1 with the service's protocol, flooded from a thread through
several loopback addresses (127.0.0.0/8 is all loopback on Linux), while two teams GET on fresh connections.
"""

from __future__ import annotations

import http.client
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from harness.live_server import ThreadedServer
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from service.connection_limits import ConnectionLimits, bounded_protocol
from service.unauthenticated_connections import UnauthenticatedConnections, peer_key
from tests.service.conftest import add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, TOKEN_B, wait_until

pytestmark = pytest.mark.timeout(120)

MAX_CONNECTIONS = 80
FLOOD_SOURCES = [f"127.0.0.{i}" for i in range(2, 18)]  # 16 addresses, none the teams' 127.0.0.1
PER_PEER = 8  # 16 x 8 = 128 > MAX_CONNECTIONS: without the total cap the flood alone fills every slot
TOTAL = 32
# Paced: a team's connection leaves the count once its request is read, and here the team's client shares the GIL
# with the server and the flood, so its request can lag its connection by milliseconds (over a network it follows the
# handshake at once). Unpaced, the flood opens TOTAL connections within that lag and closes the team's before it
# speaks. Paced or not, without the caps nothing closes the flood's connections: it holds every slot.
FLOOD_OPENS_PER_S = 500.0
FLOOD_OPENS = 20_000  # bounds the flood's work; the time bound below ends it first in practice
FLOOD_S = 60.0
TEAM_GETS = 20  # per team, each on a fresh connection
BURST_CAP = 8  # the burst's requests are one team's: all of them within its share of requests at once (16)


@dataclass
class Flood:
    """Idle connections from `sources`, re-opened as soon as the server closes one, `hold` kept open at once."""

    port: int
    sources: list[str]
    hold: int
    stop: threading.Event
    opened: int = 0
    closed_by_server: int = 0
    refused: int = 0  # connect() failed (the listen backlog full for a moment)

    def run(self) -> None:
        selector = selectors.DefaultSelector()
        started = time.monotonic()
        try:
            while not self.stop.is_set() and self.opened < FLOOD_OPENS and time.monotonic() < started + FLOOD_S:
                paced = min(FLOOD_OPENS, int((time.monotonic() - started) * FLOOD_OPENS_PER_S) + 1)
                while len(selector.get_map()) < self.hold and self.opened < paced:
                    source = self.sources[self.opened % len(self.sources)]
                    self.opened += 1
                    try:
                        conn = socket.create_connection(("127.0.0.1", self.port), timeout=2, source_address=(source, 0))
                    except OSError:
                        self.refused += 1
                        break
                    conn.setblocking(False)
                    selector.register(conn, selectors.EVENT_READ)
                for key, _ in selector.select(timeout=0.005):  # the server closed it (EOF, or a 503 then EOF)
                    selector.unregister(key.fileobj)
                    key.fileobj.close()  # type: ignore[union-attr]
                    self.closed_by_server += 1
        finally:
            for key in list(selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            selector.close()


@contextmanager
def flooding(port: int, sources: list[str], hold: int) -> Iterator[Flood]:
    """The flood in a thread, once it has opened `hold` connections; stopped and joined (bounded) after."""
    flood = Flood(port, sources, hold, threading.Event())
    thread = threading.Thread(target=flood.run, name="idle-flood", daemon=True)
    thread.start()
    try:
        wait_until(lambda: flood.opened >= hold, timeout_s=20)
        yield flood
    finally:
        flood.stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive()


@pytest.fixture
def serve(tmp_path: Path, settings_factory: Callable[..., Settings]) -> Iterator[Callable[..., ThreadedServer]]:
    """Start the app (a SQLite file, fake launcher) on a real uvicorn with the service's protocol and these limits."""
    store = SqlJobStore(f"sqlite:///{tmp_path / 'rljob.db'}")
    store.migrate()
    add_test_tokens(store)
    running: list[ThreadedServer] = []

    def start(limits: ConnectionLimits, loop: str = "auto") -> ThreadedServer:
        app = create_app(settings_factory(), store=store, launcher=FakeLauncher(), progress=FakeProgress())
        running.append(ThreadedServer.start(app, http=bounded_protocol(limits), loop=loop))
        return running[-1]

    try:
        yield start
    finally:
        for server in running:
            server.stop()
        store.close()


def _limits(per_peer: int = PER_PEER, total: int = TOTAL) -> ConnectionLimits:
    # A header deadline longer than the test: only the caps close the flood's connections.
    return ConnectionLimits(
        max_connections=MAX_CONNECTIONS, request_timeout_s=60.0, unauthenticated=total, unauthenticated_per_peer=per_peer
    )


def _port(server: ThreadedServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _team_get(url: str, token: str) -> int | str:
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10) as client:  # a new connection
            return client.get("/v1/jobs").status_code
    except httpx.TransportError as e:
        return type(e).__name__


@pytest.mark.parametrize("loop", ["auto", "asyncio"])  # uvloop where installed; asyncio's own accepts in batches
def test_teams_are_served_while_idle_connections_without_a_token_flood_the_service(serve: Callable[..., ThreadedServer], loop: str) -> None:
    server = serve(_limits(), loop)
    with flooding(_port(server), FLOOD_SOURCES, hold=MAX_CONNECTIONS + 10) as flood:
        answers = Counter(_team_get(server.url, token) for _ in range(TEAM_GETS) for token in (TOKEN_A, TOKEN_B))
    assert answers == {200: 2 * TEAM_GETS}, (answers, flood)
    # The flood really ran against the caps: far more connections than the service has slots, most closed under it.
    assert flood.opened > 2 * MAX_CONNECTIONS and flood.closed_by_server > MAX_CONNECTIONS, flood


def _get(conn: http.client.HTTPConnection, path: str, token: str | None) -> int:
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
    response = conn.getresponse()
    response.read()
    return response.status


@pytest.mark.parametrize(
    "path",
    [
        "/v1/jobs",  # the token checked by the load shedder (api/overload.py)
        "/v1/jobs/rl-000000000000/logs?follow=true",  # by the route alone (api/deps.py): log follows skip the shedder
    ],
)
def test_a_teams_kept_alive_connection_is_not_closed_by_the_flood(serve: Callable[..., ThreadedServer], path: str) -> None:
    """Once a request on it passed the token check, a connection no longer counts: the flood's closing of the oldest
    idle connections without a token never reaches it, though it is older and idle."""
    server = serve(_limits())
    kept = http.client.HTTPConnection("127.0.0.1", _port(server), timeout=10)
    try:
        first = _get(kept, path, TOKEN_A)
        assert first in (200, 404), first
        assert kept.sock is not None
        local = kept.sock.getsockname()
        with flooding(_port(server), FLOOD_SOURCES, hold=MAX_CONNECTIONS + 10) as flood:
            wait_until(lambda: flood.closed_by_server > 4 * TOTAL, timeout_s=30)
            assert _get(kept, path, TOKEN_A) == first  # RemoteDisconnected when the flood had it closed
        assert kept.sock.getsockname() == local  # the same connection, not a new one
    finally:
        kept.close()


def test_one_address_flooding_closes_only_its_own_connections(serve: Callable[..., ThreadedServer]) -> None:
    """The per-peer cap: an idle keep-alive connection from another address, older than the whole flood, stays open
    (the total cap alone would close it first, as the oldest idle connection without a token)."""
    server = serve(_limits())
    other = http.client.HTTPConnection("127.0.0.1", _port(server), timeout=10)
    try:
        assert _get(other, "/v1/jobs", None) == 401  # no token: the connection stays unauthenticated
        with flooding(_port(server), FLOOD_SOURCES[:1], hold=3 * PER_PEER) as flood:
            wait_until(lambda: flood.closed_by_server > 4 * TOTAL, timeout_s=30)
        assert _get(other, "/v1/jobs", None) == 401  # RemoteDisconnected when the flood had it closed
    finally:
        other.close()


@contextmanager
def loop_held(server: ThreadedServer) -> Iterator[None]:
    """The server's event loop stopped until the block ends: what connects meanwhile is accepted in one turn."""
    held = threading.Event()
    server.server.servers[0].get_loop().call_soon_threadsafe(held.wait, 20)
    try:
        yield
    finally:
        held.set()


def test_connections_closed_to_make_room_no_longer_count_toward_the_cap(serve: Callable[..., ThreadedServer]) -> None:
    """A flood accepted in one turn: each connection past the caps closes an older one, which leaves the server's set
    of connections only a turn later. Counted as open until then, they would fill the connection cap, and the team's
    connection that comes last would be refused."""
    server = serve(_limits(), "asyncio")
    flood = []
    try:
        with loop_held(server):
            for i in range(MAX_CONNECTIONS + 10):
                source = FLOOD_SOURCES[i % len(FLOOD_SOURCES)]
                flood.append(socket.create_connection(("127.0.0.1", _port(server)), timeout=10, source_address=(source, 0)))
            team = socket.create_connection(("127.0.0.1", _port(server)), timeout=10)
            team.sendall(f"GET /v1/jobs HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN_A}\r\nConnection: close\r\n\r\n".encode())
        assert _read_all(team).startswith(b"HTTP/1.1 200 OK")
    finally:
        for conn in flood:
            conn.close()


def test_a_burst_whose_requests_are_waiting_is_answered_not_dropped(serve: Callable[..., ThreadedServer]) -> None:
    """Connections accepted in one turn of the event loop, before any is read: those past the cap find no idle one to
    close (each has its request waiting in the socket) and get a 503 with Retry-After; none is closed unanswered.
    asyncio's loop (uvicorn's without uvloop) runs every connection_made of a burst before reading any of them."""
    server = serve(_limits(per_peer=BURST_CAP, total=BURST_CAP), "asyncio")
    conns = []
    try:
        with loop_held(server):
            for _ in range(2 * BURST_CAP):
                conn = socket.create_connection(("127.0.0.1", _port(server)), timeout=10)
                conn.sendall(f"GET /v1/jobs HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN_A}\r\nConnection: close\r\n\r\n".encode())
                conns.append(conn)
        status_lines = Counter(_read_all(conn).split(b"\r\n", 1)[0] for conn in conns)
    finally:
        for conn in conns:
            conn.close()
    assert status_lines == {b"HTTP/1.1 200 OK": BURST_CAP, b"HTTP/1.1 503 Service Unavailable": BURST_CAP}, status_lines


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    except (ConnectionResetError, TimeoutError):
        pass
    return b"".join(chunks)


# The rules themselves, on the count alone.


def _always_idle(_: object) -> bool:
    return True


def test_over_a_peers_cap_its_oldest_idle_connection_makes_room() -> None:
    conns = UnauthenticatedConnections[str](per_peer=2, total=10)
    assert conns.admit("a1", "10.0.0.1", _always_idle).evicted == ()
    assert conns.admit("b1", "10.0.0.2", _always_idle).evicted == ()
    assert conns.admit("a2", "10.0.0.1", _always_idle).evicted == ()
    third = conns.admit("a3", "10.0.0.1", _always_idle)
    assert third.evicted == ("a1",) and not third.refused
    assert conns.of_peer("10.0.0.1") == 2 and len(conns) == 3


def test_over_the_total_cap_the_oldest_idle_connection_of_any_peer_makes_room() -> None:
    conns = UnauthenticatedConnections[str](per_peer=5, total=2)
    conns.admit("a1", "10.0.0.1", _always_idle)
    conns.admit("b1", "10.0.0.2", _always_idle)
    assert conns.admit("c1", "10.0.0.3", _always_idle).evicted == ("a1",)


def test_a_connection_that_is_not_idle_is_never_closed_and_without_room_the_new_one_is_refused() -> None:
    busy = {"a1"}
    conns = UnauthenticatedConnections[str](per_peer=5, total=2)
    conns.admit("a1", "10.0.0.1", _always_idle)
    conns.admit("a2", "10.0.0.1", _always_idle)
    assert conns.admit("a3", "10.0.0.1", lambda c: c not in busy).evicted == ("a2",)
    busy.add("a3")
    assert conns.admit("a4", "10.0.0.1", lambda c: c not in busy).refused
    assert len(conns) == 2


def test_an_authenticated_connection_no_longer_counts() -> None:
    conns = UnauthenticatedConnections[str](per_peer=1, total=1)
    conns.admit("a1", "10.0.0.1", _always_idle)
    conns.discard("a1")
    conns.discard("a1")  # again when it closes
    assert conns.admit("a2", "10.0.0.1", lambda c: False).evicted == () and len(conns) == 1


def test_a_peer_is_an_ipv4_address_or_an_ipv6_64() -> None:
    assert peer_key("10.1.2.3") == "10.1.2.3"
    assert peer_key("2001:db8:1:2:aaaa::1") == peer_key("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert peer_key("2001:db8:1:3::1") != peer_key("2001:db8:1:2::1")
    assert peer_key("::ffff:10.1.2.3") == "10.1.2.3"
    assert peer_key(None) == ""


def test_the_unauthenticated_caps_stay_below_half_the_connection_cap() -> None:
    limits = ConnectionLimits.of(1000, 10.0, fd_limit=1024, unauthenticated=2000, unauthenticated_per_peer=5000)
    assert limits.max_connections == 1024 - 128
    assert limits.unauthenticated == (1024 - 128) // 2 and limits.unauthenticated_per_peer == limits.unauthenticated
    assert ConnectionLimits.of(1000, 10.0, fd_limit=4096, unauthenticated=256, unauthenticated_per_peer=32).unauthenticated == 256
