"""An open-loop HTTP load generator for bench/control_plane/control_plane.py: requests go out at a fixed rate whether
or not earlier ones have been answered, as independent clients (dashboards, CLIs polling) send them.

Latency is measured from when a request was *scheduled*, not when a connection became free, so a
server that falls behind shows its queueing delay (no coordinated omission). The client speaks
HTTP/1.1 over raw asyncio streams with keep-alive connections: an HTTP library would spend more CPU
per request than the minimal app it measures, on the same two cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from dataclasses import dataclass, field


@dataclass
class RateResult:
    offered_rps: float
    sent: int
    ok: int = 0
    shed: int = 0  # 503: refused by the service's load shedding, not served
    errors: int = 0  # another non-200 answer or a broken connection
    timeouts: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    start: float = 0.0  # the loop time of the first scheduled send
    last_ok: float = 0.0  # the loop time of the last 200 answer

    @property
    def served_rps(self) -> float:
        """Answers (200) per second from the first send to the last answer, or over the offered window if that was
        longer: a server that queues what it cannot serve is not credited with the rate it was offered."""
        window_s = max(self.sent / self.offered_rps, self.last_ok - self.start)
        return self.ok / window_s if window_s > 0 else 0.0

    def percentile(self, q: float) -> float | None:
        if not self.latencies_ms:
            return None
        if len(self.latencies_ms) == 1:
            return self.latencies_ms[0]
        return statistics.quantiles(self.latencies_ms, n=1000, method="inclusive")[round(q * 1000) - 1]

    @property
    def max_ms(self) -> float | None:
        return max(self.latencies_ms) if self.latencies_ms else None


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


async def _exchange(conn: _Connection, request: bytes) -> int:
    """Send one request, read its whole answer; returns the status code."""
    conn.writer.write(request)
    await conn.writer.drain()
    head = await conn.reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length:
        await conn.reader.readexactly(length)
    return status


class OpenLoopClient:
    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.auth = f"Authorization: Bearer {token}\r\n".encode()
        self._idle: list[_Connection] = []

    def _request(self, path: str) -> bytes:
        return f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n".encode() + self.auth + b"\r\n"

    async def _one(self, path: str, scheduled: float, timeout_s: float, result: RateResult) -> None:
        loop = asyncio.get_running_loop()
        request = self._request(path)
        conn: _Connection | None = None
        try:
            async with asyncio.timeout_at(scheduled + timeout_s):
                for attempt in (0, 1):  # a kept-alive connection the server closed meanwhile: reopen once
                    reused = bool(self._idle)
                    conn = self._idle.pop() if reused else _Connection(*await asyncio.open_connection(self.host, self.port))
                    try:
                        status = await _exchange(conn, request)
                        break
                    except (asyncio.IncompleteReadError, ConnectionError):
                        conn.close()
                        conn = None
                        if not reused or attempt:
                            raise
        except TimeoutError:
            result.timeouts += 1
            if conn is not None:
                conn.close()
            return
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            result.errors += 1
            return
        assert conn is not None
        self._idle.append(conn)
        if status == 200:
            result.ok += 1
            result.last_ok = loop.time()
            result.latencies_ms.append((result.last_ok - scheduled) * 1000)
        elif status == 503:
            result.shed += 1
        else:
            result.errors += 1

    async def run(self, paths: list[str], rate_rps: float, duration_s: float, timeout_s: float) -> RateResult:
        """Offer `rate_rps` requests per second for `duration_s`, cycling through `paths`; wait for the
        stragglers up to their timeout."""
        loop = asyncio.get_running_loop()
        total = max(1, int(rate_rps * duration_s))
        result = RateResult(offered_rps=rate_rps, sent=total)
        start = result.start = loop.time() + 0.05
        tasks = []
        for i in range(total):
            scheduled = start + i / rate_rps
            delay = scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self._one(paths[i % len(paths)], scheduled, timeout_s, result)))
        await asyncio.gather(*tasks)
        # Closed while this loop still runs: closed after it (close() below), a socket stays open until collected,
        # and the server holds the window's connections into the next window (against its connection cap).
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        for conn in idle:
            with contextlib.suppress(Exception):
                await conn.writer.wait_closed()
        return result

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
