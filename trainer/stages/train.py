"""Stage 2: GRPO with MaxText's train_rl; the command builder and the arguments it maps from the spec."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from trainer.contract import CheckpointSaved, JobSpec, RunLayout, TrainStep
from trainer.contract.run.checkpoint_line import step_from_line
from trainer.contract.run.evaluation import MAXTEXT_SCORING, REWARDS_SCORING, EvalScoring
from trainer.contract.run.shim_config import BestCheckpointPaths, EvalRecording, GrpoObjective, ShimConfig
from trainer.contract.spec.kl_direction import tunix_kl_loss_mode
from trainer.contract.spec.reward_sandbox import REWARD_FAILED_LINE_PREFIX, RewardFailure, RewardSandboxSettings
from trainer.contract.spec.rl_settings import DEFAULT_SEED, OPTIMIZER_DEFAULTS, OPTIMIZER_KEYS
from trainer.progress.event_reporter import EventReporter
from trainer.progress.tensorboard_scalars import EventFileTailer
from trainer.progress.train_rl_events import EvalLineReader, TrainProgressWatcher, TrainStepAssembler, goodput_from_line
from trainer.runner import StageCommand, StageFailed
from trainer.sizing.hf_model import MaxTextModel
from trainer.sizing.job_shape import model_shape
from trainer.sizing.layer_activations import layer_activation_args
from trainer.sources import materialise_dataset
from trainer.storage import store_for

from .common import hf_config_registration, stage_env, tokenizer_needs_hub, uses_cpu
from .context import JobContext, latest_actor_step, stage_inputs
from .convert import converted_checkpoint, converted_items_uri
from .export import actor_params_uri
from .maxtext_paths import rl_config

TRAIN_RL_MODULE = "maxtext.trainers.post_train.rl.train_rl"  # what both entries run, unmodified
TRAIN_RL_ENTRY = "trainer.maxtext_entry.train_rl_entry"  # vllm rollout (TPU): train_rl as shipped
TRAIN_RL_JAX_ENTRY = "trainer.maxtext_entry.train_rl_jax_entry"  # jax rollout (CPU)
# The spec's KL estimator by Tunix's name for it (tunix/rl/common.py compute_kl_divergence).
KL_LOSS_MODES = {"k1": "kl", "k2": "mse_kl", "k3": "low_var_kl"}


def total_train_steps(spec: JobSpec) -> int:
    """train_rl's `train_steps` (num_batches * num_iterations with train_fraction and num_epoch at 1).

    0.2.5's optimizer stretches its warmup+cosine schedule over exactly this many steps, so the
    schedule follows num_batches as long as learning_rate_schedule_steps is left unset (we never set it).
    """
    return spec.grpo.num_batches * spec.grpo.num_iterations


def _bool(value: bool) -> str:
    return str(value).lower()


def grpo_args(spec: JobSpec, local_rewards: str | None = None) -> list[str]:
    g = spec.grpo
    r = g.rewards
    args = [
        f"num_batches={g.num_batches}",
        f"num_test_batches={g.num_test_batches}",
        f"batch_size={g.batch_size}",
        f"rl.num_generations={g.num_generations}",
        f"rl.num_iterations={g.num_iterations}",
        f"rl.grpo_beta={g.beta}",
        f"rl.grpo_epsilon={g.epsilon}",
        f"rl.loss_algo={g.loss_algo}",
        f"rl.loss_agg_mode={g.loss_agg_mode}",
        f"learning_rate={g.learning_rate}",
        f"warmup_steps_fraction={g.warmup_steps_fraction}",
        f"max_prefill_predict_length={g.max_prefill_predict_length}",
        f"max_target_length={g.max_target_length}",
        f"kv_cache_buffer={g.kv_cache_buffer}",
        f"decode_sampling_temperature={g.temperature}",
        f"decode_sampling_top_k={g.top_k}",
        f"decode_sampling_nucleus_p={g.top_p}",
        f"checkpoint_period={g.checkpoint_period}",
        # rl.yml keeps 10 (1.4 GiB each for a 135M model in fp32): train_rl hands this to Orbax as max_to_keep.
        f"max_num_checkpoints_to_keep={g.keep_last_checkpoints}",
        f"eval_interval={g.eval_interval}",
        f"eval_sampling_strategy={g.eval_sampling_strategy}",
        f"num_eval_passes={g.num_eval_passes}",
        f"reward_exact_answer={r.exact_answer}",
        f"reward_white_space_format_match={r.white_space_format_match}",
        f"reward_exact_format_match={r.exact_format_match}",
        f"reward_partial_format_match={r.partial_format_match}",
        f"penalty_incorrect_format={r.penalty_incorrect_format}",
        f"penalty_incorrect_answer={r.penalty_incorrect_answer}",
    ]
    if r.functions_path:
        args += [f"reward_functions_path={local_rewards or r.functions_path}", f"reward_functions={','.join(r.functions)}"]
    return args


def rl_settings_args(spec: JobSpec, local_processor: str | None = None) -> list[str]:
    """Issue 39's rl.yml settings (trainer/contract/spec/rl_settings.py), each only when set: at its default, rl.yml's value
    stands and the command line is what it was before them."""
    g, d = spec.grpo, spec.dataset
    # rljob's sandbox is the one pool for a job's reward functions (grpo.rewards.timeout_s its one deadline): Tunix's
    # own reward workers stay off whatever rl.yml or a later Tunix defaults to, so the two never wrap each other.
    args = ["reward_num_workers=0"]
    if g.eval_mode != "pass":
        args.append(f"eval_mode={g.eval_mode}")
    if g.eval_batch_size is not None:
        args.append(f"eval_batch_size={g.eval_batch_size}")
    if g.max_seq_token_per_tpu:
        args.append(f"max_seq_token_per_tpu={g.max_seq_token_per_tpu}")
    if d.shuffle_seed is not None:
        args.append(f"data_shuffle_seed={d.shuffle_seed}")
    elif spec.seed is not None:
        args.append(f"data_shuffle_seed={spec.seed}")
    if spec.seed is not None:
        args.append(f"init_weights_seed={spec.seed}")
    if d.processor_path:
        args.append(f"dataset_processor_path={local_processor or d.processor_path}")
    if spec.hardware.reshard_chunk_size is not None:
        args.append(f"rl.reshard_chunk_size={spec.hardware.reshard_chunk_size}")
    for name, key in OPTIMIZER_KEYS.items():
        if (value := getattr(g, name)) != OPTIMIZER_DEFAULTS[name]:
            args.append(f"{key}={value}")
    return args


def dataset_args(spec: JobSpec, local_data: tuple[str, str | None] | None, local_template: str | None = None) -> list[str]:
    """Hub dataset by name, or the run's materialised parquet files (train, eval); the prompt template."""
    d = spec.dataset
    args = [f"dataset_name={d.name}", f"eval_dataset_name={d.name}", f"hf_subset={d.subset}"]
    if d.prompt_template:
        args.append(f"data_template_path={local_template or d.prompt_template}")
    if local_data is None:
        return args + [f"train_split={d.train_split}", f"eval_split={d.eval_split}"]
    train_file, eval_file = local_data
    args.append(f"hf_train_files={train_file}")
    if eval_file:
        args.append(f"hf_eval_files={eval_file}")
    return args


