"""Every value the spec accepts is one MaxText can run as written: hostile or malformed strings,
non-finite and out-of-range numbers, and hardware the TPU table does not have are refused, each
naming its field. (test_maxtext_argv_injection.py shows, with MaxText's own loader, why the strings.)"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from tests.trainer.spec_edit import with_field
from trainer.contract import GrpoSpec, JobSpec, RewardSpec
from trainer.contract.accelerators.tpu import TPU_SLICES
from trainer.contract.spec import values as limits
from trainer.contract.spec.dns_label import DNS_LABEL_PATTERN
from trainer.contract.spec.eval_suite import EvalSampling, SuiteSpec

REPO = Path(__file__).resolve().parents[4]


def _errors(data: dict) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(data)
    return {".".join(str(p) for p in e["loc"]): e["msg"] for e in caught.value.errors()}


def _refused(data: dict, field: str) -> str:
    errors = _errors(data)
    assert field in errors, errors
    return errors[field]


INTERPOLATION = "${oc.env:HF_TOKEN}"

# (field, value that reaches a MaxText key=value argument or a label unless refused)
HOSTILE_STRINGS = [
    ("dataset.subset", INTERPOLATION),
    ("dataset.subset", "main${oc.env:HF_TOKEN}"),
    ("dataset.subset", "1.0"),  # YAML: a float
    ("dataset.subset", "null"),  # YAML: None
    ("dataset.subset", "None"),  # MaxText: None
    ("dataset.subset", "on"),  # YAML: True
    ("dataset.subset", "main\n"),
    ("dataset.train_split", INTERPOLATION),
    ("dataset.train_split", "train #x"),
    ("dataset.eval_split", "${hf_access_token}"),
    ("dataset.eval_split", "false"),
    ("dataset.name", "org/${oc.env:HF_TOKEN}"),
    ("output", "/runs/${oc.env:HF_TOKEN}"),
    ("output", "/runs/a #comment"),
    ("output", "/runs/a: b"),
    ("output", "/runs/a\x00b"),
    ("output", "/runs/a\nb"),
    ("output", "gs://bucket/${x}"),
    ("model.source", "/models/${oc.env:HF_TOKEN}"),
    ("model.source", "/models/tiny\t"),
    ("model.tokenizer", "/tok/${oc.env:HF_TOKEN}"),
    ("model.name", "${oc.env:HF_TOKEN}"),
    ("model.name", "1"),
    ("model.name", "yes"),
    ("dataset.prompt_template", "/t/${oc.env:HF_TOKEN}.json"),
    ("dataset.train_files.0", "/d/${oc.env:HF_TOKEN}.jsonl"),
    ("dataset.eval_files.0", "/d/a\x7fb.parquet"),
    ("grpo.rewards.functions_path", "/r/${oc.env:HF_TOKEN}.py"),
    ("grpo.rewards.functions.0", "off"),
    ("grpo.rewards.functions.0", "réward"),  # a Python identifier, but not ASCII
    ("export.hub_repo", "org/repo\n"),
    ("name", "job\n"),
    ("team", "ml\x00"),
]


@pytest.mark.parametrize(("field", "value"), HOSTILE_STRINGS, ids=[f"{f}={v!r}" for f, v in HOSTILE_STRINGS])
def test_strings_maxtext_would_reinterpret_are_refused_naming_the_field(tiny_spec_dict, field, value):
    message = _refused(with_field(tiny_spec_dict, field, value), field)
    if "$" in value:
        assert "resolve" in message, message  # says why, not only what


def test_a_label_with_a_control_character_is_refused(tiny_spec_dict):
    assert "not a valid Kubernetes label" in _refused(with_field(tiny_spec_dict, "labels", {"team": "ml\n"}), "labels")


def test_what_real_jobs_use_is_accepted(tiny_spec_dict, tmp_path):
    odd_but_fine = tmp_path / "date=2024-01-01" / "a@b+c,d%20~e:f"
    data = with_field(tiny_spec_dict, "output", str(odd_but_fine))
    data = with_field(data, "dataset.subset", "socratic")
    data = with_field(data, "dataset.eval_split", "validation.v2")
    spec = JobSpec.model_validate(with_field(data, "labels", {"cost-center": "rl_team.1"}))
    assert spec.output == str(odd_but_fine)


FLOAT_FIELDS = [f"grpo.{n}" for n, f in GrpoSpec.model_fields.items() if f.annotation in (float, float | None)] + [
    f"grpo.rewards.{n}" for n, f in RewardSpec.model_fields.items() if f.annotation is float
]
# The spec's own floats (issue 38's hang limit); a new one is caught by the coverage test below.
FLOAT_FIELDS += [n for n, f in JobSpec.model_fields.items() if f.annotation in (float, float | None)]


@pytest.mark.parametrize("field", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, float("1e309")], ids=["nan", "inf", "-inf", "1e309"])
def test_non_finite_floats_are_refused(tiny_spec_dict, field, value):
    assert _refused(with_field(tiny_spec_dict, field, value), field)


def _number_fields(schema: dict, defs: dict, prefix: str = "") -> list[str]:
    out = []
    for name, prop in schema.get("properties", {}).items():
        options = prop.get("anyOf", [prop])
        for option in options:
            if "$ref" in option:
                out += _number_fields(defs[option["$ref"].rsplit("/", 1)[1]], defs, f"{prefix}{name}.")
            elif option.get("type") == "number":
                out.append(prefix + name)
    return out


# The suite's sampling, under an eval job's `evaluation` and a training job's attached `eval` (one model, EvalSampling).
SAMPLING_FLOAT_FIELDS = ["evaluation.suite.sampling.temperature", "eval.suite.sampling.temperature"]
# A user suite's reward deadline (issue 38's sandbox), under both as well.
SUITE_FLOAT_FIELDS = ["evaluation.suite.reward_timeout_s", "eval.suite.reward_timeout_s"]


def test_the_non_finite_check_covers_every_float_in_the_spec():
    schema = JobSpec.model_json_schema()
    assert sorted(_number_fields(schema, schema["$defs"])) == sorted(FLOAT_FIELDS + SAMPLING_FLOAT_FIELDS + SUITE_FLOAT_FIELDS)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, float("1e309")], ids=["nan", "inf", "-inf", "1e309"])
def test_non_finite_suite_reward_deadlines_are_refused(value):
    user_suite = {"name": "mine", "data": "/data/rows.jsonl", "rewards_path": "/data/rewards.py", "rewards": ["score"]}
    SuiteSpec.model_validate(user_suite)  # the suite itself is accepted
    with pytest.raises(ValidationError, match="reward_timeout_s"):
        SuiteSpec.model_validate({**user_suite, "reward_timeout_s": value})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, float("1e309")], ids=["nan", "inf", "-inf", "1e309"])
def test_non_finite_sampling_temperatures_are_refused(value):
    with pytest.raises(ValidationError, match="temperature"):
        EvalSampling.model_validate({"temperature": value})


# (field, largest accepted value): the limit is accepted, one more is refused.
UPPER_BOUNDS = [
    ("grpo.num_batches", limits.MAX_NUM_BATCHES),
    ("grpo.num_iterations", limits.MAX_NUM_ITERATIONS),
    ("grpo.num_test_batches", limits.MAX_NUM_TEST_BATCHES),
    ("grpo.batch_size", limits.MAX_BATCH_SIZE),
    ("grpo.num_generations", limits.MAX_NUM_GENERATIONS),
    ("grpo.top_k", limits.MAX_TOP_K),
    ("grpo.kv_cache_buffer", limits.MAX_SEQUENCE_LENGTH),
    ("grpo.checkpoint_period", limits.MAX_NUM_BATCHES * limits.MAX_NUM_ITERATIONS),
    ("grpo.keep_last_checkpoints", limits.MAX_NUM_BATCHES * limits.MAX_NUM_ITERATIONS),
    ("grpo.num_eval_passes", limits.MAX_EVAL_PASSES),
    ("grpo.temperature", limits.MAX_TEMPERATURE),
    ("grpo.beta", limits.MAX_BETA),
    ("grpo.rewards.exact_answer", limits.MAX_REWARD_WEIGHT),
    ("model.dims.base_emb_dim", limits.MAX_MODEL_DIM),
]


@pytest.mark.parametrize(("field", "limit"), UPPER_BOUNDS, ids=[f for f, _ in UPPER_BOUNDS])
def test_every_number_has_an_upper_bound(tiny_spec_dict, field, limit):
    if field.startswith("model.dims"):
        dims = {
            k: 8
            for k in ("base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "base_num_decoder_layers", "base_mlp_dim", "head_dim")
        }
        tiny_spec_dict = with_field(tiny_spec_dict, "model.dims", dims)
    JobSpec.model_validate(with_field(tiny_spec_dict, field, limit))
    over = limit + (1 if isinstance(limit, int) else limit * 1e-6)
    assert "less than or equal" in _refused(with_field(tiny_spec_dict, field, over), field)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("grpo.batch_size", 10**12),
        ("grpo.num_batches", 2**70),
        ("hardware.chips_per_vm", 10**9),
        ("grpo.max_target_length", 2**63),
        ("grpo.rewards.penalty_incorrect_answer", -1e6),
    ],
)
def test_the_probes_numbers_are_refused(tiny_spec_dict, field, value):
    assert _refused(with_field(tiny_spec_dict, field, value), field)


def test_rollout_tokens_per_step_must_fit_int32(tiny_spec_dict):
    grpo = {**tiny_spec_dict["grpo"], "batch_size": 4096, "num_generations": 1024, "max_target_length": 1024}
    message = _refused(with_field(tiny_spec_dict, "grpo", grpo), "grpo")
    assert "32-bit" in message and str(4096 * 1024 * 1024) in message
    JobSpec.model_validate(with_field(tiny_spec_dict, "grpo", {**grpo, "batch_size": 2047}))


def _hardware(tiny_spec_dict: dict, **hardware) -> dict:
    return with_field(tiny_spec_dict, "hardware", {"rollout_engine": "vllm", **hardware})


@pytest.mark.parametrize(
    ("hardware", "field", "says"),
    [
        ({"accelerator": "v6e-3"}, "hardware.accelerator", "v6e-8"),  # no such slice
        ({"accelerator": "v4-8"}, "hardware.accelerator", "use one of"),
        ({"accelerator": "v6e-16", "chips_per_vm": 8}, "hardware.chips_per_vm", "set chips_per_vm: 4"),
        ({"accelerator": "v6e-16"}, "hardware.chips_per_vm", "set chips_per_vm: 4"),  # the default 8 contradicts
        ({"accelerator": "v6e-8", "chips_per_vm": 4}, "hardware.chips_per_vm", "set chips_per_vm: 8"),
        ({"accelerator": "v6e-8", "rollout_data_parallelism": 16}, "hardware.rollout_data_parallelism", "8 rollout"),
        (
            {"accelerator": "v6e-8", "rollout_data_parallelism": -1, "rollout_tensor_parallelism": 3},
            "hardware.rollout_tensor_parallelism",
            "does not divide",
        ),
        (
            {"accelerator": "v6e-8", "rollout_data_parallelism": 2, "rollout_tensor_parallelism": 2},
            "hardware.rollout_tensor_parallelism",
            "= 4",
        ),
        (
            {"accelerator": "v6e-8", "rollout_data_parallelism": -1, "rollout_tensor_parallelism": -1},
            "hardware.rollout_tensor_parallelism",
            "both be -1",
        ),
        # Multi-host: train_rl gives the rollout half of the 16 chips.
        ({"accelerator": "v6e-16", "chips_per_vm": 4, "rollout_data_parallelism": 16}, "hardware.rollout_data_parallelism", "8 rollout"),
        (
            {"accelerator": "cpu", "chips_per_vm": 1, "rollout_engine": "jax", "rollout_data_parallelism": 2},
            "hardware.rollout_data_parallelism",
            "1 rollout",
        ),
    ],
)
def test_hardware_is_checked_against_the_tpu_table(tiny_spec_dict, hardware, field, says):
    assert says in _refused(_hardware(tiny_spec_dict, **hardware), field)


@pytest.mark.parametrize("name", sorted(TPU_SLICES))
def test_every_slice_in_the_table_is_accepted_with_its_own_shape(tiny_spec_dict, name):
    tpu = TPU_SLICES[name]
    spec = JobSpec.model_validate(_hardware(tiny_spec_dict, accelerator=name, chips_per_vm=tpu.chips_per_vm))
    assert spec.hardware.rollout_data_parallelism == 1 and spec.hardware.rollout_tensor_parallelism == -1
    every_device_a_replica = {"rollout_data_parallelism": tpu.rollout_devices, "rollout_tensor_parallelism": 1}
    JobSpec.model_validate(_hardware(tiny_spec_dict, accelerator=name, chips_per_vm=tpu.chips_per_vm, **every_device_a_replica))


def test_the_tpu_table_is_consistent():
    for name, tpu in TPU_SLICES.items():
        generation, count = name.split("-")
        assert tpu.generation == generation
        # v5p and TPU7x count TensorCores, two per chip
        assert tpu.chips == (int(count) // 2 if generation in ("v5p", "tpu7x") else int(count)), name
        # and only TPU7x's are two JAX devices (no megacore), so its device count is its name's
        assert tpu.devices == (int(count) if generation == "tpu7x" else tpu.chips), name
        assert math.prod(int(d) for d in tpu.topology.split("x")) == tpu.chips, name


def test_the_schema_states_the_rules():
    """The OpenAPI schema is built from these models: clients see the same rules the service enforces."""
    defs = JobSpec.model_json_schema()["$defs"]
    dataset, grpo = defs["DatasetSpec"]["properties"], defs["GrpoSpec"]["properties"]
    hardware = defs["HardwareSpec"]["properties"]
    assert dataset["subset"]["pattern"] == limits.SUBSET_PATTERN
    assert dataset["train_split"]["pattern"] == limits.SPLIT_PATTERN
    assert dataset["train_files"]["items"]["pattern"] == limits.LOCATION_PATTERN
    top = JobSpec.model_json_schema()["properties"]
    assert top["output"]["pattern"] == limits.LOCATION_PATTERN
    assert top["labels"]["propertyNames"]["pattern"] == DNS_LABEL_PATTERN
    assert top["labels"]["additionalProperties"]["pattern"] == limits.LABEL_VALUE_PATTERN
    assert grpo["batch_size"]["maximum"] == limits.MAX_BATCH_SIZE
    assert hardware["accelerator"]["enum"] == ["cpu", *TPU_SLICES]
    assert hardware["chips_per_vm"]["maximum"] == 8


@pytest.mark.parametrize("example", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_still_validates(example, tmp_path, monkeypatch):
    from trainer.contract.spec.file import load_spec_file

    for var in ("RLJOB_TINY_DIR", "RLJOB_OUTPUT", "RLJOB_SMOLLM2_DIR", "RLJOB_GSM8K_DIR", "RLJOB_ARITH_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    assert set(yaml.safe_load(os.path.expandvars(example.read_text()))) >= {"name", "model", "output"}
    load_spec_file(example)
