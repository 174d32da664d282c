"""Command builders and the subprocess seam: pure argument mapping, secret handling, log streaming."""

from __future__ import annotations

import sys

import pytest

from trainer.contract import JobSpec, RunLayout
from trainer.contract.run.shim_config import EvalRecording, GrpoObjective, HfConfigRegistration, ShimConfig, pop_shim_config
from trainer.contract.spec.reward_sandbox import RewardSandboxSettings
from trainer.runner import REDACTED, StageCommand, StageFailed, redact, run_stage_command, start_stage_command
from trainer.sizing.hf_model import MaxTextModel
from trainer.sources import resolve_model
from trainer.stages.convert import build_convert_command
from trainer.stages.export import build_export_command
from trainer.stages.train import build_train_command, total_train_steps

TABLE_8B = MaxTextModel(name="llama3.1-8b")  # a hub model MaxText's table describes as it is


def _spec(tiny_spec_dict, **grpo) -> JobSpec:
    data = dict(tiny_spec_dict)
    data["grpo"] = {**data["grpo"], **grpo}
    return JobSpec.model_validate(data)


def _args(command: StageCommand) -> dict[str, str]:
    return dict(a.split("=", 1) for a in command.args if "=" in a and not a.startswith("--"))


def test_every_grpo_field_reaches_train_rl(tiny_spec_dict):
    spec = _spec(
        tiny_spec_dict,
        beta=0.03,
        epsilon=0.3,
        loss_algo="gspo-token",
        temperature=0.7,
        top_k=20,
        top_p=0.9,
        num_iterations=2,
        warmup_steps_fraction=0.2,
        num_eval_passes=3,
        eval_sampling_strategy="standard",
        kl_estimator="k2",
        epsilon_high=0.35,
        loss_agg_mode="token-mean",
    )
    command = build_train_command(spec, RunLayout("/out", "rl-x"), resolve_model(spec))
    args = _args(command)
    # What train_rl cannot pass Tunix goes to our entry (trainer/maxtext_entry/grpo_objective.py), not to MaxText.
    assert pop_shim_config(list(command.args))[0].objective == GrpoObjective(kl_loss_mode="mse_kl", epsilon_high=0.35)
    assert args["rl.loss_agg_mode"] == "token-mean"
    assert args["rl.grpo_beta"] == "0.03" and args["rl.grpo_epsilon"] == "0.3"
    assert args["rl.loss_algo"] == "gspo-token" and args["rl.num_iterations"] == "2"
    assert args["decode_sampling_temperature"] == "0.7" and args["decode_sampling_top_k"] == "20"
    assert args["decode_sampling_nucleus_p"] == "0.9" and args["warmup_steps_fraction"] == "0.2"
    assert args["num_eval_passes"] == "3" and args["eval_sampling_strategy"] == "standard"
    assert args["reward_functions"] == "completion_length_reward"
    assert args["checkpoint_period"] == "1" and args["kv_cache_buffer"] == "8"
    assert total_train_steps(spec) == 6


def test_retention_reaches_orbax_through_maxtexts_own_option(tiny_spec_dict):
    """rl.yml keeps 10 checkpoints; the spec's count replaces it (train_rl: Orbax's max_to_keep)."""
    layout = RunLayout("/out", "rl-x")
    default = _args(build_train_command(_spec(tiny_spec_dict), layout, TABLE_8B))
    assert default["max_num_checkpoints_to_keep"] == "1"
    kept = _args(build_train_command(_spec(tiny_spec_dict, keep_last_checkpoints=3), layout, TABLE_8B))
    assert kept["max_num_checkpoints_to_keep"] == "3"


@pytest.mark.parametrize(
    "accelerator, dtype, compute, expected",
    [
        ("cpu", "float32", None, "float32"),  # a CPU has no bf16 arithmetic: compute follows the weights
        ("cpu", "bfloat16", None, "bfloat16"),
        ("v6e-8", "float32", None, "bfloat16"),  # MaxText's TPU default: fp32 weights, bf16 compute
        ("v6e-8", "bfloat16", None, "bfloat16"),
        ("v6e-8", "float32", "float32", "float32"),
        ("cpu", "float32", "bfloat16", "bfloat16"),
    ],
)
def test_the_spec_dtype_sets_weights_and_compute(tiny_spec_dict, accelerator, dtype, compute, expected):
    data = {**tiny_spec_dict, "model": {**tiny_spec_dict["model"], "dtype": dtype, "compute_dtype": compute}}
    if accelerator != "cpu":
        data["hardware"] = {"accelerator": accelerator, "rollout_engine": "vllm"}
    args = _args(build_train_command(JobSpec.model_validate(data), RunLayout("/out", "rl-x"), TABLE_8B))
    assert (args["weight_dtype"], args["dtype"]) == (dtype, expected)