def hardware_args(spec: JobSpec) -> list[str]:
    h = spec.hardware
    args = [
        f"chips_per_vm={h.chips_per_vm}",
        f"rollout_data_parallelism={h.rollout_data_parallelism}",
        f"rollout_tensor_parallelism={h.rollout_tensor_parallelism}",
    ]
    if uses_cpu(spec):
        # rl.yml targets Pathways on TPU; a CPU host has neither Pathways nor a JAX cluster.
        args += ["hardware=cpu", "use_pathways=false", "skip_jax_distributed_system=true"]
    return args


def objective(spec: JobSpec) -> GrpoObjective:
    """What train_rl cannot pass Tunix, for the entry to install (grpo_objective.py)."""
    g = spec.grpo
    return GrpoObjective(kl_loss_mode=tunix_kl_loss_mode(KL_LOSS_MODES[g.kl_estimator], g.kl_direction), epsilon_high=g.epsilon_high)


def rollout_seed(spec: JobSpec) -> int | None:
    """The seed of each rollout's sampling key (trainer/rollout/rollout_keys.py). The jax engine only: the vllm rollout
    draws from vLLM's own generator, which train_rl gives no seed."""
    if spec.hardware.rollout_engine != "jax":
        return None
    return DEFAULT_SEED if spec.seed is None else spec.seed


