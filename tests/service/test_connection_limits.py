"""Connections are bounded (issue 33): a connection that sends no request is closed, the number open is capped
below the descriptor limit, and the service log says when the cap refuses one (service/connection_limits.py).

Before: uvicorn starts no timer before a connection's first request, and accepts until accept() fails, so 1,100
idle connections under a 1,024 descriptor limit took the service down with nothing in the log. Here the same, at
a 256 limit, on `rljob serve` and on the image's ENTRYPOINT (uvicorn's command line), each a process of its own.
The connections that fill the cap each made one request with a valid token first: idle connections without one are
capped far below it (test_unauthenticated_connections.py).
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from harness.live_server import ThreadedServer, serving_process
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from service.connection_limits import FD_HEADROOM, ConnectionLimits, bounded_protocol
from service.free_port import free_port
from tests.service.conftest import add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import spec_body, wait_until
from tests.service.test_service_logging import TOKEN, _env

pytestmark = pytest.mark.timeout(120)

FD_LIMIT = 256
IDLE = 400  # more than the descriptor limit: before the cap, accept() failed with EMFILE from about the 240th
HEADER_TIMEOUT_S = 6.0  # long enough for the authenticated connections to be made before the first is closed
LIMITED = (
    f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({FD_LIMIT}, {FD_LIMIT})); os.execv(sys.argv[1], sys.argv[1:])"
)
ENTRYPOINT_HTTP = ["--http", "service.connection_limits:BoundedH11Protocol"]


def _argv(kind: str, port: int, state: Path) -> list[str]:
    if kind == "rljob serve":
        return [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port), "--state-dir", str(state)]
    uvicorn = str(Path(sys.executable).with_name("uvicorn"))  # the image's ENTRYPOINT (docker/service.Dockerfile)
    return [
        uvicorn,
        "service.app:create_app_from_env",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        *ENTRYPOINT_HTTP,
    ]


def _connect_idle(port: int, count: int, authenticated: int) -> list[socket.socket]:
    """`count` connections left idle, the first `authenticated` after one request with a valid token answered."""
    conns = []
    for i in range(count):
        if i < authenticated:
            kept = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            kept.request("GET", "/v1/jobs?limit=1", headers={"Authorization": f"Bearer {TOKEN}"})
            with kept.getresponse() as response:
                assert response.status == 200, response.status
                response.read()
            assert kept.sock is not None
            conns.append(kept.sock)
            continue
        try:
            conns.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:  # the listen backlog is full for a moment: the rest are enough
            break
    return conns


def _answer(conn: socket.socket) -> bytes:
    try:
        return conn.recv(200)
    except (TimeoutError, ConnectionResetError):
        return b"<no answer>"


@pytest.mark.parametrize("kind", ["rljob serve", "image entrypoint"])
def test_idle_connections_past_the_descriptor_limit_do_not_take_the_service_down(tmp_path: Path, kind: str) -> None:
    port, stderr_path = free_port(), tmp_path / "serve.stderr"
    env = _env(tmp_path / "state") | {"RLJOB_REQUEST_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S)}
    argv = [sys.executable, "-c", LIMITED, *_argv(kind, port, tmp_path / "state")]
    with serving_process(argv, env, port, stderr_path, TOKEN) as client:
        idle = _connect_idle(port, IDLE, authenticated=FD_LIMIT - FD_HEADROOM - 10)
        try:
            assert len(idle) > FD_LIMIT
            # Over the cap (the descriptor limit less FD_HEADROOM): a 503 saying why, and closed at once.
            answers = [_answer(conn) for conn in idle[FD_LIMIT - FD_HEADROOM + 10 :]]
            assert all(a.startswith(b"HTTP/1.1 503") and b"too many connections" in a for a in answers), answers[:3]
            # The idle ones under the cap are closed after the header deadline: the server ends them (EOF).
            started = time.monotonic()
            idle[0].settimeout(HEADER_TIMEOUT_S * 4)
            assert _answer(idle[0]) == b"" and time.monotonic() - started < HEADER_TIMEOUT_S * 4
            # And the service is whole: it answers, stores and launches.
            wait_until(lambda: client.get("/healthz").status_code == 200, timeout_s=HEADER_TIMEOUT_S * 4)
            submitted = client.post("/v1/jobs", json=spec_body(tmp_path, labels={"fake-steps": "1"}))
            assert submitted.status_code == 201, submitted.text
            job_id = submitted.json()["id"]
            wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["phase"] == "SUCCEEDED", timeout_s=60)
        finally:
            for conn in idle:
                conn.close()
    logged = [json.loads(line) for line in stderr_path.read_text().splitlines() if line.startswith("{")]
    refusals = [r["message"] for r in logged if r["logger"] == "service.connection_limits" and r["level"] == "WARNING"]
    assert refusals and "connection(s) with 503" in refusals[0], refusals
    assert f"at most {FD_LIMIT - FD_HEADROOM} connections" in stderr_path.read_text()


@pytest.fixture
def bounded_server(store: SqlJobStore, settings_factory: Callable[..., Settings]) -> Iterator[str]:
    """The app over a real socket with bounded connections and a 1 s header deadline."""
    add_test_tokens(store)
    app = create_app(settings_factory(), store=store, launcher=FakeLauncher(), progress=FakeProgress())
    limits = ConnectionLimits(max_connections=50, request_timeout_s=1.0, unauthenticated=25, unauthenticated_per_peer=25)
    running = ThreadedServer.start(app, http=bounded_protocol(limits))
    try:
        yield running.url
    finally:
        running.stop()


def test_a_connection_trickling_its_headers_is_closed_at_the_deadline(bounded_server: str) -> None:
    """A slowloris: a byte of headers every 0.3 s. Each byte cancels uvicorn's own keep-alive timer, so without the
    header deadline this connection stays open as long as the bytes come."""
    port = int(bounded_server.rsplit(":", 1)[1])
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    started, closed_after = time.monotonic(), None
    try:
        for byte in b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 40:
            conn.sendall(bytes([byte]))
            time.sleep(0.3)
    except (BrokenPipeError, ConnectionResetError):
        closed_after = time.monotonic() - started
    else:
        closed_after = time.monotonic() - started if _answer(conn) == b"" else None
    finally:
        conn.close()
    assert closed_after is not None and closed_after < 5, closed_after


def test_a_request_whose_headers_are_in_is_not_cut_and_the_connection_is_kept_for_the_next(bounded_server: str) -> None:
    with httpx.Client(base_url=bounded_server) as client:
        assert client.get("/healthz").status_code == 200
        time.sleep(0.5)  # under the deadline: the same connection serves the next request
        assert client.get("/healthz").status_code == 200
    # Past the deadline after a response, an idle keep-alive connection is closed; a new one is made and works.
    with httpx.Client(base_url=bounded_server) as client:
        assert client.get("/healthz").status_code == 200
        time.sleep(1.5)
        assert client.get("/healthz").status_code == 200


def test_the_cap_follows_the_descriptor_limit() -> None:
    def cap(configured: int, fd_limit: int) -> int:
        return ConnectionLimits.of(configured, 10.0, fd_limit, unauthenticated=256, unauthenticated_per_peer=32).max_connections

    assert cap(1000, fd_limit=1024) == 1024 - FD_HEADROOM
    assert cap(100, fd_limit=1024) == 100
    assert cap(100, fd_limit=64) == 1  # never zero: one still gets in
