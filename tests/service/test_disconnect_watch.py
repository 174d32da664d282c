"""CancelOnDisconnectMiddleware on plain ASGI calls: a request that waits is cancelled when its client leaves before
the answer starts (fails with the middleware's task.cancel() removed)."""

from __future__ import annotations

import asyncio
from typing import Any

from service.api.disconnect import CancelOnDisconnectMiddleware

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
