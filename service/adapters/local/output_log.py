"""Reading a local job's output.log: whole, its tail, or followed while the job is active.

output.log is what the trainer (team code) printed, so it is read in bounded pieces: fixed-size chunks, never a
line at a time (one 512 MiB line took the service to 1.1 GB even with tail_lines=5), each line cut to
log_lines.MAX_LINE_BYTES with the cut named, and a tail found by reading blocks back from the end, at most MAX_TAIL_BYTES.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from service.adapters.log_lines import LineCutter

MAX_FOLLOW_S = 24 * 3600  # a follow never outlives a day, whatever the caller does
MAX_TAIL_BYTES = 8 * 1024 * 1024  # a tail looks back at most this far (the stage logs' bound)
CHUNK_BYTES = 64 * 1024
CUT_START = f"[... the start of this line is over {MAX_TAIL_BYTES // (1024 * 1024)} MiB back, not shown] "


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
    with path.open("rb") as f:
        if tail_lines is None:
            cutter = LineCutter()
            while chunk := f.read(CHUNK_BYTES):
                yield from cutter.feed(chunk)
            ready: list[str] = []
        else:
            ready, cutter = _tail(f, tail_lines)
        if not follow:  # an unfinished last line is a line of the tail
            rest = cutter.rest()
            ready += [rest] if rest is not None else []
            yield from ready if tail_lines is None else _last(ready, tail_lines)
            return
        yield from ready
        while monotonic() < deadline:
            active = is_active()  # read the state before the file: no line is lost
            chunk = f.read(CHUNK_BYTES)
            if chunk:
                yield from cutter.feed(chunk)
                continue
            if not active:  # stopped, and one more read found nothing: the log is complete
                if (rest := cutter.rest()) is not None:
                    yield rest
                return
            yield None


def _last(items: list[str], count: int) -> list[str]:
    return items[max(len(items) - count, 0) :]


def _tail(f: BinaryIO, count: int) -> tuple[list[str], LineCutter]:
    """The last `count` lines, read back from the end in blocks (at most MAX_TAIL_BYTES), and the cutter holding an
    unfinished last line; `f` is left at the end."""
    end = f.seek(0, 2)
    start, newlines = end, 0
    while start > 0 and newlines <= count and end - start < MAX_TAIL_BYTES:
        step = min(CHUNK_BYTES, start, MAX_TAIL_BYTES - (end - start))
        start -= step
        f.seek(start)
        newlines += f.read(step).count(b"\n")
    f.seek(start)
    # With more than `count` newlines read, the window's first (partial) line is not in the tail; with fewer, the
    # look-back bound ended inside it, and it says so.
    cutter = LineCutter(prefix=CUT_START if start > 0 and newlines <= count else "")
    lines: list[str] = []
    while f.tell() < end:
        lines = _last(lines + cutter.feed(f.read(min(CHUNK_BYTES, end - f.tell()))), count)
    return lines, cutter
