"""Request bodies over `max_body_bytes` get 413 with the service's error body, `{"detail": ...}`.

Starlette's own limiter (FastAPI's `max_body_size`) answers in text/plain, and it replaces any
response with that once a too-large Content-Length is seen, so a client cannot rely on the error
model the schema declares. Here a declared length over the limit is refused before the app runs;
a body that turns out too long while it is read (chunked) raises an HTTPException from the read,
which the app's exception handling turns into the same JSON 413.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def too_large_detail(max_body_bytes: int) -> str:
    return f"the request body is over {max_body_bytes} bytes, the service's limit; send a smaller job spec"


class BodyTooLarge(HTTPException):
    def __init__(self, max_body_bytes: int) -> None:
        super().__init__(status_code=413, detail=too_large_detail(max_body_bytes))


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((value for name, value in scope.get("headers", ()) if name == b"content-length"), b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            response = JSONResponse({"detail": too_large_detail(self.max_body_bytes)}, status_code=413)
            await response(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
            return message

        await self.app(scope, limited_receive, send)
