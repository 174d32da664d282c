"""Issue 39's rl.yml settings (trainer/contract/spec/rl_settings.py): each reaches MaxText 0.2.5's config as its own loader
reads it, each bad value is refused naming its field, and at their defaults the command line and the spec's hash are
what they were before them. The settings left untyped are left out because the pinned Tunix drops them: checked here
against the installed Tunix and train_rl, so a Tunix upgrade that makes them work fails this file."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.adapters.k8s.manifests import spec_local_paths
from service.domain.location_policy import LocationPolicy, check_spec_locations
from service.domain.records.errors import InvalidRequest
from tests.trainer.spec_edit import with_field
from tests.trainer.stages.test_maxtext_argv_injection import JOB_ID, _as_written, _bypassing_validation, _key_values, _read_back
from trainer.contract import JobSpec, RunLayout
from trainer.contract.spec import rl_settings as rl
from trainer.contract.spec.hashing import hash_rule
from trainer.repro import seeds_used
from trainer.sources import resolve_model
from trainer.stages.train import build_train_command

pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

TPU_HARDWARE = {"accelerator": "v6e-8", "chips_per_vm": 8, "rollout_engine": "vllm"}
# spec field -> (value, the rl.yml key it becomes, rl.yml's own value: each value differs from it, so it is ours MaxText read)
SETTINGS = {
    "grpo.eval_mode": ("maj", "eval_mode", "pass"),
    "grpo.eval_batch_size": (7, "eval_batch_size", -1),
    "dataset.shuffle_seed": (rl.MAX_SHUFFLE_SEED, "data_shuffle_seed", 42),
    "hardware.reshard_chunk_size": (3, "rl.reshard_chunk_size", None),
    "grpo.gradient_clipping_threshold": (2.5e-05, "gradient_clipping_threshold", 0.1),
    "grpo.adam_b1": (0.0, "adam_b1", 0.9),
    "grpo.adam_b2": (0.999999, "adam_b2", 0.99),
    "grpo.weight_decay": (1e-07, "adam_weight_decay", 0.1),
}


def _train_command(spec: JobSpec):
    return build_train_command(spec, RunLayout(spec.output, JOB_ID), resolve_model(spec))


def _with(data: dict, **fields: object) -> dict:
    for dotted, value in fields.items():
        data = with_field(data, dotted.replace("__", "."), value)
    return data


def _typed_spec(tiny_spec_dict: dict, tmp_path) -> JobSpec:
    data = with_field(tiny_spec_dict, "hardware", TPU_HARDWARE)
    data = _with(data, grpo__num_eval_passes=4, grpo__eval_sampling_strategy="standard", dataset__processor_path=str(tmp_path / "proc.py"))
    for dotted, (value, _, _) in SETTINGS.items():
        data = with_field(data, dotted, value)
    return JobSpec.model_validate(data)


def test_every_typed_setting_reaches_maxtext_as_its_loader_reads_it(maxtext_loader, tiny_spec_dict, tmp_path):
    # Packing is refused for now (test_packing_...); its pass-through is checked with validation bypassed.
    spec = _bypassing_validation(_typed_spec(tiny_spec_dict, tmp_path), "grpo.max_seq_token_per_tpu", 4096)
    command = _train_command(spec)
    arguments = _key_values(command)
    config = maxtext_loader(command)
    for dotted, (value, key, rl_yml) in [*SETTINGS.items(), ("grpo.max_seq_token_per_tpu", (4096, "max_seq_token_per_tpu", 0))]:
        assert arguments.get(key) == str(value), (dotted, key)
        read = _read_back(config, key)
        assert _as_written(arguments[key], read) and read != rl_yml, (dotted, read)
    assert arguments["dataset_processor_path"] == spec.dataset.processor_path
    assert config.dataset_processor_path == spec.dataset.processor_path
    assert config.reward_num_workers == 0


def test_at_their_defaults_the_command_line_keeps_rl_yml_and_the_hash_is_unchanged(maxtext_loader, tiny_spec_dict):
    spec = JobSpec.model_validate(tiny_spec_dict)
    arguments = _key_values(_train_command(spec))
    new_keys = {key for _, key, _ in SETTINGS.values()} | {"dataset_processor_path", "max_seq_token_per_tpu"}
    assert not new_keys & set(arguments) and arguments["reward_num_workers"] == "0"
    config = maxtext_loader(_train_command(spec))
    assert (config.eval_mode, config.eval_batch_size, config.max_seq_token_per_tpu, config.data_shuffle_seed) == ("pass", -1, 0, 42)
    # The optimizer fields' defaults are what train_rl runs with (rl.yml over base.yml), so leaving them out changes nothing.
    assert {name: getattr(config, key) for name, key in rl.OPTIMIZER_KEYS.items()} == rl.OPTIMIZER_DEFAULTS
    assert {name: getattr(spec.grpo, name) for name in rl.OPTIMIZER_KEYS} == rl.OPTIMIZER_DEFAULTS
    body = json.loads(spec.canonical_json())
    for group in ("grpo", "dataset", "hardware"):  # issue 39's fields came after each part's first version
        part = type(getattr(spec, group))
        assert not {name for name in part.model_fields if hash_rule(part, name) != "always"} & set(body[group]), group
    explicit = _with(tiny_spec_dict, grpo__eval_mode="pass", grpo__max_seq_token_per_tpu=0, dataset__shuffle_seed=None)
    assert JobSpec.model_validate(explicit).content_hash() == spec.content_hash()
    changed = (("grpo.eval_batch_size", 4), ("dataset.shuffle_seed", 42), ("dataset.processor_path", "/p/x.py"), ("grpo.adam_b2", 0.95))
    for dotted, value in changed:
        assert JobSpec.model_validate(with_field(tiny_spec_dict, dotted, value)).content_hash() != spec.content_hash(), dotted


def test_a_packing_row_below_max_target_length_is_refused_as_maxtext_itself_refuses_it(maxtext_loader, tiny_spec_dict):
    spec = JobSpec.model_validate(tiny_spec_dict)
    short = spec.grpo.max_target_length - 1
    with pytest.raises(ValueError, match="max_seq_token_per_tpu"):  # MaxText's own check, in its loader
        maxtext_loader(_train_command(_bypassing_validation(spec, "grpo.max_seq_token_per_tpu", short)))
    errors = _errors(with_field(tiny_spec_dict, "grpo.max_seq_token_per_tpu", short))
    assert "max_target_length" in errors["grpo.max_seq_token_per_tpu"]


def _errors(data: dict) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(data)
    return {".".join(str(p) for p in e["loc"]): e["msg"] for e in caught.value.errors()}


BAD = [
    ({"grpo.eval_mode": "pass@k"}, "grpo.eval_mode", "Input should be"),
    ({"grpo.eval_mode": "maj"}, "grpo.eval_mode", "num_eval_passes >= 2"),  # one pass: nothing to vote on
    ({"grpo.eval_mode": "pass_at_1", "grpo.num_eval_passes": 4}, "grpo.eval_mode", "greedy"),  # k copies of one answer
    ({"grpo.eval_batch_size": 0}, "grpo.eval_batch_size", "greater than 0"),
    ({"grpo.eval_batch_size": -1}, "grpo.eval_batch_size", "greater than 0"),  # rl.yml's "unset" is null here
    ({"grpo.eval_batch_size": 65_536, "grpo.max_target_length": 1_048_576}, "grpo.eval_batch_size", "32-bit"),
    ({"grpo.max_seq_token_per_tpu": -1}, "grpo.max_seq_token_per_tpu", "greater than or equal to 0"),
    ({"grpo.max_seq_token_per_tpu": 2**31}, "grpo.max_seq_token_per_tpu", "less than or equal"),
    ({"grpo.max_seq_token_per_tpu": 4096}, "grpo.max_seq_token_per_tpu", "not supported yet"),  # see the Tunix test below
    ({"grpo.gradient_clipping_threshold": -0.1}, "grpo.gradient_clipping_threshold", "greater than or equal to 0"),
    ({"grpo.adam_b1": 1.0}, "grpo.adam_b1", "less than 1"),
    ({"grpo.adam_b2": -0.5}, "grpo.adam_b2", "greater than or equal to 0"),
    ({"grpo.weight_decay": 2.0}, "grpo.weight_decay", "less than or equal to 1"),
    ({"dataset.shuffle_seed": -1}, "dataset.shuffle_seed", "greater than or equal to 0"),
    ({"dataset.shuffle_seed": 2**32}, "dataset.shuffle_seed", "less than or equal"),
    ({"dataset.processor_path": "/p/${oc.env:HF_TOKEN}.py"}, "dataset.processor_path", "config loader"),
    ({"dataset.processor_path": "/p/process.json"}, "dataset.processor_path", ".py file"),
    ({"dataset.processor_path": "relative/process.py"}, "dataset.processor_path", "absolute local path"),
    ({"hardware.reshard_chunk_size": 4}, "hardware.reshard_chunk_size", "vllm rollout"),  # the tiny spec's jax rollout
    ({"hardware": {**TPU_HARDWARE, "reshard_chunk_size": 0}}, "hardware.reshard_chunk_size", "greater than or equal to 1"),
]


@pytest.mark.parametrize(("fields", "field", "reason"), BAD, ids=[f"{f}={list(v.values())[0]}" for v, f, _ in BAD])
def test_bad_values_are_refused_naming_the_field(tiny_spec_dict, fields, field, reason):
    data = tiny_spec_dict
    for dotted, value in fields.items():
        data = with_field(data, dotted, value)
    errors = _errors(data)
    assert field in errors and reason in errors[field], errors


def test_the_valid_eval_modes_pass(tiny_spec_dict):
    for mode in ("maj", "pass_at_1"):
        data = _with(tiny_spec_dict, grpo__eval_mode=mode, grpo__num_eval_passes=2, grpo__eval_sampling_strategy="liberal")
        assert JobSpec.model_validate(data).grpo.eval_mode == mode


def test_the_processor_file_is_an_input_the_team_policy_and_the_pods_mounts_check(tiny_spec_dict, tmp_path):
    outside = "/elsewhere/process.py"
    spec = JobSpec.model_validate(with_field(tiny_spec_dict, "dataset.processor_path", outside))
    assert ("dataset.processor_path", outside) in spec.input_locations()
    assert ("dataset.processor_path", outside) in spec_local_paths(spec)
    roots = tuple(sorted({str(tmp_path)}))
    inside = JobSpec.model_validate(with_field(tiny_spec_dict, "dataset.processor_path", str(tmp_path / "p.py")))
    check_spec_locations(inside, "team-a", LocationPolicy({"team-a": roots}), resolve=lambda p: p)
    with pytest.raises(InvalidRequest) as refused:
        check_spec_locations(spec, "team-a", LocationPolicy({"team-a": roots}), resolve=lambda p: p)
    assert "dataset.processor_path" in str(refused.value)


def test_the_repro_record_reports_the_shuffle_seed_that_ran(tiny_spec_dict):
    assert seeds_used(JobSpec.model_validate(tiny_spec_dict))["data_shuffle"].value == 42  # rl.yml's
    seeded = JobSpec.model_validate(with_field(tiny_spec_dict, "dataset.shuffle_seed", 7))
    assert seeds_used(seeded)["data_shuffle"].value == 7 and "dataset.shuffle_seed" in seeds_used(seeded)["data_shuffle"].source


def test_the_untyped_reward_pool_and_weight_sync_knobs_are_dropped_by_the_pinned_tunix():
    """Why reward_num_workers, reward_worker_timeout_seconds, gc_collect_after_weight_sync and
    free_kv_cache_during_weight_sync are not in the spec: train_rl passes them only through _kwargs_supported_by, which
    keeps what the installed Tunix's class has, and Tunix 0.1.7 has none of them. When a Tunix upgrade adds one, this
    fails: type it then (and, for the reward pool, decide again how it meets rljob's sandbox; rl_settings.py)."""
    import importlib.util

    from tunix.rl import rl_cluster
    from tunix.rl.grpo.grpo_learner import GrpoConfig
    from tunix.rl.rollout.base_rollout import RolloutConfig

    spec = importlib.util.find_spec("maxtext.trainers.post_train.rl.train_rl")
    assert spec is not None and spec.origin is not None
    guarded, passed = set(), set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_text())):
        if isinstance(node, ast.Call):
            names = {k.arg for k in node.keywords if k.arg}
            is_guard = isinstance(node.func, ast.Name) and node.func.id == "_kwargs_supported_by"
            (guarded if is_guard else passed).update(names)
    dropped = {
        GrpoConfig: {"reward_num_workers", "reward_worker_timeout_seconds"},
        rl_cluster.ClusterConfig: {"gc_collect_after_weight_sync"},
        RolloutConfig: {"rollout_vllm_free_kv_cache_during_weight_sync"},
    }
    for cls, names in dropped.items():
        assert names <= guarded and not names & passed, (cls.__name__, names)
        assert not names & set(inspect.signature(cls).parameters), cls.__name__
    # The typed ones are what the pinned Tunix does read.
    assert {"rollout_vllm_reshard_chunk_size", "max_seq_token_per_tpu"} <= passed
    assert "rollout_vllm_reshard_chunk_size" in inspect.signature(RolloutConfig).parameters
    assert "max_seq_token_per_tpu" in inspect.signature(rl_cluster.RLTrainingConfig).parameters


