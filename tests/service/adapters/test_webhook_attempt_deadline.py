"""A webhook attempt ends at its deadline (connect + read timeouts from its start, service/adapters/webhook_sender.py)
however its receiver trickles: a real loopback server that sends one byte every TRICKLE_S, well inside the read
timeout, of a status line that never ends or of a body far longer than the attempt could read. Without the deadline
each read is answered in time and the attempt runs as long as the receiver likes (the issue saw 120 s under a 10 s
timeout); the test waits for the attempt's thread a bounded while and fails if it is still sending."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from service.adapters.webhook_sender import HttpWebhookTransport
from service.domain.webhooks.webhook_models import SendResult
from tests.service.service_helpers import wait_until

TRICKLE_S = 0.05  # between two bytes of the answer: each read gets its byte ten times faster than READ_TIMEOUT_S
CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 0.2, 0.5  # the attempt's deadline: 0.7 s
JOIN_BOUND_S = 15.0  # generous: the attempt ends after about 0.7 s; without a deadline it is still reading then

ENDLESS_STATUS = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100_000  # h11 reads 16 KiB of headers before it gives up
ENDLESS_BODY = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"  # then the body, a byte at a time


class Trickler:
    """Accepts one connection, reads the request, then sends `head` a byte every TRICKLE_S (or, with
    `head_at_once`, the head whole and then body bytes a byte every TRICKLE_S) until the client hangs up."""

    def __init__(self, head: bytes, *, head_at_once: bool) -> None:
        self.head, self.head_at_once = head, head_at_once
        self.sent = 0
        self.hung_up = threading.Event()  # the client closed the connection: a send failed
        self.stop = threading.Event()
        self.url = ""

    def serve(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            try:
                if self.head_at_once:
                    conn.sendall(self.head)
                    pending = b"x" * 100_000
                else:
                    pending = self.head
                for byte in pending:
                    if self.stop.wait(TRICKLE_S):
                        return
                    conn.sendall(bytes([byte]))
                    self.sent += 1
            except OSError:  # reset or broken pipe: the sender gave up on this answer
                self.hung_up.set()
                return
            # Everything was sent without the client hanging up: only a very slow machine gets here.


@contextmanager
def trickling(trickler: Trickler) -> Iterator[Trickler]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    trickler.url = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    thread = threading.Thread(target=trickler.serve, args=(listener,), name="test-webhook-trickler", daemon=True)
    thread.start()
    try:
        yield trickler
    finally:
        trickler.stop.set()
        thread.join(10)
        listener.close()


@pytest.mark.parametrize("head, head_at_once", [(ENDLESS_STATUS, False), (ENDLESS_BODY, True)], ids=["status-line", "body"])
def test_an_attempt_ends_at_its_deadline_however_slowly_the_receiver_trickles(head: bytes, head_at_once: bool) -> None:
    transport = HttpWebhookTransport()
    results: list[SendResult] = []
    with trickling(Trickler(head, head_at_once=head_at_once)) as receiver:
        attempt = threading.Thread(
            target=lambda: results.append(
                transport.post(receiver.url, b"{}", {}, connect_timeout_s=CONNECT_TIMEOUT_S, read_timeout_s=READ_TIMEOUT_S)
            ),
            name="test-webhook-attempt",
            daemon=True,
        )
        attempt.start()
        attempt.join(JOIN_BOUND_S)
        assert not attempt.is_alive(), f"the attempt is still reading after {JOIN_BOUND_S} s ({receiver.sent} bytes trickled)"
        assert receiver.sent > 1  # each byte came in time: no single read timed out, the deadline ended it
        wait_until(receiver.hung_up.is_set, timeout_s=10)  # the connection was closed, not left to the receiver
    (result,) = results
    assert result.status is None and "did not answer in time" in (result.error or "") and "0.7 s in all" in (result.error or "")


@contextmanager
def unreachable_addresses(count: int) -> Iterator[tuple[list[str], int]]:
    """`count` loopback addresses (127.0.0.2 on) on one port whose connects hang: each listener's accept queue is
    full, so the kernel drops further SYNs, as a host that has gone away does."""
    held: list[socket.socket] = []
    port = 0
    addresses = [f"127.0.0.{i}" for i in range(2, 2 + count)]
    try:
        for address in addresses:
            listener = socket.socket()
            listener.bind((address, port))
            listener.listen(0)
            port = listener.getsockname()[1]
            held.append(listener)
            for _ in range(3):  # more than the queue holds (listen(0) takes one)
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex((address, port))
                held.append(filler)
        yield addresses, port
    finally:
        for s in held:
            s.close()


def test_a_host_whose_addresses_all_hang_takes_one_deadline_not_a_connect_timeout_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """socket.create_connection gives each address a whole connect timeout: 40 addresses, 40 x 0.2 s. The attempt's
    deadline (0.7 s) covers all of them."""
    with unreachable_addresses(40) as (addresses, port):
        resolve = socket.getaddrinfo

        def hook_test_resolves_to_all(host: str, *args: Any, **kw: Any) -> Any:
            if host != "hook.test":
                return resolve(host, *args, **kw)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]

        monkeypatch.setattr(socket, "getaddrinfo", hook_test_resolves_to_all)
        results: list[SendResult] = []
        attempt = threading.Thread(
            target=lambda: results.append(
                HttpWebhookTransport().post(
                    f"http://hook.test:{port}/hook", b"{}", {}, connect_timeout_s=CONNECT_TIMEOUT_S, read_timeout_s=READ_TIMEOUT_S
                )
            ),
            name="test-webhook-attempt",
            daemon=True,
        )
        attempt.start()
        attempt.join(JOIN_BOUND_S / 3)  # 5 s: the deadline is 0.7 s; forty connect timeouts would be 8 s
        assert not attempt.is_alive(), "the attempt is still connecting: each address got a connect timeout of its own"
    (result,) = results
    assert result.status is None and "did not answer in time (ConnectTimeout" in (result.error or ""), result.error
