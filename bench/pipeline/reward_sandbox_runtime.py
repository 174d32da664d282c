"""What the reward sandbox holds on a real container runtime, recorded: run it where the runtime is (the TPU machine's
gVisor), it runs the sandbox's self-check there (`trainer sandbox-check`, trainer/rewards_sandbox/self_check.py) and
writes the run to a file.

    python bench/pipeline/reward_sandbox_runtime.py --runtime gvisor --commit COMMIT --out PATH [--reward-container]

With --reward-container the check's workers run behind the reward container's server (trainer/rewards_sandbox/host.py,
started here as the same user: a pod's sidecar would be another user with none of the trainer's files), which shows
the server's socket, hangup and worker start work on the runtime.

No figure here is a speed: each run says which layers the workers obtained (namespaces, seccomp, Landlock,
capabilities) and what each hostile probe got, as seen from outside the worker. The run carries the digest of the
sandbox's sources (`sandbox_digest`): tests/bench/pipeline/test_reward_sandbox_runtime_fresh.py fails when the sources have
changed since, so a change to the sandbox is tried on the runtime again (bench/pipeline/README.md renders the runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from trainer.rewards_sandbox.host import HOST_ENV
from trainer.rewards_sandbox.self_check import check

REPO = Path(__file__).resolve().parents[2]
# What decides the probe's outcome: the whole sandbox package (worker, pool, confinement, the probes themselves,
# the worker's user), so a module added to it is covered without a list to keep.
SANDBOX_SOURCES = tuple(sorted(str(path.relative_to(REPO)) for path in (REPO / "trainer" / "rewards_sandbox").glob("*.py")))


# Modules the sandbox imports that moved since a recorded run, their files unchanged (issue 68: a rename is a move), as
# (old dotted name, new). A run digested before a move still describes today's sandbox when its sources differ only by
# these import paths and git sees each module's file renamed whole since the run's commit: the moved module was never
# in the digest, and its content did not change (tests/bench/pipeline/test_reward_sandbox_runtime_fresh.py checks both).
MOVED_MODULES: tuple[tuple[str, str], ...] = (("trainer.contract.reward_sandbox", "trainer.contract.spec.reward_sandbox"),)


def sandbox_digest(root: Path = REPO, moves_undone: tuple[tuple[str, str], ...] = ()) -> str:
    """The digest of the sandbox's sources; with `moves_undone`, of the sources as they read before those moves."""
    digest = hashlib.sha256()
    for name in SANDBOX_SOURCES:
        source = (root / name).read_bytes()
        for old, new in moves_undone:
            source = source.replace(new.encode(), old.encode())
        digest.update(name.encode() + b"\0" + source + b"\0")
    return digest.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reward_sandbox_runtime")
    parser.add_argument("--runtime", required=True, help="what this machine's container runtime is, e.g. gvisor")
    parser.add_argument("--commit", required=True, help="the commit whose sandbox this is (the machine may have no git)")
    parser.add_argument("--machine", default="", help="the machine, in words")
    parser.add_argument("--out", required=True, help="where to write this run (JSON)")
    parser.add_argument("--reward-container", action="store_true", help="run the workers behind the reward container's server")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    host = None
    if args.reward_container:
        shared = tempfile.mkdtemp(prefix="rljob-reward-share-")
        env[HOST_ENV] = f"{shared}/host.sock"
        host = subprocess.Popen([sys.executable, "-m", "trainer.rewards_sandbox.host", "--socket", env[HOST_ENV]], cwd=REPO, env=env)
    try:
        probe = check(env=env)
    finally:
        if host is not None:
            host.terminate()
            host.wait(timeout=30)
    run = {
        "runtime": args.runtime,
        "reward_container": args.reward_container,
        "machine": args.machine,
        "commit": args.commit,
        "sandbox_digest": sandbox_digest(),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "uid": os.getuid(),
        "probe": probe,
    }
    Path(args.out).write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")
    print(json.dumps(run["probe"]["isolation"], sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
