"""Reading a local job's output.log: whole, its tail, or followed while the job is active."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

MAX_FOLLOW_S = 24 * 3600  # a follow never outlives a day, whatever the caller does


def output_lines(
    path: Path,
    is_active: Callable[[], bool],
    monotonic: Callable[[], float],
    *,
    follow: bool = False,
    tail_lines: int | None = None,
) -> Iterator[str | None]:
    """output.log's lines. Following, each step returns at once: None when nothing is new yet
    (the caller waits, so an idle follow never holds a thread), until the job has stopped."""
    deadline = monotonic() + MAX_FOLLOW_S
    if not path.exists() and not follow:
        return
    while not path.exists():
        if not is_active() or monotonic() > deadline:
            return
        yield None
    with path.open("r", errors="replace") as f:
        if tail_lines is None:
            yield from (line.rstrip("\n") for line in iter(f.readline, ""))
        else:  # bounded: never holds more than the tail in memory
            yield from (line.rstrip("\n") for line in deque(f, maxlen=tail_lines))
        if not follow:
            return
        partial = ""
        while monotonic() < deadline:
            active = is_active()  # read the state before the file: no line is lost
            chunk = f.readline()
            if chunk:
                partial += chunk
                if partial.endswith("\n"):
                    yield partial.rstrip("\n")
                    partial = ""
                continue
            if not active:  # stopped, and one more read found nothing: the log is complete
                if partial:
                    yield partial
                return
            yield None
