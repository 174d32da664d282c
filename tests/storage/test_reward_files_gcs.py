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


def test_a_reward_directory_holding_more_than_the_bound_is_refused_after_one_bounded_listing(gcs, bucket, tmp_path, monkeypatch):
    import pytest

    import trainer.stages.context as context
    import trainer.stages.reward_inputs as reward_inputs
    from trainer.rewards_sandbox.reward_files import RewardFilesRefused

    monkeypatch.setattr(reward_inputs, "MAX_LISTED", 3)
    for i in range(6):
        gcs.write_bytes(f"gs://{bucket}/big/data-{i}.bin", b"x")
    gcs.write_bytes(f"gs://{bucket}/big/rewards.py", b"def f(): ...\n")
    listed: list[int] = []
    real_list = gcs.list

    def counting_list(prefix_uri, *, limit=None):
        found = real_list(prefix_uri, limit=limit)
        listed.append(len(found))
        return found

    monkeypatch.setattr(gcs, "list", counting_list)
    monkeypatch.setattr(context, "store_for", lambda uri: gcs)
    with pytest.raises(RewardFilesRefused, match="holds more than 3 objects: put the reward file"):
        context._stage_reward_files(f"gs://{bucket}/big/rewards.py", tmp_path / "rewards")
    assert listed == [4]  # the bound and one more, never the whole directory
    assert not (tmp_path / "rewards").exists()


def test_a_listing_stops_at_its_limit_on_gcs_and_on_a_local_disk(gcs, bucket, tmp_path):
    from trainer.storage.local import LocalDirStore

    for i in range(5):
        gcs.write_bytes(f"gs://{bucket}/many/{i}", b"x")
        (tmp_path / "many").mkdir(exist_ok=True)
        (tmp_path / "many" / str(i)).write_bytes(b"x")
    assert len(gcs.list(f"gs://{bucket}/many", limit=2)) == 2 and len(gcs.list(f"gs://{bucket}/many")) == 5
    local = LocalDirStore()
    assert len(local.list(str(tmp_path / "many"), limit=2)) == 2 and len(local.list(str(tmp_path / "many"))) == 5
