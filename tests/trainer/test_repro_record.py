"""repro.json (trainer/repro.py): what it records, that it holds no secret, and that it is equal for two
runs of the same spec but for the job id (the rerun check of `rljob rerun`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trainer.contract import JobSpec, RunLayout
from trainer.contract.run.repro import REPRO_SCHEMA_VERSION, ReproRecord
from trainer.repro import IMAGE_ENV, build_repro_record, write_repro

IMAGE = "us-docker.pkg.dev/p/rljob/trainer:0.1.0@sha256:" + "ab" * 32


def _spec(tiny_spec_dict: dict) -> JobSpec:
    return JobSpec.model_validate(tiny_spec_dict)


def _written(layout: RunLayout) -> dict:
    return json.loads(Path(layout.repro).read_text())


def test_the_record_names_the_spec_image_versions_seeds_and_input_hashes(tmp_path, tiny_spec_dict):
    spec = _spec(tiny_spec_dict)
    layout = RunLayout(spec.output, "rl-aaaaaaaaaaaa")
    write_repro(spec, layout, {IMAGE_ENV: IMAGE})
    record = ReproRecord.model_validate(_written(layout))
    assert record.schema_version == REPRO_SCHEMA_VERSION and record.job_id == "rl-aaaaaaaaaaaa"
    assert record.spec == spec.model_dump(mode="json")  # after defaults: grpo.learning_rate is there unasked
    assert record.spec["grpo"]["learning_rate"] == spec.grpo.learning_rate
    assert record.image.reference == IMAGE and record.image.digest == "sha256:" + "ab" * 32
    assert set(record.versions) >= {"rljob", "maxtext", "tunix", "jax", "jaxlib", "flax", "orbax", "transformers", "python"}
    assert record.versions["python"]
    assert record.seeds["data_shuffle"].value == 42 and "rl.yml" in record.seeds["data_shuffle"].source
    assert record.seeds["init_weights"].value == 0 and "base.yml" in record.seeds["init_weights"].source
    assert record.seeds["sampling"].value == 42 and record.seeds["sampling"].source.startswith("default")
    train = Path(spec.dataset.train_files[0])
    assert record.data[0].sha256 == hashlib.sha256(train.read_bytes()).hexdigest()
    assert [h.uri for h in record.data] == [*spec.dataset.train_files, *spec.dataset.eval_files]
    assert record.reward_functions is not None
    assert record.reward_functions.sha256 == hashlib.sha256(b"{}").hexdigest()
    assert record.model.kind == "local" and record.model.content is not None and record.model.content.files == 1
    assert record.hardware.accelerator == "cpu" and set(record.hardware.mesh) == {"rollout_data_parallelism", "rollout_tensor_parallelism"}


def test_the_jobs_seed_is_recorded_for_rows_weights_and_rollout_keys(tmp_path, tiny_spec_dict):
    seeds = build_repro_record(_spec({**tiny_spec_dict, "seed": 7}), "rl-aaaaaaaaaaaa", {}).seeds
    assert {name: seed.value for name, seed in seeds.items()} == {"data_shuffle": 7, "init_weights": 7, "sampling": 7}
    assert all(seed.source.startswith("spec seed") for seed in seeds.values())
    with_order = _spec({**tiny_spec_dict, "seed": 7, "dataset": {**tiny_spec_dict["dataset"], "shuffle_seed": 3}})
    assert build_repro_record(with_order, "rl-aaaaaaaaaaaa", {}).seeds["data_shuffle"].value == 3


def test_a_changed_model_file_changes_the_model_hash(tmp_path, tiny_spec_dict):
    spec = _spec(tiny_spec_dict)
    before = build_repro_record(spec, "rl-aaaaaaaaaaaa", {}).model.content
    (Path(spec.model.source) / "config.json").write_text("{}")
    after = build_repro_record(spec, "rl-aaaaaaaaaaaa", {}).model.content
    assert before is not None and after is not None and before.sha256 != after.sha256


def test_a_changed_helper_beside_the_reward_file_changes_the_reward_files_hash_only(tmp_path, tiny_spec_dict):
    """reward_functions is the file alone; reward_files is the set its workers are given (reward_files.py's rule): a
    module it may import changes the second, data beside it and a package too deep for the rule change neither."""
    spec = _spec(tiny_spec_dict)
    reward = Path(spec.grpo.rewards.functions_path or "")
    (reward.parent / "helpers.py").write_text("SCALE = 1\n")
    (reward.parent / "pkg").mkdir()
    (reward.parent / "pkg" / "__init__.py").write_text("")
    before = build_repro_record(spec, "rl-aaaaaaaaaaaa", {})
    assert before.reward_files is not None and before.reward_files.files == 3  # the reward file, helpers.py, pkg/__init__.py
    seen = {before.reward_files.sha256}
    (reward.parent / "notes.txt").write_text("data is not imported")
    (reward.parent / "unpackaged").mkdir()
    (reward.parent / "unpackaged" / "x.py").write_text("X = 1\n")
    assert build_repro_record(spec, "rl-aaaaaaaaaaaa", {}).reward_files == before.reward_files
    for changed in (reward.parent / "helpers.py", reward.parent / "pkg" / "__init__.py"):
        changed.write_text(changed.read_text() + "# changed\n")
        after = build_repro_record(spec, "rl-aaaaaaaaaaaa", {})
        assert after.reward_functions == before.reward_functions
        assert after.reward_files is not None and after.reward_files.sha256 not in seen, changed.name
        seen.add(after.reward_files.sha256)


def test_a_reward_directory_past_the_bounds_is_recorded_as_unreadable(tmp_path, tiny_spec_dict):
    spec = _spec(tiny_spec_dict)
    reward = Path(spec.grpo.rewards.functions_path or "")
    for i in range(70):
        (reward.parent / f"m{i}.py").write_text("")
    record = build_repro_record(spec, "rl-aaaaaaaaaaaa", {})
    assert record.reward_files is not None and record.reward_files.sha256 is None
    assert "at most 64 files" in (record.reward_files.error or "")


def test_no_environment_secret_lands_in_the_file(tmp_path, tiny_spec_dict):
    token = "hf_secretTOKENvalue123"
    spec = _spec({**tiny_spec_dict, "labels": {"oops": token}})  # a token pasted where it does not belong
    layout = RunLayout(spec.output, "rl-aaaaaaaaaaaa")
    write_repro(spec, layout, {"HF_TOKEN": token})
    text = Path(layout.repro).read_text()
    assert token not in text and "<redacted>" in text


def test_two_runs_of_one_spec_differ_only_in_the_job_id(tmp_path, tiny_spec_dict):
    spec = _spec(tiny_spec_dict)
    first, third = RunLayout(spec.output, "rl-aaaaaaaaaaaa"), RunLayout(spec.output, "rl-cccccccccccc")
    write_repro(spec, first, {IMAGE_ENV: IMAGE})
    write_repro(spec, third, {IMAGE_ENV: IMAGE})
    a, c = _written(first), _written(third)
    assert a["job_id"] != c["job_id"]
    assert {**a, "job_id": None} == {**c, "job_id": None}


def test_a_missing_input_is_recorded_as_unreadable_not_raised(tmp_path, tiny_spec_dict):
    spec = _spec(tiny_spec_dict)
    Path(spec.dataset.train_files[0]).unlink()
    record = build_repro_record(spec, "rl-aaaaaaaaaaaa", {})
    assert record.data[0].sha256 is None and record.data[0].error
