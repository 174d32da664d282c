"""Webhook receivers on loopback for the webhook tests: a real HTTP server in a thread that records each request and
answers from a script (500, 500, then 200; a redirect; holding a request until released), and a listener that
accepts connections and never answers."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def delivery(self) -> str:
        return self.headers["x-rljob-delivery"]


def verify(secret: bytes, header: str, body: bytes, now: float, window_s: float = 300.0) -> bool:
    """What a receiver does (docs/service.md, webhooks): recompute HMAC-SHA256 over "<t>." + body and compare in
    constant time; refuse a timestamp outside the replay window. Written apart from the service's signer."""
    fields = dict(part.split("=", 1) for part in header.split(","))
    expected = hmac.new(secret, fields["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields["v1"]) and abs(now - int(fields["t"])) <= window_s


class Receiver:
    """Answers each POST with the next status of `script` (then `then`); a status of 0 holds the request until
    `release` is set, then answers 200. `location` goes with 3xx answers."""

    def __init__(self, script: list[int] | None = None, *, then: int = 200, location: str | None = None) -> None:
        self.script = list(script or [])
        self.then = then
        self.location = location
        self.received: list[Received] = []
        self.release = threading.Event()
        self.holding = threading.Event()  # a request is being held
        self._lock = threading.Lock()
        self.url = ""

    def answer(self, request: Received) -> int:
        with self._lock:
            self.received.append(request)
            return self.script.pop(0) if self.script else self.then

    def ids(self) -> list[str]:
        with self._lock:
            return [r.delivery for r in self.received]

    def bodies(self) -> list[Any]:
        with self._lock:
            return [r.json for r in self.received]


@contextmanager
def serving(receiver: Receiver) -> Iterator[Receiver]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            request = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            status = receiver.answer(request)
            if status == 0:
                receiver.holding.set()
                receiver.release.wait(30)
                status = 200
            self.send_response(status)
            if 300 <= status < 400 and receiver.location:
                self.send_header("Location", receiver.location)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=lambda: server.serve_forever(poll_interval=0.02), name="test-webhook-receiver", daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        yield receiver
    finally:
        receiver.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


class Silent:
    """A receiver that accepts every connection and never answers a byte: `connections` counts the attempts."""

    def __init__(self) -> None:
        self.connections = 0
        self.url = ""


@contextmanager
def silent() -> Iterator[Silent]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)
    receiver = Silent()
    receiver.url = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)  # kept open, never read from or written to
            receiver.connections += 1

    thread = threading.Thread(target=accept, name="test-webhook-silent", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()
