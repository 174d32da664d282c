"""CancelOnDisconnectMiddleware on plain ASGI calls: a request that waits is cancelled when its client leaves before
the answer starts; one answered without waiting (the status read from memory) starts no watch at all, so it pays
for no tasks. Each assertion fails with its mechanism removed (the cancellation; the watch's deferred start)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from service.api import disconnect
from service.api.disconnect import CancelOnDisconnectMiddleware, has_body

SCOPE: dict[str, Any] = {"type": "http", "method": "GET", "path": "/", "headers": []}


class Connection:
    """uvicorn's side of one request: the bodiless request's message, then nothing until the client leaves."""

    def __init__(self) -> None:
        self.left = asyncio.Event()
        self.sent: list[dict[str, Any]] = []
        self._request_given = False

    async def receive(self) -> dict[str, Any]:
        if not self._request_given:
            self._request_given = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


async def answer_at_once(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


def test_a_request_that_waits_is_cancelled_when_its_client_leaves() -> None:
    finished: list[bool] = []

    async def waits(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(30)  # a worker thread or the database, as far as the middleware knows
        finished.append(True)
        await answer_at_once(scope, receive, send)

    async def main() -> CancelOnDisconnectMiddleware:
        middleware = CancelOnDisconnectMiddleware(waits)
        connection = Connection()
        request = asyncio.create_task(middleware(SCOPE, connection.receive, connection.send))
        await asyncio.sleep(0.05)
        connection.left.set()
        done, _ = await asyncio.wait({request}, timeout=5)  # wait() cancels nothing itself
        assert done, "the request still runs after its client left"
        return middleware

    middleware = asyncio.run(main())
    assert middleware.cancelled == 1 and not finished


def test_a_request_answered_without_waiting_starts_no_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[object] = []
    create_task = asyncio.create_task

    def counted(coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        started.append(coro)
        return create_task(coro, **kwargs)

    monkeypatch.setattr(disconnect.asyncio, "create_task", counted)

    async def main() -> list[dict[str, Any]]:
        connection = Connection()
        await CancelOnDisconnectMiddleware(answer_at_once)(SCOPE, connection.receive, connection.send)
        await asyncio.sleep(0)  # a watch scheduled but not started would start here
        return connection.sent

    sent = asyncio.run(main())
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert started == [], f"{len(started)} watch tasks started for a request that never waited"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], False),
        ([(b"content-length", b"0")], False),
        ([(b"content-length", b"")], False),
        ([(b"content-length", b"12")], True),
        ([(b"transfer-encoding", b"chunked")], True),
        ([(b"host", b"x"), (b"authorization", b"Bearer t")], False),
    ],
)
def test_a_body_is_expected_only_when_declared(headers: list[tuple[bytes, bytes]], expected: bool) -> None:
    # The load shedder reads a declared body under its deadline and takes a bodiless request's one message at once.
    assert has_body({"type": "http", "headers": headers}) is expected
