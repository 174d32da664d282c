"""A job's goodput (JobPublic.goodput) in one line for `rljob status`: the productive share, then the parts
that took time, largest first, as the dashboard's bar shows them (dashboard/src/goodputbar.js)."""

from __future__ import annotations

from trainer.contract.run.goodput import JobGoodput

# Parts below this share of the wall time are left out of the line (they stay in `-o json`).
MIN_SHOWN_FRACTION = 0.01


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.1f}m"
    return f"{seconds:.0f}s"


def goodput_text(goodput: JobGoodput | None) -> str:
    """`31% productive of 12.5m: rollout 3.1m (25%), update 44s (6%), ...`, or `-` before any time was spent."""
    if goodput is None or not goodput.wall_s:
        return "-"
    wall = goodput.wall_s
    shown = sorted(((name, s) for name, s in goodput.parts.items() if s / wall >= MIN_SHOWN_FRACTION), key=lambda item: -item[1])
    parts = ", ".join(f"{name} {_duration(s)} ({round(100 * s / wall)}%)" for name, s in shown)
    productive = goodput.productive_fraction
    head = f"{round(100 * productive)}% productive" if productive is not None else "-"
    return f"{head} of {_duration(wall)}: {parts}" if parts else f"{head} of {_duration(wall)}"
