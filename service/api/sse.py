"""Server-Sent Events framing for the event routes (api/routes/events.py).

The routes stream a plain StreamingResponse instead of FastAPI's EventSourceResponse: FastAPI's
keepalive task raised BrokenResourceError whenever a client went away while events were flowing
(a closed dashboard tab, a CLI interrupted), and every such disconnect logged a traceback at ERROR.
Here the route's own loop writes the events and, when it has been idle for KEEPALIVE_S, a comment
line, so proxies keep the connection open; a disconnect just cancels that loop.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

KEEPALIVE_S = 15.0
KEEPALIVE = b": keepalive\n\n"

STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "an event stream: `event:` the kind, `id:` the seq (resume with Last-Event-ID), `data:` JSON",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


def sse_event(kind: str, event_id: int, data: dict[str, Any]) -> bytes:
    # One line of JSON: json.dumps escapes newlines inside strings, so `data:` needs no splitting.
    return f"event: {kind}\nid: {event_id}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def sse_response(stream: AsyncIterator[bytes]) -> StreamingResponse:
    # X-Accel-Buffering: nginx would otherwise hold events back until its buffer fills.
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
