"""The line a train stage process prints when an actor checkpoint is finished, and its reading.

Written inside train_rl (trainer/maxtext_entry/checkpoint_reporter.py), read by the train stage in the pipeline
process (trainer/stages/train.py). It lives here, beside the rest of what the two sides share, so the pipeline reads
it without importing trainer.maxtext_entry, whose import makes a process non-dumpable and installs a SIGUSR1 handler:
right for a stage process, not for the pipeline that runs them.
"""

from __future__ import annotations

import json

CHECKPOINT_LINE_PREFIX = "RLJOB_CHECKPOINT "


def checkpoint_line(step: int) -> str:
    return CHECKPOINT_LINE_PREFIX + json.dumps({"step": int(step)})


def step_from_line(line: str) -> int | None:
    """The step a `RLJOB_CHECKPOINT {...}` line names; None for any other line (or a torn one)."""
    start = line.find(CHECKPOINT_LINE_PREFIX)
    if start < 0:
        return None
    try:
        step = json.loads(line[start + len(CHECKPOINT_LINE_PREFIX) :])["step"]
    except (ValueError, KeyError, TypeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None
