"""Runs one trainer command and records its exit code in a file. Standard library only.

The local launcher starts this as the leader of a new session/process group:

    python job_runner.py --job-id ID --exit-file PATH -- trainer-command...

Why a wrapper: after a service restart the trainer is no longer the service's child, so its exit
status cannot be collected with wait(); the exit file carries it. A cancel signals the whole group;
the runner then waits for the trainer to stop so the recorded code is the trainer's own.

The trainer starts only when the launcher, having recorded the runner's pid, writes START_LINE to the
runner's stdin. A launcher killed before that closes the pipe: the runner exits without starting the
trainer or writing an exit file, so the restarted service relaunches the job and it runs once.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from typing import IO

START_LINE = b"start\n"
# The exit file's blocks, taken before the trainer starts: a state disk that fills during the run (the trainer's
# checkpoints, another job's logs) must not lose a finished trainer's exit code. Overwritten in place, the
# reservation needs no new block; only copy-on-write filesystems (btrfs, ZFS) may still need one.
RESERVED_EXIT_BYTES = 4096
# The job's log, as the trainer's output fills it: lines are cut well under the 64 KiB a reader cuts at
# (service/adapters/log_lines.py), so the cut's own marker is still read; the budget holds a long run's MaxText log
# (a few KiB a step) many times over and keeps one chatty reward function from filling the service's state disk.
LOG_LINE_BYTES = 16 * 1024
LOG_BUDGET_BYTES = 128 * 1024 * 1024
MARKER_ROOM_BYTES = 1024  # kept back from the budget for the marker lines


def _write_atomic(path: str, payload: dict[str, object]) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def reserve_exit_file(path: str) -> str | None:
    """Take the exit file's space now, as `<path>.reserved`; None (and a line saying so) when the disk is full already."""
    reserved = f"{path}.reserved"
    try:
        with open(reserved, "wb") as f:
            f.write(b" " * RESERVED_EXIT_BYTES)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        print(
            f"job_runner: cannot reserve space for the exit file {path} ({e}); it is written at the end if it can be",
            file=sys.stderr,
            flush=True,
        )
        return None
    return reserved


def record_exit(path: str, reserved: str | None, payload: dict[str, object]) -> bool:
    """Write the exit file: into the reservation in place, then renamed (a reader sees the whole record or none);
    without one, a new file. False, with a line saying so, when neither can be written."""
    data = json.dumps(payload).encode()
    try:
        if reserved is not None and len(data) <= RESERVED_EXIT_BYTES:
            with open(reserved, "r+b") as f:  # no truncation: the blocks stay allocated
                f.write(data.ljust(RESERVED_EXIT_BYTES))  # JSON allows the trailing spaces
                f.flush()
                os.fsync(f.fileno())
            os.replace(reserved, path)
        else:
            _write_atomic(path, payload)
    except OSError as e:
        print(f"job_runner: cannot record the exit code in {path}: {e}", file=sys.stderr, flush=True)
        return False
    return True


class OutputCap:
    """What of the trainer's output goes into the job's log: each line cut at `line_bytes` (the cut named at its end),
    and all of it up to the job's `budget_bytes`, counting what earlier attempts wrote (the log is appended across
    them). Past the budget one marker line says so and the rest is only counted: one trainer line of 64 MiB once wrote
    64 MiB into the service's state directory, and a log without a bound can fill the disk every job shares."""

    def __init__(self, budget_bytes: int, line_bytes: int, already_written: int = 0) -> None:
        self.budget_bytes = budget_bytes
        self.line_bytes = line_bytes
        # The marker lines' room is kept back, so the log ends within the budget with the marker in it.
        self._left = budget_bytes - already_written - MARKER_ROOM_BYTES
        self._line_kept = 0  # bytes of the current line written
        self._line_cut = 0  # bytes of the current line dropped
        self.spent = False
        self.dropped = 0  # trainer bytes left out of the log: cut from long lines and past the budget

    def admit(self, chunk: bytes) -> bytes:
        """The bytes to write for `chunk`: its lines as far as the limits allow, and their markers."""
        if self.spent:
            self.dropped += len(chunk)
            return b""
        out = bytearray()
        pieces = chunk.split(b"\n")
        offset = 0  # where the piece being looked at starts in `chunk`
        for index, piece in enumerate(pieces):
            ends_line = index < len(pieces) - 1
            kept = piece[: max(self.line_bytes - self._line_kept, 0)]
            if len(out) + len(kept) + ends_line > self._left:
                out += self._spend(out)
                self.dropped += len(chunk) - offset
                return bytes(out)
            out += kept
            self._line_kept += len(kept)
            self._line_cut += len(piece) - len(kept)
            if ends_line:
                out += self._end_line()
            offset += len(piece) + 1
        self._left -= len(out)
        return bytes(out)

    def finish(self) -> bytes:
        """What to write once the trainer's output has ended: the cut marker of an unfinished last line."""
        return b"" if self.spent or not self._line_cut else self._end_line()

    def _end_line(self) -> bytes:
        cut, self._line_kept, self._line_cut = self._line_cut, 0, 0
        if not cut:
            return b"\n"
        self.dropped += cut
        return f" [... {cut} more bytes of this line dropped: a line keeps its first {self.line_bytes} bytes]\n".encode()

    def _spend(self, out: bytearray) -> bytes:
        self.spent = True
        unfinished = self._line_kept > 0  # a line already partly written is ended before the marker
        self.dropped += self._line_cut
        mib = self.budget_bytes / (1024 * 1024)
        return (b"\n" if unfinished else b"") + (
            f"job_runner: output.log reached this job's {mib:g} MiB budget; the rest of the trainer's output is "
            "dropped, and its size is recorded in exit.json and said in the job's status when the trainer exits\n"
        ).encode()


