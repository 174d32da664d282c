"""A reward's files (trainer/rewards_sandbox/reward_files.py): the reward file and the Python beside it that it may
import go wherever the file is copied for a worker, by one rule, with its bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.rewards_sandbox import reward_files
from trainer.rewards_sandbox.reward_files import RewardFilesRefused, copy_reward_files, local_reward_files, select_reward_files
from trainer.rewards_sandbox.worker_user import WORKER_UID

REPO = Path(__file__).resolve().parents[3]
REWARD = """
import helpers
from scoring.weights import WEIGHT

def scored(prompts, completions, **kwargs):
    return [helpers.BASE * WEIGHT for _ in completions]
"""


def write_reward(root: Path) -> Path:
    """A reward file that imports a neighbour module and a package, among files that must not go with it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "rewards.py").write_text(REWARD)
    (root / "helpers.py").write_text("BASE = 2.0\n")
    (root / "scoring").mkdir()
    (root / "scoring" / "__init__.py").write_text("")
    (root / "scoring" / "weights.py").write_text("WEIGHT = 1.5\n")
    (root / "train.parquet").write_bytes(b"\0" * 4096)  # data: not a reward's
    (root / "notes").mkdir()
    (root / "notes" / "draft.py").write_text("x = 1\n")  # a directory that is not a package
    return root / "rewards.py"


def test_the_rule_takes_the_file_its_python_neighbours_and_packages_only():
    entries = [
        ("rewards.py", 10),
        ("helpers.py", 10),
        ("train.parquet", 10),
        ("pkg/__init__.py", 0),
        ("pkg/a.py", 10),
        ("pkg/sub/__init__.py", 0),
        ("pkg/sub/b.py", 10),
        ("pkg/loose/c.py", 10),  # pkg/loose has no __init__.py
        ("notes/d.py", 10),
        ("p/q/r/s/__init__.py", 0),
    ]
    entries += [("p/__init__.py", 0), ("p/q/__init__.py", 0), ("p/q/r/__init__.py", 0)]
    chosen = select_reward_files(entries, "rewards.py")
    assert chosen == sorted(
        ["rewards.py", "helpers.py", "pkg/__init__.py", "pkg/a.py", "pkg/sub/__init__.py", "pkg/sub/b.py"]
        + ["p/__init__.py", "p/q/__init__.py", "p/q/r/__init__.py"]  # p/q/r/s is past PACKAGE_DEPTH
    )


@pytest.mark.parametrize("count, size", [(reward_files.MAX_FILES + 1, 1), (2, reward_files.MAX_BYTES)])
def test_a_directory_with_more_python_than_a_reward_takes_is_refused_with_the_bound(count, size):
    entries = [("rewards.py", size)] + [(f"m{i}.py", size) for i in range(count - 1)]
    with pytest.raises(RewardFilesRefused, match="in a directory of their own") as refused:
        select_reward_files(entries, "rewards.py")
    assert f"at most {reward_files.MAX_FILES} files" in str(refused.value)


def test_local_files_skip_symlinks_and_copies_keep_their_modes(tmp_path):
    reward = write_reward(tmp_path / "src")
    (tmp_path / "secret.py").write_text("KEY = 'x'\n")
    os.symlink(tmp_path / "secret.py", tmp_path / "src" / "linked.py")
    assert local_reward_files(str(reward)) == ["helpers.py", "rewards.py", "scoring/__init__.py", "scoring/weights.py"]
    copied = Path(copy_reward_files(str(reward), tmp_path / "copy", file_mode=0o400, dir_mode=0o700))
    assert copied == tmp_path / "copy" / "rewards.py"
    assert (copied.stat().st_mode & 0o777, (tmp_path / "copy" / "scoring").stat().st_mode & 0o777) == (0o400, 0o700)
    assert not (tmp_path / "copy" / "linked.py").exists() and not (tmp_path / "copy" / "train.parquet").exists()


POOL = """
import json, sys
from trainer.rewards_sandbox.pool import RewardSandboxPool, SandboxLimits
pool = RewardSandboxPool(sys.argv[1], ["scored"], SandboxLimits(timeout_s=20, start_timeout_s=30), size=1, host=None)
pool.start()
try:
    result = pool.call("scored", {"prompts": ["p"], "completions": ["a", "b"]})
finally:
    pool.close()
print(json.dumps({"scores": result.scores, "error": result.error, "worker_uid": pool.isolation.get("worker_uid")}))
"""


def test_a_worker_that_reads_a_copy_imports_the_rewards_neighbours(tmp_path):
    """A root trainer's workers run as another uid and read a copy of the reward's files (the run's work directory is
    0700): the copy holds what the reward imports. Run as gVisor's root would run it (harness/runtime_emulation.py
    makes the interpreter reachable to that uid, as rljob's image has it); as any other user the workers read the
    original, and the imports resolve the same."""
    work = tmp_path / "work"
    reward = write_reward(work / "inputs" / "rewards")
    work.chmod(0o700)
    command = [sys.executable, "-m", "harness.runtime_emulation", "--runtime", "gvisor", "--"]
    command += [sys.executable, "-c", POOL, str(reward)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "HOME": "/tmp"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["scores"] == [3.0, 3.0], seen
    assert seen["worker_uid"] == (WORKER_UID if os.getuid() == 0 else os.getuid())