def eval_scoring(spec: JobSpec) -> EvalScoring:
    """A job with its own reward functions is evaluated by them; MaxText's score needs its GSM8K answer tags, which
    such a job's rewards need not ask for (trainer/contract/run/evaluation.py)."""
    return REWARDS_SCORING if spec.grpo.rewards.functions_path else MAXTEXT_SCORING


def reward_sandbox_settings(spec: JobSpec) -> RewardSandboxSettings | None:
    """The sandbox the job's own reward functions run in (maxtext_entry/reward_sandbox.py); none for MaxText's built-ins."""
    r = spec.grpo.rewards
    if not r.functions_path:
        return None
    return RewardSandboxSettings(timeout_s=r.timeout_s, memory_mib=r.memory_mib, on_error=r.on_error)


def best_checkpoint_paths(spec: JobSpec, layout: RunLayout) -> BestCheckpointPaths | None:
    if spec.export.checkpoint != "best":
        return None
    return BestCheckpointPaths(
        best_root=layout.best_checkpoints, record_uri=layout.best_checkpoint_record, actor_root=layout.actor_checkpoints
    )


def train_shim_config(spec: JobSpec, layout: RunLayout, model: MaxTextModel, local_source: str | None = None) -> ShimConfig:
    """Everything the train entry installs for this job (trainer/maxtext_entry/train_rl_entry.py's INSTALLS)."""
    return ShimConfig(
        hf_config=hf_config_registration(spec, model, local_source),
        samples_uri=layout.samples_dir,
        evaluations=EvalRecording(uri=layout.eval_dir, scoring=eval_scoring(spec)),
        best_checkpoint=best_checkpoint_paths(spec, layout),
        objective=objective(spec),
        checkpoint_events_root=layout.actor_checkpoints,
        reward_sandbox=reward_sandbox_settings(spec),
        rollout_seed=rollout_seed(spec),
    )


def build_train_command(
    spec: JobSpec,
    layout: RunLayout,
    model: MaxTextModel,
    *,
    local_data: tuple[str, str | None] | None = None,
    local_tokenizer: str | None = None,
    local_source: str | None = None,
    local_rewards: str | None = None,
    local_template: str | None = None,
    local_processor: str | None = None,
    load_parameters_path: str | None = None,
) -> StageCommand:
    module = TRAIN_RL_JAX_ENTRY if spec.hardware.rollout_engine == "jax" else TRAIN_RL_ENTRY
    args = [
        train_shim_config(spec, layout, model, local_source).as_argument(),
        rl_config(),
        f"model_name={model.name}",
        f"tokenizer_path={local_tokenizer or spec.model.tokenizer_location}",
        f"load_parameters_path={load_parameters_path or converted_items_uri(layout)}",
        f"run_name={layout.job_id}",
        f"base_output_directory={layout.rl_base}",
        *hardware_args(spec),
        # rl.yml's offload of each layer's input and q/k/v, or HBM where the fit estimate leaves room (issue 67 §1)
        *layer_activation_args(spec, model.shape or model_shape(model.name, None, None)),
        *grpo_args(spec, local_rewards),
        *dataset_args(spec, local_data, local_template),
        *rl_settings_args(spec, local_processor),
        f"weight_dtype={spec.model.dtype}",
        f"dtype={spec.model.resolved_compute_dtype(spec.hardware.accelerator)}",  # else base.yml's bfloat16
        f"logits_dot_in_fp32={_bool(spec.model.logits_dtype == 'float32')}",  # the rollout engine reads it too
        f"scan_layers={_bool(spec.model.scan_layers)}",
        *model.args(),
        # Tunix flushes TensorBoard scalars on this period; progress events are read from them.
        "log_period=1",
    ]
    needs_hub = tokenizer_needs_hub(spec, local_tokenizer) or local_data is None
    return StageCommand(module=module, args=tuple(args), env=stage_env(spec, needs_hub=needs_hub), graceful_stop=True)