def test_file_dataset_goes_as_parquet_and_hub_dataset_by_name(tiny_spec_dict):
    spec = _spec(tiny_spec_dict)
    files = _args(
        build_train_command(spec, RunLayout("/out", "rl-x"), resolve_model(spec), local_data=("/w/train.parquet", "/w/eval.parquet"))
    )
    assert files["hf_train_files"] == "/w/train.parquet" and files["hf_eval_files"] == "/w/eval.parquet"
    hub = JobSpec.model_validate({**tiny_spec_dict, "dataset": {"name": "openai/gsm8k"}})
    args = _args(build_train_command(hub, RunLayout("/out", "rl-x"), TABLE_8B))
    assert "hf_train_files" not in args and args["dataset_name"] == "openai/gsm8k" and args["train_split"] == "train"
    assert "HF_HUB_OFFLINE" not in build_train_command(hub, RunLayout("/out", "rl-x"), TABLE_8B).env


def test_vllm_engine_runs_train_rl_unmodified_with_only_the_recorders_and_the_objective(tiny_spec_dict):
    data = {**tiny_spec_dict, "hardware": {"accelerator": "v6e-8", "rollout_engine": "vllm"}}
    command = build_train_command(JobSpec.model_validate(data), RunLayout("/out", "rl-x"), TABLE_8B)
    assert command.module == "trainer.maxtext_entry.train_rl_entry"  # no JAX rollout swapped in
    (shim_argument,) = [a for a in command.args if a.startswith("--rljob_")]  # one argument: the shim configuration
    assert shim_argument == command.args[0]
    assert pop_shim_config([shim_argument])[0] == ShimConfig(
        samples_uri="/out/rl-x/samples",
        evaluations=EvalRecording(uri="/out/rl-x/eval", scoring="rewards"),
        objective=GrpoObjective(kl_loss_mode="low_var_kl"),
        reward_sandbox=RewardSandboxSettings(timeout_s=30.0, memory_mib=2048, on_error="zero"),  # the job has its own rewards
        checkpoint_events_root="/out/rl-x/rl/rl-x/checkpoints/actor",
    )


def test_convert_and_export_use_the_derived_settings_and_paths(tiny_spec_dict):
    spec = _spec(tiny_spec_dict)
    layout = RunLayout("/out", "rl-x")
    model = resolve_model(spec)
    convert = build_convert_command(spec, layout, model)
    assert convert.module == "trainer.maxtext_entry.to_maxtext_entry"
    assert pop_shim_config([convert.args[0]])[0] == ShimConfig(hf_config=HfConfigRegistration(source=spec.model.source))
    assert {"base_emb_dim": "64", "rope_use_scale": "true", "vocab_size": "128256"}.items() <= _args(convert).items()
    export = build_export_command(spec, layout, model, actor_step=7)
    assert export.module == "trainer.maxtext_entry.to_huggingface_entry"  # the exported config.json is the tiny one
    assert _args(export)["load_parameters_path"] == "/out/rl-x/rl/rl-x/checkpoints/actor/7/model_params"
    assert build_convert_command(spec, layout, TABLE_8B).module == "maxtext.checkpoint_conversion.to_maxtext"


def test_redact_hides_secret_values_and_token_args():
    assert redact("token=abc123 and abc123", ["abc123"]) == f"token={REDACTED} and {REDACTED}"
    assert redact("x hf_access_token=zzz y=1", []) == f"x hf_access_token={REDACTED} y=1"


def test_runner_passes_secrets_by_env_only_and_redacts_the_log(tmp_path):
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "echo_token.py").write_text("import os, sys\nprint('argv', sys.argv[1:])\nprint('token is', os.environ['HF_TOKEN'])\n")
    command = StageCommand(module="echo_token", args=("a=1",), env={"PYTHONPATH": str(module_dir)})
    log = tmp_path / "logs" / "stage.log"
    seen = []
    run_stage_command(command, log, base_env={"HF_TOKEN": "hf_SECRET42", "PATH": "/usr/bin:/bin"}, on_line=seen.append)
    text = log.read_text()
    assert "hf_SECRET42" not in text and f"token is {REDACTED}" in text
    assert "argv ['a=1']" in text and f"token is {REDACTED}" in seen


