"""Server-Sent Events framing for the event routes (api/routes/events.py).

The routes stream a plain StreamingResponse instead of FastAPI's EventSourceResponse: FastAPI's
keepalive task raised BrokenResourceError whenever a client went away while events were flowing
(a closed dashboard tab, a CLI interrupted), and every such disconnect logged a traceback at ERROR.
Here the route's own loop writes the events and, when it has been idle for KEEPALIVE_S, a comment
line, so proxies keep the connection open; a disconnect just cancels that loop.

A stream the service ends early (the client fell too far behind, or the service is stopping) ends
with a `reconnect` event: its `id` is the last seq sent, its `retry:` how long to wait, so an
EventSource (or `rljob`) resumes with Last-Event-ID and misses nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from service.domain.records.models import JobEvent, JobPublic

KEEPALIVE_S = 15.0
KEEPALIVE = b": keepalive\n\n"
RECONNECT_RETRY_MS = 1000


class StreamHello(BaseModel):
    """The first event of /v1/events: where "now" is, so a client can resume from it."""

    team: str | None = Field(description="the team whose jobs are streamed; null: every team (admins)")
    after: int = Field(description="the stream sends events after this seq")


class StreamReconnect(BaseModel):
    """The last event of a stream the service ended early: reconnect with Last-Event-ID = `last_event_id`."""

    reason: str = Field(description="slow: the client read slower than events arrived; shutdown: the service is stopping")
    last_event_id: int = Field(description="the last seq this stream sent (also the event's id)")


# Models the stream documents refer to; api/openapi.py puts them into the schema's components.
STREAM_MODELS: tuple[type[BaseModel], ...] = (JobEvent, JobPublic, StreamHello, StreamReconnect)


def _event(kind: dict[str, Any], data_model: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["event", "id", "data"],
        "properties": {
            "event": kind,
            "id": {"type": "string", "pattern": "^[0-9]+$", "description": "the seq; send it back as Last-Event-ID"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"$ref": f"#/components/schemas/{data_model.__name__}"},
            },
        },
    }


def stream_response(first_kind: str, first_model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """The 200 of an event route: OpenAPI 3.1 reads a text/event-stream `schema` as one event's.
    The first event (`first_kind`) carries `first_model`; a `reconnect` a StreamReconnect; every other a JobEvent."""
    first, reconnect = _event({"const": first_kind}, first_model), _event({"const": "reconnect"}, StreamReconnect)
    later = _event({"not": {"enum": [first_kind, "reconnect"]}}, JobEvent)
    one_event = {"oneOf": [first, later, reconnect]}
    description = (
        f"`{first_kind}` first, then the job events (`event:` their kind, `data:` a JobEvent); a stream the "
        "service ends early ends with `reconnect` (resume with Last-Event-ID)"
    )
    return {200: {"description": description, "content": {"text/event-stream": {"schema": one_event}}}}


def sse_event(kind: str, event_id: int, data: dict[str, Any]) -> bytes:
    # One line of JSON: json.dumps escapes newlines inside strings, so `data:` needs no splitting.
    return f"event: {kind}\nid: {event_id}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def sse_reconnect(last_event_id: int, reason: str) -> bytes:
    data = StreamReconnect(reason=reason, last_event_id=last_event_id).model_dump()
    return f"retry: {RECONNECT_RETRY_MS}\n".encode() + sse_event("reconnect", last_event_id, data)


def sse_response(stream: AsyncIterator[bytes]) -> StreamingResponse:
    # X-Accel-Buffering: nginx would otherwise hold events back until its buffer fills.
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
