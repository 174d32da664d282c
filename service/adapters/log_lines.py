"""Splitting a log that team code wrote into lines without trusting it: a line is cut to MAX_LINE_BYTES.

Both launchers' logs are what the trainer printed (a reward function can print anything): the local launcher's
output.log and a pod's log as the API server streams it. Neither is ever read a line at a time.
"""

from __future__ import annotations

from itertools import islice

MAX_LINE_BYTES = 64 * 1024  # a longer line is cut here, the cut named at its end


def _cut(line: bytes) -> str:
    return line[:MAX_LINE_BYTES].decode(errors="replace") + f" [... {len(line) - MAX_LINE_BYTES} more bytes of this line not shown]"


class LineCutter:
    """Splits bytes into lines as they come, each cut to MAX_LINE_BYTES: it holds at most one line's kept part."""

    def __init__(self, prefix: str = "") -> None:
        self._kept = bytearray()
        self._cut = 0  # bytes of the current line not kept
        self._prefix = prefix  # put before the next line taken (a tail that began inside it)

    def feed(self, data: bytes) -> list[str]:
        pieces = data.split(b"\n")
        self._keep(pieces[0])
        if len(pieces) == 1:
            return []
        lines = [self._take()]
        # The lines wholly inside `data`, the common case, without the carried line's bookkeeping: a follow of a busy
        # trainer splits tens of thousands of lines a second, and a per-line loop cost 3 us a line.
        lines += [p.decode(errors="replace") if len(p) <= MAX_LINE_BYTES else _cut(p) for p in islice(pieces, 1, len(pieces) - 1)]
        self._keep(pieces[-1])
        return lines

    def _keep(self, piece: bytes) -> None:
        room = max(MAX_LINE_BYTES - len(self._kept), 0)
        self._kept += piece[:room]
        self._cut += max(len(piece) - room, 0)

    def rest(self) -> str | None:
        """The unfinished line (a log that does not end with a newline), or None."""
        return self._take() if self._kept or self._cut else None

    def _take(self) -> str:
        text = self._prefix + self._kept.decode(errors="replace")
        if self._cut:
            text += f" [... {self._cut} more bytes of this line not shown]"  # as _cut says it
        self._kept, self._cut, self._prefix = bytearray(), 0, ""
        return text
