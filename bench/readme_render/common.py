"""Formatting shared by the README renderers: where a result was measured, durations, counts."""

from __future__ import annotations

from typing import Any


def duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m {rest:02d}s" if minutes else f"{rest}s"


def count(n: int) -> str:
    """1,000 for 1000 (the README's style for counts)."""
    return f"{n:,}"


def where(machine: dict[str, Any] | None) -> str:
    """'2 CPU cores, load 2.60 at the start and 3.10 at the end, commit `abc` (`python bench/x.py ...`)', or what the file
    lacks when it predates machine facts (bench/result_meta.py)."""
    if not machine:
        return "no machine facts recorded (the file predates them)"
    load = f"load {machine['load_average'][0]:.2f} at the start"
    if "load_average_at_end" in machine:
        load += f" and {machine['load_average_at_end'][0]:.2f} at the end"
    dirty = " with uncommitted changes" if machine.get("uncommitted_changes") else ""
    return f"{machine['cpu_count']} CPU cores, {load}, commit `{machine['commit']}`{dirty}, `{machine['command']}`"


def ratio(before: float, after: float) -> str:
    return f"{before / after:.1f}x" if after else "-"


def load_span(machine: dict[str, Any] | None) -> str:
    """'load 2.44 -> 2.66' (1-minute load average at the start and the end), or '' without machine facts."""
    if not machine:
        return ""
    end = machine.get("load_average_at_end")
    return f"load {machine['load_average'][0]:.2f}" + (f" -> {end[0]:.2f}" if end else "")


def where_shared(machines: list[dict[str, Any] | None]) -> str:
    """The facts several entries of one file share (cores, commit, command), once; each entry gives its load_span."""
    known = [m for m in machines if m]
    if not known:
        return where(None)
    commits = sorted({m["commit"] for m in known})
    commands = sorted({m["command"] for m in known})
    dirty = " with uncommitted changes" if any(m.get("uncommitted_changes") for m in known) else ""
    unknown = f"; {len(machines) - len(known)} entries predate machine facts" if len(known) < len(machines) else ""
    return (
        f"{known[0]['cpu_count']} CPU cores, commit {', '.join(f'`{c}`' for c in commits)}{dirty}, "
        f"{', '.join(f'`{c}`' for c in commands)}{unknown}"
    )