def test_runner_raises_with_the_exit_code_and_output_tail(tmp_path):
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "fail_now.py").write_text("import sys\nprint('boom: ConnectionError')\nsys.exit(3)\n")
    command = StageCommand(module="fail_now", args=(), env={"PYTHONPATH": str(module_dir)})
    with pytest.raises(StageFailed) as info:
        run_stage_command(command, tmp_path / "x.log", python=sys.executable)
    assert info.value.returncode == 3 and "ConnectionError" in info.value.tail


def test_a_failing_progress_callback_does_not_stop_the_stage(tmp_path):
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "two_lines.py").write_text("print('first')\nprint('second')\n")
    command = StageCommand(module="two_lines", args=(), env={"PYTHONPATH": str(module_dir)})
    seen = []

    def on_line(line: str) -> None:
        seen.append(line)
        if line == "first":
            raise OSError("transient: rewriting gs://bucket/run/events.jsonl failed")

    run_stage_command(command, tmp_path / "x.log", on_line=on_line)  # no StageFailed, no storage error
    assert seen == ["first", "second"]
    assert "reading progress from this line failed, the stage goes on" in (tmp_path / "x.log").read_text()


def test_leaving_the_read_loop_early_stops_the_stage(tmp_path):
    import os
    import time

    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "linger.py").write_text(
        f"import os, time\nopen({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\nprint('hi', flush=True)\ntime.sleep(120)\n"
    )
    command = StageCommand(module="linger", args=(), env={"PYTHONPATH": str(module_dir)})

    def on_line(line: str) -> None:
        raise KeyboardInterrupt  # not an Exception: it leaves the loop

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_stage_command(command, tmp_path / "x.log", on_line=on_line)
    assert time.monotonic() - started < 60
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped, not a zombie left running
        os.kill(pid, 0)


def test_a_started_stage_waits_for_its_go_line_and_its_output_follows_the_header(tmp_path):
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "await_go.py").write_text("import sys\nprint('ready', flush=True)\nprint('got', sys.stdin.readline().strip())\n")
    started = start_stage_command(StageCommand("await_go", (), {"PYTHONPATH": str(module_dir)}), with_stdin=True)
    log = tmp_path / "x.log"
    started.follow(log, stdin_line="go")
    lines = log.read_text().splitlines()
    assert lines[0].endswith("python -m await_go") and lines[1:] == ["ready", "got go"]
    assert started.proc.returncode == 0


def test_cancel_kills_a_started_stage_that_is_never_followed(tmp_path):
    import psutil

    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "await_go.py").write_text("import sys\nsys.stdin.readline()\n")
    started = start_stage_command(StageCommand("await_go", (), {"PYTHONPATH": str(module_dir)}), with_stdin=True)
    assert psutil.Process(started.proc.pid).status() != psutil.STATUS_ZOMBIE  # waiting on its stdin
    started.cancel()
    assert started.proc.returncode == -9 and not psutil.pid_exists(started.proc.pid)
    started.cancel()  # again, as run_export's `finally` does after a check that ran: nothing left to kill


def test_the_jobs_seed_reaches_rows_weights_and_the_rollout_keys(tiny_spec_dict):
    def command(**top):  # type: ignore[no-untyped-def]
        spec = JobSpec.model_validate({**tiny_spec_dict, **top})
        return build_train_command(spec, RunLayout("/out", "rl-x"), resolve_model(spec))

    default = command()
    # No seed: rl.yml's data_shuffle_seed and base.yml's init_weights_seed stand; the keys draw from 42.
    assert pop_shim_config(list(default.args))[0].rollout_seed == 42
    assert not {"data_shuffle_seed", "init_weights_seed"} & set(_args(default))
    seeded = command(seed=7)
    assert pop_shim_config(list(seeded.args))[0].rollout_seed == 7
    assert _args(seeded)["data_shuffle_seed"] == "7" and _args(seeded)["init_weights_seed"] == "7"
    ordered = command(seed=7, dataset={**tiny_spec_dict["dataset"], "shuffle_seed": 3})
    assert _args(ordered)["data_shuffle_seed"] == "3"