def report_train_line(
    line: str, reporter: EventReporter, layout: RunLayout, eval_lines: EvalLineReader, reward_failures: list[RewardFailure] | None = None
) -> None:
    """The event a line of train_rl's output reports (an evaluation, the time split, a finished checkpoint); a reward
    call that failed under on_error: fail is kept in `reward_failures` for the stage's message."""
    if reward_failures is not None and (start := line.find(REWARD_FAILED_LINE_PREFIX)) >= 0:
        try:
            reward_failures.append(RewardFailure.model_validate_json(line[start + len(REWARD_FAILED_LINE_PREFIX) :]))
        except ValueError:
            pass  # a cut line: train_rl's own exit still fails the stage
        return
    fields = eval_lines.fields(line)
    if fields:
        reporter.eval_result(**fields)
    elif (goodput := goodput_from_line(line)) is not None:
        reporter.goodput(goodput)
    elif (step := step_from_line(line)) is not None:
        # The URI is derived here, not read from the line: it is where this run's actor checkpoints are.
        reporter.emit(CheckpointSaved, step=step, params=actor_params_uri(layout, step))


def run_train(ctx: JobContext, *, poll_interval_s: float = 2.0) -> dict[str, Any]:
    spec, layout, reporter = ctx.spec, ctx.layout, ctx.reporter
    inputs = stage_inputs(ctx)
    local_data = materialise_dataset(spec, ctx.work_dir / "data")
    command = build_train_command(
        spec,
        layout,
        ctx.model,
        local_data=local_data,
        local_tokenizer=inputs["local_tokenizer"],
        local_source=inputs["local_source"],
        local_rewards=inputs["local_rewards"],
        local_template=inputs["local_template"],
        local_processor=inputs["local_processor"],
        load_parameters_path=converted_checkpoint(layout),
    )
    total = total_train_steps(spec)
    start_step = latest_actor_step(layout) or 0
    reported = {e.step for e in reporter.previous_events if isinstance(e, TrainStep)}
    assembler = TrainStepAssembler(total_steps=total, already_reported=reported)
    tensorboard_uri = layout.tensorboard_dir
    watcher = TrainProgressWatcher(
        EventFileTailer(store_for(tensorboard_uri), tensorboard_uri), reporter, assembler, poll_interval_s=poll_interval_s
    )

    eval_lines = EvalLineReader(start_step=start_step, total_steps=total)
    log = ctx.work_dir / "logs" / "train.log"
    watcher.start()
    reward_failures: list[RewardFailure] = []
    try:
        ctx.run_command(command, log, on_line=lambda line: report_train_line(line, reporter, layout, eval_lines, reward_failures))
    except StageFailed as e:
        if reward_failures:  # on_error: fail: say which function failed and how, not only train_rl's exit status
            raise StageFailed(e.module, e.returncode, e.log_path, e.tail, message=reward_failures[0].message()) from e
        raise
    finally:
        metrics_warning = _final_metrics_read(watcher, log)
    if reward_failures:  # train_rl ended, but most reward calls failed (the sandbox's last line): not a trained model
        raise StageFailed(command.module, 0, log, "", message=reward_failures[-1].message())
    final = latest_actor_step(layout)
    if final is None:
        raise StageFailed(command.module, 0, log, "no actor checkpoint was written")
    outputs = {"actor_step": final, "resumed_from_step": start_step, "checkpoint": f"{layout.actor_checkpoints}/{final}"}
    if metrics_warning:
        outputs["warning"] = metrics_warning
    return outputs


def _final_metrics_read(watcher: TrainProgressWatcher, log: Path) -> str | None:
    """Stop the TensorBoard watcher (its last read) without letting that read decide the stage.

    Training has ended by now and its outcome is train_rl's exit and the checkpoint, not the metrics:
    a storage error here would otherwise turn a finished stage into exit 77, or, raised in a `finally`,
    replace the real failure of train_rl. It becomes a warning in the log and the stage's outputs.
    """
    try:
        watcher.stop()
    except Exception as e:  # noqa: BLE001 - any failure to read metrics; the stage keeps its own result
        warning = (
            f"the final read of training metrics failed ({type(e).__name__}: {e}); progress may miss the "
            f"last steps, the checkpoint is unaffected"
        )
        print(f"rljob: warning: {warning}", file=sys.stderr)
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"rljob: warning: {warning}\n")
        except OSError:
            pass  # stderr has it
        return warning
    return None