def copy_output(source: IO[bytes], log_fd: int, cap: OutputCap | None = None) -> None:
    """The trainer's output into the job's log (this runner's stdout), until the trainer closes it, within `cap`.

    The trainer writes to a pipe rather than to the log itself, so a log that cannot be written (the
    service's state directory full) costs log lines, never the trainer's run: a trainer that finished
    training must not exit with an error because its print() failed. Lines that cannot be written are
    counted and the count is written once the log can be written again."""
    cap = cap or OutputCap(LOG_BUDGET_BYTES, LOG_LINE_BYTES, written_before(log_fd))
    unwritten = 0
    for chunk in iter(lambda: source.read1(65536), b""):  # type: ignore[attr-defined]  # a BufferedReader
        unwritten = _write_log(log_fd, cap.admit(chunk), unwritten)
    _write_log(log_fd, cap.finish(), unwritten)
    source.close()


def _write_log(log_fd: int, data: bytes, unwritten: int) -> int:
    """Write `data`, first saying how much earlier output could not be written; what is unwritten now."""
    if not data:
        return unwritten
    try:
        if unwritten:
            os.write(log_fd, f"job_runner: {unwritten} bytes of output were lost (the log could not be written)\n".encode())
            unwritten = 0
        os.write(log_fd, data)
    except OSError:
        unwritten += len(data)
    return unwritten


def written_before(log_fd: int) -> int:
    """The log's size as this attempt starts (earlier attempts' output and the launcher's header); 0 for a pipe."""
    try:
        status = os.fstat(log_fd)
    except OSError:
        return 0
    return status.st_size if stat.S_ISREG(status.st_mode) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="job_runner")
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--exit-file", required=True)
    parser.add_argument("--log-budget-bytes", type=int, default=LOG_BUDGET_BYTES)
    parser.add_argument("--log-line-bytes", type=int, default=LOG_LINE_BYTES)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no trainer command given after --")

    # Not dumpable: this runner's environment holds what the trainer gets (an HF token), and the job's reward workers
    # run as the same user (trainer/rewards_sandbox/process_privacy.py; this script imports nothing of rljob's).
    prctl = getattr(ctypes.CDLL(None), "prctl", None)  # Linux only
    if prctl is not None:
        prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    # The group-wide SIGTERM also reaches the trainer; keep running until it has exited.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    # A write past a file-size limit is an error to handle (the log drops it), not a signal that kills the runner.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if sys.stdin.buffer.readline() != START_LINE:
        print("job_runner: the launcher did not record this runner; not starting the trainer", file=sys.stderr, flush=True)
        return 0
    reserved = reserve_exit_file(args.exit_file)
    cap: OutputCap | None = None
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        print(f"job_runner: cannot start {command[0]!r}: {e}", file=sys.stderr, flush=True)
        code = 127
    else:
        cap = OutputCap(args.log_budget_bytes, args.log_line_bytes, written_before(sys.stdout.fileno()))
        # In a thread: a process the trainer left behind may hold the pipe open after the trainer exits,
        # and the exit code must not wait for it (the copy gets a few seconds more to drain).
        copier = threading.Thread(target=copy_output, args=(child.stdout, sys.stdout.fileno(), cap), name="job-output-copy", daemon=True)
        copier.start()
        returncode = child.wait()
        copier.join(timeout=10)
        code = returncode if returncode >= 0 else 128 - returncode  # killed by signal N -> 128+N
    # The runner's own exit status is the trainer's code either way: a launcher still watching reads that.
    record: dict[str, object] = {"job_id": args.job_id, "exit_code": code, "finished_at": time.time()}
    if cap is not None and cap.dropped:  # as far as the copy got: a copy still draining past its join is not counted
        record["output_dropped_bytes"] = cap.dropped
    record_exit(args.exit_file, reserved, record)
    return code


if __name__ == "__main__":
    sys.exit(main())
