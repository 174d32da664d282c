"""How the trainer talks to one reward worker: bounded length-prefixed JSON (worker.py's messages) over a pair of file
descriptors, every wait bounded by the call's deadline. A local worker is reached through its two pipes (pool.py), one
in the pod's reward container through a unix socket (host.py)."""

from __future__ import annotations

import os
import select
from collections.abc import Callable
from typing import Any

from .stats import CallOutcome
from .worker import _HEADER, MAX_MESSAGE_BYTES, ProtocolError, decode_body, encode_message

MAX_REPLY_BYTES = 4 * 1024 * 1024  # one number per completion, or an error message; far more is a broken worker


class WorkerFailed(Exception):
    def __init__(self, outcome: CallOutcome, message: str):
        super().__init__(message)
        self.outcome = outcome


class WorkerLink:
    """One worker, as the pool uses it: `exchange` a message for its reply, `kill` it. Not thread-safe: the pool hands
    a worker to one call at a time."""

    def __init__(self, fd_in: int, fd_out: int, clock: Callable[[], float]):
        self._in, self._out, self._clock = fd_in, fd_out, clock
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self.config_key: int | None = None  # which config object this worker holds (ConfigView)
        self.cpu_s = 0.0

    def next_call(self) -> None:
        """A call begins (the local worker's output allowance starts again)."""

    def kill(self) -> None:
        raise NotImplementedError

    def _death(self) -> str:
        return "its pipe closed"

    def exchange(self, message: dict[str, Any], deadline: float) -> dict[str, Any]:
        try:
            self._write(encode_message(message), deadline)
            reply = self._read(deadline)
        except (BrokenPipeError, EOFError, ConnectionResetError) as e:
            raise WorkerFailed(CallOutcome.CRASH, f"the reward worker died ({self._death()})") from e
        except ProtocolError as e:
            raise WorkerFailed(CallOutcome.CRASH, f"the reward worker sent a broken reply: {e}") from e
        self.cpu_s = float(reply.get("cpu_s") or 0.0) if isinstance(reply.get("cpu_s"), (int, float)) else self.cpu_s
        return reply

    def _wait(self, fd: int, events: int, deadline: float) -> None:
        """Until `fd` is ready (poll: a trainer may hold more than select's 1024 descriptors), or the deadline."""
        left = deadline - self._clock()
        poller = select.poll()
        poller.register(fd, events)
        if left <= 0 or not poller.poll(left * 1000):
            raise WorkerFailed(CallOutcome.TIMEOUT, "past its deadline")

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self._wait(self._in, select.POLLOUT, deadline)
            try:
                view = view[os.write(self._in, view) :]
            except BlockingIOError:
                continue

    def _read_exactly(self, size: int, deadline: float) -> bytes:
        chunks, left = [], size
        while left:
            self._wait(self._out, select.POLLIN, deadline)
            try:
                chunk = os.read(self._out, min(left, 1 << 20))
            except BlockingIOError:
                continue
            if not chunk:
                raise EOFError("the worker closed its pipe")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _read(self, deadline: float) -> dict[str, Any]:
        (size,) = _HEADER.unpack(self._read_exactly(_HEADER.size, deadline))
        if size > min(MAX_REPLY_BYTES, MAX_MESSAGE_BYTES):
            raise ProtocolError(f"a {size}-byte reply is over the {MAX_REPLY_BYTES}-byte bound")
        return decode_body(self._read_exactly(size, deadline))