def test_a_large_evaluation_batch_is_the_rollout_cache_the_fit_estimate_counts(tiny_spec_dict):
    from trainer.sizing.fit import per_chip_bytes
    from trainer.sizing.model_shapes import ModelShape

    shape = ModelShape(emb_dim=8, num_query_heads=2, num_kv_heads=1, num_layers=2, mlp_dim=16, head_dim=4, vocab_size=10)
    spec = JobSpec.model_validate(tiny_spec_dict)  # batch_size 2 x num_generations 2: 4 rollout sequences
    small = JobSpec.model_validate(with_field(tiny_spec_dict, "grpo.eval_batch_size", 4))
    large = JobSpec.model_validate(with_field(tiny_spec_dict, "grpo.eval_batch_size", 16))
    cache = per_chip_bytes(spec, shape)[0].kv_cache
    assert per_chip_bytes(small, shape)[0].kv_cache == cache
    assert per_chip_bytes(large, shape)[0].kv_cache == 4 * cache


def test_a_gcs_processor_file_is_staged_locally_and_the_command_names_the_copy(tiny_spec_dict, tmp_path, monkeypatch):
    """MaxText imports dataset_processor_path with importlib: it needs a local file, as the reward file does."""
    from types import SimpleNamespace

    from trainer.stages import context

    uri = "gs://team-bucket/code/process.py"
    reads: list[str] = []
    fake_store = SimpleNamespace(read_bytes=lambda u: reads.append(u) or b"def process_data(*a): ...\n")
    monkeypatch.setattr(context, "store_for", lambda _uri: fake_store)
    spec = JobSpec.model_validate(with_field(tiny_spec_dict, "dataset.processor_path", uri))
    ctx = SimpleNamespace(spec=spec, work_dir=tmp_path / "work")
    local = context.stage_inputs(ctx)["local_processor"]  # type: ignore[arg-type]
    assert reads == [uri] and local.endswith("/inputs/processor/process.py")
    assert "def process_data" in open(local).read()
    command = build_train_command(spec, RunLayout(spec.output, JOB_ID), resolve_model(spec), local_processor=local)
    assert _key_values(command)["dataset_processor_path"] == local


def test_packing_is_refused_because_tunix_packs_across_batches_and_trains_a_row_per_step():
    """Why grpo.max_seq_token_per_tpu accepts only 0: Tunix 0.1.7's pack_sequences, which the learner runs over the
    stream of rollout batches, fills a row from the next batch when there is room and yields each row as one train
    step. When a Tunix release packs within a batch, this fails: allow packing then (rl_settings.packing_problem)."""
    import numpy as np
    from tunix.rl.common import TrainExample
    from tunix.rl.utils import pack_sequences

    def batch(token: int) -> list[TrainExample]:  # one rollout batch: 2 sequences of 2 prompt and 3 completion tokens
        ids = np.full((2, 2), token, np.int32)
        completion = np.full((2, 3), token, np.int32)
        ones = np.ones_like
        return [TrainExample(ids, ones(ids), completion, ones(completion), np.zeros(2, np.float32), None, None)]

    rows = list(pack_sequences(iter([batch(1), batch(2)]), max_token_budget=20))
    assert len(rows) == 1 and len(rows[0]) == 1  # two batches -> one train step of one row
    assert set(np.asarray(rows[0][0].completion_ids).ravel().tolist()) >= {1, 2}  # both batches' tokens in it
