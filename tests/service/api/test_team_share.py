"""A team's share of the request pool (issue 33): any valid token used to be able to hold all the request places
(slow bodies, slow log reads) while every other team got 503. Now, on the app over a real uvicorn and sockets:
- one team holds at most `max_requests_per_team` places; another team's requests still get in at once;
- an authenticated request's body must arrive within `body_timeout_s` (408), as an anonymous one's already had to;
- a request is answered within `request_deadline_s`, and a log read that takes longer is cut and its place freed.
Each fails with its mechanism removed (checked by hand: the team tally, the body read, the deadline)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.live_server import served
from service.adapters.store import SqlJobStore
from service.app import create_app
from tests.service.api.test_load_shedding import HeldLogs, _hold_logs
from tests.service.conftest import add_test_tokens
from tests.service.service_fakes import FakeProgress
from tests.service.service_helpers import TOKEN_A, TOKEN_B, spec_body, wait_until

pytestmark = pytest.mark.timeout(120)
A = {"Authorization": f"Bearer {TOKEN_A}"}
B = {"Authorization": f"Bearer {TOKEN_B}"}
DEADLINE_S = 3.0


class LogsOrHeld(HeldLogs):
    """HeldLogs, or, with `lines` set, that many log lines at once."""

    lines = 0

    def logs(self, job_id: str, *, follow: bool = False, tail_lines: int | None = None) -> Iterator[str | None]:
        if not self.lines:
            yield from super().logs(job_id, follow=follow, tail_lines=tail_lines)
            return
        for i in range(self.lines):
            yield f"step {i:07d} " + "x" * 36


@pytest.fixture
def service(store: SqlJobStore, settings_factory: Callable[..., Any], tmp_path: Path) -> Iterator[tuple[str, LogsOrHeld, str, str]]:
    add_test_tokens(store)
    launcher = LogsOrHeld()
    settings = settings_factory(
        max_requests_in_flight=6, max_requests_per_team=2, body_timeout_s=1.0, request_deadline_s=DEADLINE_S, overload_retry_after_s=2
    )
    app = create_app(settings, store=store, launcher=launcher, progress=FakeProgress())
    with served(app) as url:
        a = httpx.post(f"{url}/v1/jobs", json=spec_body(tmp_path), headers=A)
        b = httpx.post(f"{url}/v1/jobs", json=spec_body(tmp_path, name="job-b"), headers=B)
        assert a.status_code == b.status_code == 201, (a.text, b.text)
        try:
            yield url, launcher, a.json()["id"], b.json()["id"]
        finally:
            launcher.release.set()


def test_one_team_holds_its_share_and_another_team_still_gets_in(service: tuple[str, LogsOrHeld, str, str]) -> None:
    url, launcher, job_a, job_b = service
    held = _hold_logs(url, job_a, 2, launcher)  # team A's share, held by slow log reads
    refused = httpx.get(f"{url}/v1/jobs/{job_a}", headers=A)
    # Without the per-team tally this is a 200: the pool (6) has room.
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "2", refused.text
    assert "team team-a already has 2 requests in flight, its share of the service's 6" in refused.json()["detail"]
    started = time.monotonic()
    assert httpx.get(f"{url}/v1/jobs/{job_b}", headers=B).status_code == 200
    assert time.monotonic() - started < 2.0
    launcher.release.set()
    for thread in held:
        thread.join(30)
    wait_until(lambda: httpx.get(f"{url}/v1/jobs/{job_a}", headers=A).status_code == 200, timeout_s=10)


def test_an_authenticated_body_that_does_not_arrive_is_408_and_frees_the_place(service: tuple[str, LogsOrHeld, str, str]) -> None:
    url, _, job_a, _ = service
    host, port = url.removeprefix("http://").split(":")
    slow = []
    for _ in range(2):  # team A's whole share, each sending headers and then nothing of its body
        conn = socket.create_connection((host, int(port)), timeout=10)
        conn.sendall(
            b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
            b"Authorization: Bearer " + TOKEN_A.encode() + b"\r\n\r\n"
        )
        slow.append(conn)
    try:
        answers = [conn.recv(300) for conn in slow]  # without the body deadline: no answer (the recv times out)
        assert all(a.startswith(b"HTTP/1.1 408") and b"did not arrive in time" in a for a in answers), answers
        assert httpx.get(f"{url}/v1/jobs/{job_a}", headers=A).status_code == 200  # the share is free again
    finally:
        for conn in slow:
            conn.close()


def test_a_log_read_past_the_deadline_is_cut_and_its_place_freed(service: tuple[str, LogsOrHeld, str, str]) -> None:
    """A client that asks for a long log and reads none of it: the service waits on the socket (flow control), holding
    the place, until the deadline cuts the response and closes the connection."""
    url, launcher, job_a, _ = service
    launcher.lines = 400_000  # about 20 MB: far more than the socket buffers take
    host, port = url.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)), timeout=30)
    try:
        conn.sendall(f"GET /v1/jobs/{job_a}/logs HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN_A}\r\n\r\n".encode())
        wait_until(lambda: httpx.get(f"{url}/v1/jobs/{job_a}", headers=A).status_code == 200, timeout_s=5)
        started = time.monotonic()
        time.sleep(DEADLINE_S + 1)  # reading nothing
        received = 0
        while chunk := conn.recv(1 << 20):  # now read: the response ends before its 20 MB (the server closed)
            received += len(chunk)
        assert received < 19_000_000, received  # without the deadline it is sent whole
        assert time.monotonic() - started < DEADLINE_S + 20
    finally:
        conn.close()
    assert httpx.get(f"{url}/v1/jobs/{job_a}", headers=A).status_code == 200
