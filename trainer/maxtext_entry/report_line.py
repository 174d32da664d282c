"""One report line (`RLJOB_EVAL {...}`, `RLJOB_GOODPUT {...}`) on stdout in one write.

The stage's stdout and stderr share one pipe, and MaxText's threads log to stderr while the main thread
reports (Orbax's async checkpoint save, for one). `print(line)` writes the text and its newline in two
calls, so another thread's line could land between them, glued to the end of our JSON: the pipeline
then failed to parse that report and took MaxText's own line for the evaluation instead (an eval event
without its summary, seen once in CI). One `os.write` of at most PIPE_BUF bytes is atomic on a pipe.
"""

from __future__ import annotations

import os
import select
import sys

# POSIX guarantees at least 512; Linux's is 4096. A longer line is still one call, no longer atomic.
PIPE_BUF = getattr(select, "PIPE_BUF", 512)


def write_report_line(text: str) -> None:
    """`text` and its newline in one write to stdout (whatever Python buffered before goes first)."""
    data = (text + "\n").encode("utf-8", errors="replace")
    sys.stdout.flush()
    view = memoryview(data)
    while view:  # a pipe takes it whole unless it is longer than PIPE_BUF or a signal interrupts it
        view = view[os.write(sys.stdout.fileno(), view) :]
