"""A gs:// reward file is staged for the train stage with the Python beside it that it may import (the rule of
trainer/rewards_sandbox/reward_files.py), against fake-gcs-server through the real client."""

from __future__ import annotations

from trainer.stages.context import _stage_reward_files


def test_a_gcs_reward_file_comes_with_its_python_neighbours_and_packages(gcs, bucket, tmp_path):
    objects = {
        "team/rewards/rewards.py": b"import helpers\n",
        "team/rewards/helpers.py": b"BASE = 2\n",
        "team/rewards/scoring/__init__.py": b"",
        "team/rewards/scoring/weights.py": b"WEIGHT = 1\n",
        "team/rewards/train.parquet": b"\0" * 64,
        "team/rewards/notes/draft.py": b"x = 1\n",  # not a package
        "team/rewards-old/rewards.py": b"stale\n",  # shares the prefix's text, not its directory
    }
    for name, data in objects.items():
        gcs.write_bytes(f"gs://{bucket}/{name}", data)
    staged = _stage_reward_files(f"gs://{bucket}/team/rewards/rewards.py", tmp_path / "rewards")
    assert staged == str(tmp_path / "rewards" / "rewards.py")
    found = sorted(p.relative_to(tmp_path / "rewards").as_posix() for p in (tmp_path / "rewards").rglob("*") if p.is_file())
    assert found == ["helpers.py", "rewards.py", "scoring/__init__.py", "scoring/weights.py"]
    assert (tmp_path / "rewards" / "helpers.py").read_bytes() == b"BASE = 2\n"
