"""Cancelling the work of a request whose client has gone before its answer started.

uvicorn lets an app run to its end after the client disconnected; under overload those are exactly
the requests whose clients timed out, and finishing them only delays the ones still wanted. This
middleware watches the connection once the request body has been read (at once for a request without
one) and cancels the request's task when the client leaves before the response has started. What is
already running in a worker thread finishes (a thread cannot be interrupted), but a request still
waiting for a thread, the database or a dependency stops there. After the response has started,
nothing is cancelled: a streaming response watches for the disconnect itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

DISCONNECT: Message = {"type": "http.disconnect"}


def has_body(scope: Scope) -> bool:
    """Whether the request declares a body (a length other than 0, or chunked); read from the raw headers,
    without building a Headers for each request."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value not in (b"", b"0")):
            return True
    return False


class _ConnectionWatch:
    """Stands between the app and uvicorn's `receive`, so that exactly one of them reads it at a time:
    the app while the body is coming, the watch after it."""

    def __init__(self, receive: Receive, *, body_expected: bool) -> None:
        self._receive = receive
        self._body_read = asyncio.Event()
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.disconnected = False
        if not body_expected:
            self._body_read.set()

    async def receive(self) -> Message:
        if not self._body_read.is_set():
            message = await self._receive()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                self._body_read.set()
            return message
        if self._inbox.empty() and self.disconnected:
            return DISCONNECT
        return await self._inbox.get()

    async def watch(self, on_disconnect: Callable[[], None]) -> None:
        await self._body_read.wait()
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                self._inbox.put_nowait(message)
                on_disconnect()
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

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        def cancel_if_not_started() -> None:  # the client left
            nonlocal cancelling
            if not started:
                cancelling = True
                task.cancel()

        # One helper task per request (the watch cancels the request itself): a status read is a few
        # hundred microseconds, and each task or event more was a measurable part of it.
        watcher = asyncio.create_task(connection.watch(cancel_if_not_started))
        try:
            await self.app(scope, connection.receive, tracking_send)
        except asyncio.CancelledError:
            if not cancelling or task.cancelling() > 1:
                raise  # someone else's cancellation (a server shutting down): let it through
            task.uncancel()
            self.cancelled += 1  # the client left; there is nobody to answer
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
