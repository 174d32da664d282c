"""A reward worker's output (its prints and tracebacks) into the trainer's log, bounded per call.

A worker writes to a pipe of its own, never to the trainer's stderr: one reward printing in a loop wrote 100 MB into
train.log in six calls. A thread copies what fits in `per_call_bytes` since the current call began and counts the
rest; when the next call begins (or the worker ends) the count is said in one line. The copy never stops reading, so
a worker never blocks on a full pipe (its call would then time out for the log's sake).
"""

from __future__ import annotations

import array
import fcntl
import os
import select
import termios
import threading
import time
from collections.abc import Callable

PER_CALL_BYTES = 64 * 1024  # enough for a traceback and some debugging prints; not a log of every completion


def write_stderr(data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(2, view) :]
        except OSError:
            return  # the trainer's own log is gone: nothing to tell


class OutputRelay:
    """Copies `fd` (a pipe's read end, owned by the relay from here on) to `sink` on a daemon thread."""

    def __init__(
        self,
        fd: int,
        *,
        per_call_bytes: int = PER_CALL_BYTES,
        sink: Callable[[bytes], None] = write_stderr,
    ):
        self._fd, self._sink, self.per_call_bytes = fd, sink, per_call_bytes
        # Reading a chunk and counting it happen under one lock, so a call's start never falls between them: with the
        # read outside it, a chunk read just before a call began was counted to that call (seen in CI).
        self._lock = threading.Lock()
        self._left = per_call_bytes
        self._dropped = 0
        self._closed = False
        os.set_blocking(fd, False)  # read only once poll says so, and never wait inside the lock
        self._thread = threading.Thread(target=self._copy, name="rljob-reward-output", daemon=True)
        self._thread.start()

    def next_call(self) -> None:
        """A call begins: a new allowance, and a line for what the previous one dropped. What the previous call wrote
        is still in the pipe for a moment after its reply (up to a pipe's capacity): counted to it first."""
        deadline = time.monotonic() + 1.0
        while True:
            with self._lock:
                if not self._pending() or time.monotonic() >= deadline:
                    self._left = self.per_call_bytes
                    dropped, self._dropped = self._dropped, 0
                    self._say_dropped(dropped)
                    return
            time.sleep(0.005)

    def _say_dropped(self, dropped: int) -> None:
        if dropped:
            self._sink(
                f"\nrljob: reward sandbox: {dropped} bytes of a reward worker's output were dropped (at most "
                f"{self.per_call_bytes} bytes a call reach this log)\n".encode()
            )

    def _pending(self) -> int:
        """Bytes in the pipe not read yet (0 once it is closed)."""
        if self._closed:
            return 0
        count = array.array("i", [0])
        try:
            fcntl.ioctl(self._fd, termios.FIONREAD, count)
        except OSError:
            return 0
        return count[0]

    def _copy(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        try:
            while True:
                poller.poll()
                with self._lock:
                    try:
                        chunk = os.read(self._fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        break
                    kept = chunk[: max(0, self._left)]
                    self._left -= len(kept)
                    self._dropped += len(chunk) - len(kept)
                    if kept:
                        self._sink(kept)  # in the lock too: a dropped-bytes line never lands inside a call's output
        except OSError:
            pass
        finally:
            with self._lock:
                os.close(self._fd)
                self._closed = True
                dropped, self._dropped = self._dropped, 0
                self._say_dropped(dropped)

    def join(self, timeout_s: float) -> None:
        """Wait for the copy to reach the pipe's end (every writer gone)."""
        self._thread.join(timeout_s)
