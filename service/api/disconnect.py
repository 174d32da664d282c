"""Cancelling the work of a request whose client has gone before its answer started.

uvicorn lets an app run to its end after the client disconnected; under overload those are exactly
the requests whose clients timed out, and finishing them only delays the ones still wanted. This
middleware watches the connection from the request's first wait, once its body has been read (at once
for a request without one), and cancels the request's task when the client leaves before the response
has started (a request answered without waiting has nothing to cancel and starts no watch). What is
already running in a worker thread finishes (a thread cannot be interrupted), but a request still
waiting for a thread, the database or a dependency stops there. After the response has started,
nothing is cancelled: a streaming response watches for the disconnect itself.
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.types import ASGIApp, Message, Receive, Scope, Send

DISCONNECT: Message = {"type": "http.disconnect"}


def has_body(scope: Scope) -> bool:
    """Whether the request declares a body (a length above 0, or chunks); a scan of the raw headers, since this runs
    on every request (starlette's Headers would build a view of them first)."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value not in (b"", b"0")):
            return True
    return False


class _ConnectionWatch:
    """Stands between the app and uvicorn's `receive`, so that exactly one of them reads it at a time:
    the app while the body is coming, the watch after it. Its event and queue are made when first needed: most
    requests are answered without a wait, and never need them."""

    def __init__(self, receive: Receive, *, body_expected: bool) -> None:
        self._receive = receive
        self._body_read: asyncio.Event | None = asyncio.Event() if body_expected else None
        self._queue: asyncio.Queue[Message] | None = None
        self.disconnected = False

    @property
    def _inbox(self) -> asyncio.Queue[Message]:
        if self._queue is None:
            self._queue = asyncio.Queue()
        return self._queue

    async def receive(self) -> Message:
        if self._body_read is not None and not self._body_read.is_set():
            message = await self._receive()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                self._body_read.set()
            return message
        if self._inbox.empty() and self.disconnected:
            return DISCONNECT
        return await self._inbox.get()

    async def watch(self, on_disconnect: asyncio.Event) -> None:
        if self._body_read is not None:
            await self._body_read.wait()
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                on_disconnect.set()
                self._inbox.put_nowait(message)
                return
            self._inbox.put_nowait(message)  # a bodiless request's one http.request, kept for the app


class CancelOnDisconnectMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.cancelled = 0  # requests cancelled because their client left (tests, metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        task = asyncio.current_task()
        if task is None:  # not under a running task (never under uvicorn): nothing to cancel
            await self.app(scope, receive, send)
            return
        connection = _ConnectionWatch(receive, body_expected=has_body(scope))
        started, cancelling = False, False
        helpers: list[asyncio.Task[None]] = []

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def cancel_when_left(left: asyncio.Event) -> None:
            nonlocal cancelling
            await left.wait()
            if not started:
                cancelling = True
                task.cancel()

        def start_watching() -> None:
            left = asyncio.Event()
            helpers.extend((asyncio.create_task(connection.watch(left)), asyncio.create_task(cancel_when_left(left))))

        # The watch starts when the request first waits (the loop runs this only then): a request answered
        # without waiting (a status read from memory) has nothing to cancel, and pays for no tasks.
        first_wait = asyncio.get_running_loop().call_soon(start_watching)
        try:
            await self.app(scope, connection.receive, tracking_send)
        except asyncio.CancelledError:
            if not cancelling or task.cancelling() > 1:
                raise  # someone else's cancellation (a server shutting down): let it through
            task.uncancel()
            self.cancelled += 1  # the client left; there is nobody to answer
        finally:
            first_wait.cancel()
            for helper in helpers:
                helper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await helper
