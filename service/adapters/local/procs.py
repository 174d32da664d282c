"""Process helpers for the local launcher: identity checks and process-group kills, through psutil.

A pid alone is not an identity (pids are reused), so a process is ours only if its cmdline names our
runner and the job id AND it started when the one we started did. Where psutil cannot read a
process (gone, another user's), it is not ours: re-attach is never attempted, the job resumes instead.
"""

from __future__ import annotations

import os
import signal
import time

import psutil


def _start_ticks(process: psutil.Process) -> int:
    # Since boot, not psutil's seconds since the epoch: psutil adds the boot time the kernel reports
    # now, which moves when the wall clock is stepped, while a process's ticks never change. Where the kernel
    # says the ticks itself (/proc/<pid>/stat's starttime), they are read exactly: create_time - boot_time
    # mixes two readings of a boot time the kernel keeps in whole seconds and re-derives from the wall
    # clock, so two processes could compute the same runner's start a second apart and each call it another.
    try:
        with open(f"/proc/{process.pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[19])  # field 22; the name in (...) may hold spaces
    except (OSError, IndexError, ValueError):
        since_boot_s = process.create_time() - psutil.boot_time()
        return round(since_boot_s * os.sysconf("SC_CLK_TCK"))


def start_ticks(pid: int) -> int | None:
    """When pid started, in clock ticks since boot (what process.json records, as it always has, so a
    service upgraded under a running job still re-attaches); None if it is gone."""
    try:
        return _start_ticks(psutil.Process(pid))
    except psutil.Error:
        return None


def is_our_process(pid: int, *, marker: str, job_id: str, ticks: int | None) -> bool:
    """True if pid is alive, not a zombie, started at `ticks`, and its cmdline has marker and job_id."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        if ticks is not None and _start_ticks(process) != ticks:
            return False  # the pid was reused by another process
        args = process.cmdline()
    except psutil.Error:
        return False
    return any(marker in a for a in args) and job_id in args


def wait_until_ours(pid: int, *, marker: str, job_id: str, ticks: int | None, timeout_s: float = 5.0) -> bool:
    """Wait until a runner just started reads as ours (is_our_process); False if it died first or never did.

    Popen returns when exec closes the child's close-on-exec pipe, which is before the kernel has set up the
    new program's arguments: until then /proc/<pid>/cmdline reads empty, for milliseconds on a loaded machine.
    A runner recorded in that moment is "not ours" to every other launcher that looks, and one of them starts
    a second runner for the same job."""
    deadline = time.monotonic() + timeout_s
    while not is_our_process(pid, marker=marker, job_id=job_id, ticks=ticks):
        if not is_alive(pid) or time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def is_alive(pid: int) -> bool:
    """pid exists and is not a zombie (an exited child nobody has reaped yet)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group pgid.

    Listing processes instead of killpg(pgid, 0): a container's pid 1 may never reap orphaned
    grandchildren, and their zombies would keep the group "alive" forever.
    """
    members = []
    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == pgid:
                members.append(process.pid)
        except ProcessLookupError:
            continue  # exited between the listing and the question
    return members


def signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # the group is already gone
