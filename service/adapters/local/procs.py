"""Linux process helpers for the local launcher: identity checks via /proc and process-group kills.

A pid alone is not an identity (pids are reused), so a process is ours only if its /proc cmdline
names our runner and the job id AND its start time equals the one recorded when we started it.
Without /proc (not Linux) nothing can be verified and re-attach is never attempted: resume instead.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # Field 2 (comm) is in parentheses and may contain spaces: split after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """Start time of pid in clock ticks since boot (/proc/PID/stat field 22), None if gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_our_process(pid: int, *, marker: str, job_id: str, ticks: int | None) -> bool:
    """True if pid is alive, not a zombie, started at `ticks`, and its cmdline has marker and job_id."""
    fields = _stat_fields(pid)
    if not fields or fields[0] == "Z":
        return False
    if ticks is not None and int(fields[19]) != ticks:
        return False  # the pid was reused by another process
    args = cmdline(pid)
    return any(marker in a for a in args) and job_id in args


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group pgid.

    Scanning /proc instead of killpg(pgid, 0): a container's pid 1 may never reap orphaned
    grandchildren, and their zombies would keep the group "alive" forever.
    """
    members = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # the group is already gone
