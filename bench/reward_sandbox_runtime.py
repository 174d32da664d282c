"""What the reward sandbox holds on a real container runtime, recorded: run it where the runtime is (the TPU machine's
gVisor), it runs the sandbox's self-check there (`trainer sandbox-check`, trainer/rewards_sandbox/self_check.py) and
writes the run to a file.

    python bench/reward_sandbox_runtime.py --runtime gvisor --commit COMMIT --out PATH

No figure here is a speed: each run says which layers the workers obtained (namespaces, seccomp, Landlock,
capabilities) and what each hostile probe got, as seen from outside the worker. The run carries the digest of the
sandbox's sources (`sandbox_digest`): tests/bench/test_reward_sandbox_runtime_fresh.py fails when the sources have
changed since, so a change to the sandbox is tried on the runtime again (bench/README.md renders the runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer.rewards_sandbox.self_check import check

REPO = Path(__file__).resolve().parents[1]
# What decides the probe's outcome: the worker's side, the pool, and the probe itself.
SANDBOX_SOURCES = (
    "trainer/rewards_sandbox/worker.py",
    "trainer/rewards_sandbox/confinement.py",
    "trainer/rewards_sandbox/pool.py",
    "trainer/rewards_sandbox/output.py",
    "trainer/rewards_sandbox/process_privacy.py",
    "trainer/rewards_sandbox/self_check.py",
)


def sandbox_digest(root: Path = REPO) -> str:
    digest = hashlib.sha256()
    for name in SANDBOX_SOURCES:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reward_sandbox_runtime")
    parser.add_argument("--runtime", required=True, help="what this machine's container runtime is, e.g. gvisor")
    parser.add_argument("--commit", required=True, help="the commit whose sandbox this is (the machine may have no git)")
    parser.add_argument("--machine", default="", help="the machine, in words")
    parser.add_argument("--out", required=True, help="where to write this run (JSON)")
    args = parser.parse_args(argv)
    run = {
        "runtime": args.runtime,
        "machine": args.machine,
        "commit": args.commit,
        "sandbox_digest": sandbox_digest(),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "uid": os.getuid(),
        "probe": check(env={**os.environ, "PYTHONPATH": str(REPO)}),
    }
    Path(args.out).write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")
    print(json.dumps(run["probe"]["isolation"], sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
