"""Overload, on the app the image runs (create_app over a real uvicorn and real sockets):
- at the limit an authenticated request gets 503 with Retry-After at once, probes never, and the
  service recovers after;
- requests without a valid token have a budget of their own: slow uploads without one cannot take the
  places of authenticated requests, and they end with 408 when their body is late;
- one token holds at most its share of the event streams;
- a request whose client left while it waited for a worker thread gives its place back at once.
Each fails with its mechanism removed (the shedding middleware, the anonymous budget, the per-token
share, the disconnect cancellation): see the note at each assertion.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx
import pytest

from harness.live_server import served
from service.adapters.store import SqlJobStore
from service.api.overload import LoadSheddingMiddleware
from service.app import create_app
from tests.service.conftest import add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, TOKEN_B, spec_body, wait_until

pytestmark = pytest.mark.timeout(120)
A = {"Authorization": f"Bearer {TOKEN_A}"}
B = {"Authorization": f"Bearer {TOKEN_B}"}


class HeldLogs(FakeLauncher):
    """`logs()` holds its reader (a worker thread) until released: a request that stays in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.holding = 0

    def logs(self, job_id: str, *, follow: bool = False, tail_lines: int | None = None) -> Iterator[str | None]:
        self.holding += 1
        self.release.wait(60)
        yield "released"


class ThreadLimit:
    """ASGI wrapper that gives the app's event loop `tokens` worker threads, so requests queue for one."""

    def __init__(self, app: Any, tokens: int) -> None:
        self.app, self.tokens, self.set = app, tokens, False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not self.set and scope["type"] == "http":
            anyio.to_thread.current_default_thread_limiter().total_tokens = self.tokens
            self.set = True
        await self.app(scope, receive, send)


@pytest.fixture
def service(store: SqlJobStore, settings_factory: Callable[..., Any], tmp_path: Path) -> Iterator[tuple[str, HeldLogs, str]]:
    add_test_tokens(store)
    launcher = HeldLogs()
    settings = settings_factory(
        max_requests_in_flight=2,
        max_event_streams=10,
        max_event_streams_per_token=2,
        max_anonymous_requests=2,
        # Long enough that the refusals below are observed while the slow uploads still hold their places on a
        # loaded CI machine (at 1 s, the postgres run once saw them end first and the anonymous POST get in).
        anonymous_body_timeout_s=4.0,
        overload_retry_after_s=3,
    )
    app = create_app(settings, store=store, launcher=launcher, progress=FakeProgress())
    with served(app) as url:
        job = httpx.post(f"{url}/v1/jobs", json=spec_body(tmp_path), headers=A)
        assert job.status_code == 201, job.text
        try:
            yield url, launcher, job.json()["id"]
        finally:
            launcher.release.set()


def _hold_logs(url: str, job_id: str, count: int, launcher: HeldLogs) -> list[threading.Thread]:
    threads = [
        threading.Thread(target=httpx.get, args=(f"{url}/v1/jobs/{job_id}/logs",), kwargs={"headers": A, "timeout": 60})
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    wait_until(lambda: launcher.holding == count, timeout_s=10)
    return threads


def test_at_the_limit_a_request_gets_503_with_retry_after_and_the_service_recovers(service: tuple[str, HeldLogs, str]) -> None:
    url, launcher, job_id = service
    held = _hold_logs(url, job_id, 2, launcher)
    refused = httpx.get(f"{url}/v1/jobs/{job_id}", headers=A)
    # Without the middleware this is a 200: nothing else on the app refuses a third request.
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "3", refused.text
    assert "limit of 2 requests at once" in refused.json()["detail"]
    assert httpx.get(f"{url}/healthz").status_code == 200 and httpx.get(f"{url}/readyz").status_code == 200
    assert "rljob_requests_shed" in httpx.get(f"{url}/metrics").text
    launcher.release.set()
    for thread in held:
        thread.join(30)
    assert httpx.get(f"{url}/v1/jobs/{job_id}", headers=A).status_code == 200


def _slow_upload(url: str) -> socket.socket:
    """A POST without a valid token that sends its headers and then nothing of its 1,000-byte body."""
    host, port = url.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)), timeout=10)
    conn.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    return conn


