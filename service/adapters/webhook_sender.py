"""Webhook HTTP: one POST per attempt (the WebhookTransport port, service/domain/webhooks/webhook_models.py).

Never follows a redirect (a 3xx is the attempt's answer, and the dispatcher fails the delivery: an endpoint that
redirects could send signed bodies anywhere). At most MAX_RESPONSE_BYTES of an answer are read. Errors name the
host, never the URL (a Slack webhook URL is a credential).

Each attempt has a deadline: connect_timeout_s + read_timeout_s from its start, for connecting, sending the request
and reading the whole answer. Per-operation timeouts alone do not bound an attempt: a receiver that trickles its
answer a byte every few seconds answers each read in time and held an attempt 120 s under a 10 s read timeout. So
the sockets come from DeadlineBackend: every connect, TLS handshake, read and write is given what is left of the
calling thread's attempt (or its own timeout, if smaller) and fails as a timeout once nothing is left; a host's
addresses are tried one by one within it. (A write is one operation: its partial sends each wait at most what was
left when it began, and a request is at most a 64 KiB body, webhooks.MAX_BODY_BYTES.) The dispatcher
leases a delivery for the same sum plus a margin (webhook_dispatch.DeliveryPolicy.lease_s), which holds now that an
attempt cannot outlast it. Name resolution is the system resolver's, outside the deadline: getaddrinfo cannot be
interrupted from its own thread.

The HTTP client is httpcore, the connection layer httpx is built on, used directly: its pool takes a network backend
(`network_backend=`), and httpx's HTTPTransport offers no way to pass one. httpcore reads no proxy from the
environment (a webhook goes where the admin configured it) and follows no redirect.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

import httpcore

from service.domain.webhooks.webhook_models import SendResult

MAX_RESPONSE_BYTES = 4096  # only the status matters; a snippet of a refusal helps whoever reads last_error
KEEPALIVE_S = 5.0  # an idle connection kept for the endpoint's next delivery (httpx's default)

# The deadline (time.monotonic()) of the attempt the calling thread is making; None outside an attempt. httpcore does
# every socket operation of a request in the thread that asked for it, so the thread's own value is the attempt's.
_attempt_deadline: ContextVar[float | None] = ContextVar("rljob_webhook_attempt_deadline", default=None)


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """The timeout for one socket operation: its own, cut to what is left of the attempt; `expired` once nothing is."""
    deadline = _attempt_deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise expired("the attempt's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's blocking sockets, each operation held to the calling thread's attempt deadline (see the module)."""

    def __init__(self) -> None:
        self._sockets = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        # Address by address, each given what is left: socket.create_connection would give each address a whole
        # connect timeout, and a host with several unreachable addresses would take that many.
        try:
            addresses = [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
        except OSError as e:
            raise httpcore.ConnectError(f"cannot resolve {host}: {e}") from e
        failed: Exception = httpcore.ConnectError(f"{host} resolved to no address")
        for address in dict.fromkeys(addresses):
            try:
                stream = self._sockets.connect_tcp(address, port, _left(timeout, httpcore.ConnectTimeout), local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as e:
                failed = e
                continue
            return _DeadlineStream(stream)
        raise failed

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._sockets.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._sockets.sleep(seconds)


class HttpWebhookTransport:
    def __init__(self) -> None:
        # One pool for every endpoint, thread-safe, with no cap on connections: a receiver that holds its connections
        # must not take another endpoint's place in a pool.
        self._pool = httpcore.ConnectionPool(max_connections=None, keepalive_expiry=KEEPALIVE_S, network_backend=DeadlineBackend())

    def post(self, url: str, body: bytes, headers: dict[str, str], *, connect_timeout_s: float, read_timeout_s: float) -> SendResult:
        attempt_s = connect_timeout_s + read_timeout_s
        timeouts = {"connect": connect_timeout_s, "read": read_timeout_s, "write": read_timeout_s, "pool": connect_timeout_s}
        host = urlsplit(url).hostname or "the endpoint"
        token = _attempt_deadline.set(time.monotonic() + attempt_s)
        try:
            with self._pool.stream("POST", url, headers=list(headers.items()), content=body, extensions={"timeout": timeouts}) as response:
                snippet = b""
                for chunk in response.iter_stream():
                    snippet += chunk
                    if len(snippet) >= MAX_RESPONSE_BYTES:
                        break
                status = response.status
                location = _header(response.headers, b"location") if 300 <= status < 400 else None
                error = None if 200 <= status < 300 else f"{host} answered {status}: {_text(snippet)}"
                return SendResult(status, error, location)
        except httpcore.TimeoutException as e:
            return SendResult(None, f"{host} did not answer in time ({e.__class__.__name__}; an attempt has {attempt_s:g} s in all)")
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol, httpcore.ProxyError) as e:
            return SendResult(None, f"{host} could not be reached ({e.__class__.__name__}: {_text(str(e).replace(url, host).encode())})")
        finally:
            _attempt_deadline.reset(token)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    return next((value.decode("latin-1") for key, value in headers if key.lower() == name), None)


def _text(raw: bytes) -> str:
    return raw[:200].decode("utf-8", "replace").replace("\n", " ").strip()
