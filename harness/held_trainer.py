"""Stands in for `python -m trainer` in the dashboard's browser tests (Settings.trainer_command).

The local launcher runs it as `held_trainer.py run --spec FILE --job-id ID` inside the job's own
process group. It trains nothing: it keeps the job's workload alive, so the job is really RUNNING
under the real launcher, while the test writes trainer events into the run's events.jsonl, the
channel the service tails. It exits with the code the test writes to `<run dir>/exit_code`, or
dies with its group when the job is cancelled. Bounded: it gives up after MAX_LIFETIME_S, or once its run
directory, seen once, is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

MAX_LIFETIME_S = 300.0  # a leaked one (a crashed test run) goes away by itself
LIFETIME_ENV = "HELD_TRAINER_MAX_S"  # a longer limit, for a bench that holds its job through several rounds
POLL_INTERVAL_S = 0.1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="held_trainer")
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--spec", required=True)
    parser.add_argument("--job-id", required=True)
    args, _ = parser.parse_known_args(argv)
    output = json.loads(Path(args.spec).read_text())["output"]
    exit_file = Path(output) / args.job_id / "exit_code"
    print(f"held_trainer: job {args.job_id} waiting for {exit_file}", flush=True)
    deadline = time.monotonic() + float(os.environ.get(LIFETIME_ENV) or MAX_LIFETIME_S)
    run_dir_seen = False
    while time.monotonic() < deadline:
        written = exit_file.read_text().strip() if exit_file.exists() else ""
        if written:  # an empty file is one whose writer has opened it and not yet written the code (write_text)
            code = int(written)
            print(f"held_trainer: exiting with {code}", flush=True)
            return code
        # A run directory that existed and is gone: whoever held the job removed it (a bench's temporary directory,
        # deleted a moment after it wrote exit_code, before this poll could see it); nobody is left to release it.
        if exit_file.parent.is_dir():
            run_dir_seen = True
        elif run_dir_seen:
            print("held_trainer: the run directory was removed; exiting", file=sys.stderr, flush=True)
            return 1
        time.sleep(POLL_INTERVAL_S)
    print("held_trainer: no exit code written in time", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