def test_requests_without_a_valid_token_cannot_take_the_places_of_those_with_one(service: tuple[str, HeldLogs, str]) -> None:
    url, _, job_id = service
    slow = [_slow_upload(url) for _ in range(3)]  # more than the whole request budget (2)
    try:
        wait_until(lambda: httpx.get(f"{url}/", follow_redirects=False).status_code == 503, timeout_s=10)
        # Counted apart: an authenticated request still gets in (with one pool for all, this is a 503).
        assert httpx.get(f"{url}/v1/jobs/{job_id}", headers=A).status_code == 200
        assert httpx.post(f"{url}/v1/jobs", json={}, headers={"Authorization": "Bearer rlj_not-a-token"}).status_code == 503
        # Their bodies are late: after anonymous_body_timeout_s the two counted ones end with 408.
        answers = []
        for conn in slow:
            try:
                answers.append(conn.recv(200).split(b" ")[1])
            except (TimeoutError, IndexError):
                answers.append(b"none")
        assert sorted(answers)[:2] == [b"408", b"408"], answers  # without the timeout they wait for ever
        wait_until(lambda: httpx.get(f"{url}/v1/jobs").status_code == 401, timeout_s=10)  # places free again
    finally:
        for conn in slow:
            conn.close()


def _open_stream(url: str, headers: dict[str, str]) -> tuple[socket.socket, bytes]:
    host, port = url.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)), timeout=10)
    auth = headers["Authorization"].encode()
    conn.sendall(b"GET /v1/events HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\nAuthorization: " + auth + b"\r\n\r\n")
    return conn, conn.recv(200).split(b" ")[1]


def test_one_token_holds_at_most_its_share_of_the_event_streams(service: tuple[str, HeldLogs, str]) -> None:
    url, _, _ = service
    opened = [_open_stream(url, A) for _ in range(2)]
    try:
        assert [status for _, status in opened] == [b"200", b"200"]
        third = httpx.get(f"{url}/v1/events", headers=A, timeout=10)
        # Without the share this is a stream like the others (10 places in all).
        assert third.status_code == 503 and "its share" in third.json()["detail"], third.text
        other_team, status = _open_stream(url, B)
        other_team.close()
        assert status == b"200"
    finally:
        for conn, _ in opened:
            conn.close()
    wait_until(lambda: _open_stream(url, A)[1] == b"200", timeout_s=10)  # closed streams give their places back


def _shedder(app: Any) -> LoadSheddingMiddleware:
    """The app's own load shedder (its middleware stack is built at start-up)."""
    layer = app.middleware_stack
    while not isinstance(layer, LoadSheddingMiddleware):
        layer = layer.app
    return layer


def test_a_request_whose_client_left_gives_its_place_back_at_once(
    store: SqlJobStore, settings_factory: Callable[..., Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    add_test_tokens(store)
    launcher = HeldLogs()
    settings = settings_factory(max_requests_in_flight=3)
    app = create_app(settings, store=store, launcher=launcher, progress=FakeProgress())
    caplog.set_level(logging.WARNING)
    with served(ThreadLimit(app, tokens=2)) as url:
        job_id = httpx.post(f"{url}/v1/jobs", json=spec_body(tmp_path), headers=A).json()["id"]
        held = _hold_logs(url, job_id, 2, launcher)  # both worker threads, two of the three places
        # A sync route waits for a thread; its client gives up. Cancelled, it frees its place at once
        # (without the cancellation it holds it until a thread frees, and the next request is a 503).
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(f"{url}/v1/jobs/{job_id}/samples", headers=A, timeout=httpx.Timeout(5, read=0.5))
        shedder = _shedder(app)
        wait_until(lambda: shedder.requests.in_flight == 2, timeout_s=5)  # the two held ones only
        launcher.release.set()
        for thread in held:
            thread.join(30)
    problems = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert not problems, problems[:2]
