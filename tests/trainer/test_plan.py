"""`plan` prints each stage's exact MaxText command, with the tutorial's flags and never a secret."""

from __future__ import annotations

import json
import shlex

from tests.trainer.conftest import TUTORIAL_EXAMPLE
from trainer.cli import main
from trainer.contract.run.shim_config import EvalRecording, GrpoObjective, ShimConfig, pop_shim_config

TOKEN = "hf_plan_test_SECRET_value_123"


def _plan(capsys, monkeypatch, spec=TUTORIAL_EXAMPLE) -> dict:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert main(["plan", "--spec", str(spec), "--job-id", "rl-tutorial0001", "--json"]) == 0
    out = capsys.readouterr().out
    assert TOKEN not in out
    return json.loads(out)


def test_tutorial_plan_has_the_tutorials_flags_for_all_three_stages(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    plan = _plan(capsys, monkeypatch)
    run = "gs://your-bucket/rljob/rl-tutorial0001"
    commands = {}
    for item in plan["stages"]:
        commands.setdefault(item["stage"], item["command"])
    convert, train, export = commands["convert"], commands["train"], commands["export"]

    assert "python -m maxtext.checkpoint_conversion.to_maxtext " in convert
    assert convert.split()[3].endswith("configs/base.yml")
    for flag in (
        "model_name=llama3.1-8b",
        f"base_output_directory={run}/maxtext",
        "scan_layers=true",
        "use_multimodal=false",
        "hardware=cpu",
        "skip_jax_distributed_system=true",
        "checkpoint_storage_use_ocdbt=false",
        "checkpoint_storage_use_zarr3=false",
        "--lazy_load_tensors=false",
        "--hf_model_path=meta-llama/Llama-3.1-8B-Instruct",
    ):
        assert flag in convert.split(), flag

    # train_rl runs unmodified under the shim that keeps completion samples and eval rows, gives Tunix the spec's KL
    # estimator and reports each finalized actor checkpoint (eval jobs attached to a job start on it), all from one
    # shim configuration, its first argument (maxtext_entry/train_rl_entry.py).
    argv = shlex.split(train)
    assert argv[:4] == ["python", "-m", "trainer.maxtext_entry.train_rl_entry", argv[3]]
    shim, rest = pop_shim_config(argv[3:])
    assert shim == ShimConfig(
        samples_uri=f"{run}/samples",
        evaluations=EvalRecording(uri=f"{run}/eval", scoring="maxtext"),
        objective=GrpoObjective(kl_loss_mode="low_var_kl"),
        checkpoint_events_root=f"{run}/rl/rl-tutorial0001/checkpoints/actor",
    )  # no reward sandbox (MaxText's own rewards), no rollout seed (the vllm engine), no best checkpoint
    assert rest[0].endswith("configs/post_train/rl.yml")  # the first positional argument after the shim's
    for flag in (
        "model_name=llama3.1-8b",
        "tokenizer_path=meta-llama/Llama-3.1-8B-Instruct",
        f"load_parameters_path={run}/maxtext/0/items",
        "run_name=rl-tutorial0001",
        f"base_output_directory={run}/rl",
        "num_batches=50",
        "num_test_batches=10",
        "batch_size=1",
        "chips_per_vm=8",
        "rollout_data_parallelism=1",
        "rollout_tensor_parallelism=-1",
        "rl.num_generations=2",
        "dataset_name=openai/gsm8k",
    ):
        assert flag in train.split(), flag
    # The schedule must follow num_batches: setting learning_rate_schedule_steps would decouple it.
    assert "learning_rate_schedule_steps" not in train
    assert "hardware=cpu" not in train.split() and "use_pathways=false" not in train.split()

    assert "python -m maxtext.checkpoint_conversion.to_huggingface " in export
    for flag in (
        "model_name=llama3.1-8b",
        f"load_parameters_path={run}/rl/rl-tutorial0001/checkpoints/actor/50/model_params",
        f"base_output_directory={run}/hf",
        "scan_layers=true",
        "use_multimodal=false",
        "skip_jax_distributed_system=true",
        "weight_dtype=bfloat16",
    ):
        assert flag in export.split(), flag

    all_text = json.dumps(plan)
    assert "hf_access_token" not in all_text  # MaxText reads HF_TOKEN from the environment itself
    assert list(tmp_path.iterdir()) == []  # plan writes nothing


def test_tiny_plan_uses_the_jax_engine_and_registers_the_tiny_config(capsys, monkeypatch, tmp_path, tiny_spec_dict):
    from tests.trainer.conftest import TINY_EXAMPLE

    plan = _plan(capsys, monkeypatch, TINY_EXAMPLE)
    train = next(i["command"] for i in plan["stages"] if i["stage"] == "train")
    argv = shlex.split(train)
    module_at = argv.index("-m") + 1  # after the stage's environment
    assert argv[module_at] == "trainer.maxtext_entry.train_rl_jax_entry"
    shim, _ = pop_shim_config(argv[module_at + 1 :])
    assert shim.hf_config is not None and shim.hf_config.source.endswith("model") and shim.rollout_seed == 42, shim
    # No dims in the spec: the tiny checkpoint's config.json gives them.
    for flag in (
        "hardware=cpu",
        "use_pathways=false",
        "override_model_config=true",
        "base_emb_dim=64",
        "head_dim=16",
        "rope_use_scale=true",
        "logits_via_embedding=false",
        "vocab_size=128256",
    ):
        assert flag in train.split(), flag
    assert "HF_HUB_OFFLINE=1" in train  # local sources: nothing may reach a hub
    assert not (tmp_path / "runs").exists()
