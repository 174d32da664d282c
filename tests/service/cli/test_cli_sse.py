"""The CLI's event-stream client (RljobClient.sse, on httpx-sse) against scripted HTTP answers: events
cut anywhere, even between CR and LF; a dropped connection resumes from the last event id; what is
not an event stream is a message, not a traceback."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from service.cli.client import ClientConfig, CliError, CliExit, RljobClient

STREAM = {"content-type": "text/event-stream"}


class Chunks(httpx.SyncByteStream):
    """The body in the given pieces, then (optionally) the connection dropping."""

    def __init__(self, pieces: list[bytes], drop: bool = False) -> None:
        self.pieces, self.drop = pieces, drop

    def __iter__(self) -> Iterator[bytes]:
        yield from self.pieces
        if self.drop:
            raise httpx.ReadError("connection reset by peer")


def _client(handler: Callable[[httpx.Request], httpx.Response], sleeps: list[float] | None = None) -> RljobClient:
    config = ClientConfig(url="http://rljob.test", token="t" * 40, config_file=None)
    return RljobClient(config, transport=httpx.MockTransport(handler), sleep=(sleeps if sleeps is not None else []).append)


def test_events_cut_between_cr_and_lf_arrive_whole() -> None:
    body = b'retry: 1000\r\n\r\n: keepalive\r\n\r\nid: 7\r\nevent: phase\r\ndata: {"a":\r\ndata: 1}\r\n\r\nid: 8\r\ndata: x\r\n\r\n'
    cut_after_every_cr = [piece + b"\r" for piece in body.split(b"\r")[:-1]] + [body.split(b"\r")[-1]]
    assert any(p.endswith(b"\r") for p in cut_after_every_cr) and b"".join(cut_after_every_cr) == body
    for pieces in ([body], cut_after_every_cr, [bytes([b]) for b in body]):
        client = _client(lambda request, pieces=pieces: httpx.Response(200, headers=STREAM, stream=Chunks(pieces)))
        assert list(client.sse("/v1/events")) == [("phase", 7, '{"a":\n1}'), ("message", 8, "x")]


def test_a_dropped_stream_resumes_after_the_last_event_id() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("last-event-id"))
        if len(seen) == 1:
            return httpx.Response(200, headers=STREAM, stream=Chunks([b"id: 4\ndata: one\n\n", b"id: 5\ndata: tw"], drop=True))
        return httpx.Response(200, headers=STREAM, stream=Chunks([b"id: 5\ndata: two\n\nid: 6\ndata: three\n\n"]))

    sleeps: list[float] = []
    events = list(_client(handler, sleeps).sse("/v1/jobs/rl-x/events", last_event_id=3))
    # Event 5 was cut off mid-line: the client asked from 4, so the server sent it again, whole.
    assert events == [("message", 4, "one"), ("message", 5, "two"), ("message", 6, "three")]
    assert seen == ["3", "4"] and sleeps == [2.0]


def test_a_stream_that_keeps_dropping_is_unreachable_after_the_retries() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers.get("accept"))
        return httpx.Response(200, headers=STREAM, stream=Chunks([], drop=True))

    sleeps: list[float] = []
    with pytest.raises(CliError) as raised:
        list(_client(handler, sleeps).sse("/v1/events", retries=2))
    assert raised.value.exit_code == CliExit.UNREACHABLE and "cannot reach the rljob service" in raised.value.message
    assert calls == ["text/event-stream"] * 3 and sleeps == [2.0, 4.0]


def test_answers_that_are_not_event_streams_are_messages() -> None:
    html = _client(lambda request: httpx.Response(200, headers={"content-type": "text/html"}, text="<html>"))
    with pytest.raises(CliError) as raised:
        list(html.sse("/v1/events"))
    assert raised.value.exit_code == CliExit.FAILED and "did not answer with an event stream" in raised.value.message
    rejected = _client(lambda request: httpx.Response(401, json={"detail": "token revoked"}))
    with pytest.raises(CliError) as raised:
        list(rejected.sse("/v1/events"))
    assert raised.value.exit_code == CliExit.TOKEN_REJECTED and "token revoked" in raised.value.message
