"""Splitting a log that team code wrote into lines without trusting it: a line is cut to MAX_LINE_BYTES.

Both launchers' logs are what the trainer printed (a reward function can print anything): the local launcher's
output.log and a pod's log as the API server streams it. Neither is ever read a line at a time.
"""

from __future__ import annotations

MAX_LINE_BYTES = 64 * 1024  # a longer line is cut here, the cut named at its end


class LineCutter:
    """Splits bytes into lines as they come, each cut to MAX_LINE_BYTES: it holds at most one line's kept part."""

    def __init__(self, prefix: str = "") -> None:
        self._kept = bytearray()
        self._cut = 0  # bytes of the current line not kept
        self._prefix = prefix  # put before the next line taken (a tail that began inside it)

    def feed(self, data: bytes) -> list[str]:
        lines: list[str] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start:end]
            room = MAX_LINE_BYTES - len(self._kept)
            self._kept += piece[: max(room, 0)]
            self._cut += max(len(piece) - max(room, 0), 0)
            if end < 0:
                return lines
            lines.append(self._take())
            start = end + 1

    def rest(self) -> str | None:
        """The unfinished line (a log that does not end with a newline), or None."""
        return self._take() if self._kept or self._cut else None

    def _take(self) -> str:
        text = self._prefix + self._kept.decode(errors="replace")
        if self._cut:
            text += f" [... {self._cut} more bytes of this line not shown]"
        self._kept, self._cut, self._prefix = bytearray(), 0, ""
        return text
