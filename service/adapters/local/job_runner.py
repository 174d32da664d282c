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


def copy_output(source: IO[bytes], log_fd: int) -> None:
    """The trainer's output into the job's log (this runner's stdout), until the trainer closes it.

    The trainer writes to a pipe rather than to the log itself, so a log that cannot be written (the
    service's state directory full) costs log lines, never the trainer's run: a trainer that finished
    training must not exit with an error because its print() failed. Lines that cannot be written are
    counted and the count is written once the log can be written again."""
    dropped = 0
    for chunk in iter(lambda: source.read1(65536), b""):  # type: ignore[attr-defined]  # a BufferedReader
        try:
            if dropped:
                os.write(log_fd, f"job_runner: {dropped} bytes of output were lost (the log could not be written)\n".encode())
                dropped = 0
            os.write(log_fd, chunk)
        except OSError:
            dropped += len(chunk)
    source.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="job_runner")
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--exit-file", required=True)
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
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        print(f"job_runner: cannot start {command[0]!r}: {e}", file=sys.stderr, flush=True)
        code = 127
    else:
        # In a thread: a process the trainer left behind may hold the pipe open after the trainer exits,
        # and the exit code must not wait for it (the copy gets a few seconds more to drain).
        copier = threading.Thread(target=copy_output, args=(child.stdout, sys.stdout.fileno()), name="job-output-copy", daemon=True)
        copier.start()
        returncode = child.wait()
        copier.join(timeout=10)
        code = returncode if returncode >= 0 else 128 - returncode  # killed by signal N -> 128+N
    # The runner's own exit status is the trainer's code either way: a launcher still watching reads that.
    record_exit(args.exit_file, reserved, {"job_id": args.job_id, "exit_code": code, "finished_at": time.time()})
    return code


if __name__ == "__main__":
    sys.exit(main())
