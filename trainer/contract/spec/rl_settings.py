"""MaxText 0.2.5 rl.yml settings the spec types beyond the GRPO objective (issue 39), and why the rest are left out.

Typed (each reaches train_rl as the rl.yml key named; trainer/stages/train.py rl_settings_args):
- grpo.eval_mode -> eval_mode: how evaluate_rl.score_responses scores a row's k = grpo.num_eval_passes completions:
  `pass` (pass@k: any of them correct), `maj` (maj@k: the most frequent extracted answer), `pass_at_1` (the
  fraction correct, an estimate of pass@1). maj and pass_at_1 need k >= 2 samples that can differ, so they are
  refused with num_eval_passes 1 or the greedy eval_sampling_strategy (its top_k 1 makes every pass the same).
- grpo.eval_batch_size -> eval_batch_size: prompts per evaluation batch (null: batch_size, rl.yml's -1); train_rl
  evaluates num_test_batches of them.
- grpo.max_seq_token_per_tpu -> max_seq_token_per_tpu: Tunix's sequence packing for the train passes. Typed, and
  every value but 0 refused for now: Tunix 0.1.7's pack_sequences (tunix/rl/utils.py) packs the rollouts into rows
  across batch boundaries and trains one row per step, so train steps stop following num_batches (train_rl still
  stops at num_batches * num_iterations steps) and a step's rewards are not its own. Measured on the tiny CPU job
  (2 batches, rows of 384 tokens): the run logged rewards for one step, and rljob's train_step events had none.
  Also below max_target_length (MaxText's own check in types.py) it is refused.
- grpo.gradient_clipping_threshold, grpo.adam_b1, grpo.adam_b2, grpo.weight_decay -> gradient_clipping_threshold,
  adam_b1, adam_b2 (rl.yml) and adam_weight_decay (base.yml): utils_rl.get_optimizer's clip_by_global_norm and adamw.
  Their defaults are the values train_rl runs with (tests/trainer/contract/spec/test_rl_settings.py reads them from MaxText's loader).
- seed (the job's) -> data_shuffle_seed and init_weights_seed when set, and always the seed of each rollout's sampling
  key (trainer/rollout/rollout_keys.py, through the shim configuration's rollout_seed).
- dataset.shuffle_seed -> data_shuffle_seed (over the job's seed): grain's shuffle of the train and eval rows and HF's train/test split
  (null: rl.yml's 42; repro.json's seeds.data_shuffle reports whichever ran). Grain takes 0 to 2**32-1.
- dataset.processor_path -> dataset_processor_path: the user's `process_data` (trainer/stages/train.py stages a gs://
  file; a team's location policy and the pod's mounts check it as every other input).
- hardware.reshard_chunk_size -> rl.reshard_chunk_size: the trainer-to-rollout weight sync reshards this many weight
  arrays at a time (Tunix RolloutConfig.rollout_vllm_reshard_chunk_size); vllm only, refused with the jax rollout,
  which syncs its weights in one piece (jax_rollout.update_params) and never reads it.

Left out, by reason (docs/trainer.md lists them):
- reward_num_workers, reward_worker_timeout_seconds: Tunix's reward worker pool. The pinned Tunix 0.1.7's
  GRPOConfig has neither, so train_rl drops both (its _kwargs_supported_by); and a job's own reward functions run
  in rljob's sandbox (trainer/rewards_sandbox/), whose one deadline is grpo.rewards.timeout_s. A second pool and
  timeout would fight it (Tunix's falls back to the trainer process), so the train stage pins reward_num_workers=0
  and types neither; tests/trainer/contract/spec/test_rl_settings.py fails when the Tunix pin gains them.
- gc_collect_after_weight_sync, free_kv_cache_during_weight_sync: the other weight-sync knobs; Tunix 0.1.7's
  ClusterConfig and RolloutConfig do not have them, so train_rl ignores them (with a log line); same test.
"""

from __future__ import annotations

from typing import Literal

from trainer.contract.spec import values as limits

EvalMode = Literal["pass", "maj", "pass_at_1"]
MAX_SHUFFLE_SEED = 2**32 - 1  # grain's MapDataset.shuffle refuses a seed outside [0, 2**32)
MAX_RESHARD_CHUNK_SIZE = 1_000_000  # weight arrays; a 405B Llama unscanned has about 1300

# At these defaults the fields are left out of the spec's hash (JobSpec.canonical_json): specs written before them
# keep their hash, their idempotency key and their conversion cache.
OPTIMIZER_DEFAULTS: dict[str, float] = {"gradient_clipping_threshold": 0.1, "adam_b1": 0.9, "adam_b2": 0.99, "weight_decay": 0.1}
# The spec's name -> MaxText's key.
OPTIMIZER_KEYS = {"gradient_clipping_threshold": "gradient_clipping_threshold", "adam_b1": "adam_b1", "adam_b2": "adam_b2"}
OPTIMIZER_KEYS["weight_decay"] = "adam_weight_decay"
MAX_GRADIENT_CLIPPING = 1e6  # global-norm clip; rl.yml's 0.1, MaxText's pretraining 1.0

EVAL_MODE_DESCRIPTION = (
    "how an evaluation scores a row's k = num_eval_passes completions (MaxText's eval_mode): pass (pass@k: any correct), "
    "maj (maj@k: the most frequent answer), pass_at_1 (the fraction correct, estimating pass@1); maj and pass_at_1 need "
    "num_eval_passes >= 2 and a sampling strategy other than greedy. A job with its own reward functions scores rows "
    "by reward; this mode then shapes only maxtext_correct"
)
EVAL_BATCH_DESCRIPTION = (
    "prompts per evaluation batch (MaxText's eval_batch_size): an evaluation covers num_test_batches of them; null: batch_size"
)
PACKING_DESCRIPTION = (
    "sequence packing for the train passes (MaxText's max_seq_token_per_tpu); only 0 (no packing) for now: Tunix 0.1.7 "
    "packs across batches and trains one packed row per step, so steps and their rewards stop matching batches"
)
PACKING_REFUSED = (
    "sequence packing is not supported yet: Tunix 0.1.7 packs rollouts into rows across batch boundaries and trains one "
    "row per step, so train steps no longer follow num_batches and a step's rewards are not its own; leave it 0"
)
OPTIMIZER_DESCRIPTIONS = {
    "gradient_clipping_threshold": "global gradient norm clipped to before each update (MaxText's gradient_clipping_threshold; "
    "rl.yml's 0.1 keeps the KL in check); 0: no clipping",
    "adam_b1": "AdamW's first-moment decay (MaxText's adam_b1)",
    "adam_b2": "AdamW's second-moment decay (MaxText's adam_b2; rl.yml's 0.99, pretraining's 0.95)",
    "weight_decay": "AdamW's decoupled weight decay (MaxText's adam_weight_decay, base.yml's 0.1; it pulls the weights "
    "toward 0, not toward the reference)",
}
DEFAULT_SEED = 42  # rl.yml's data_shuffle_seed: a job without a seed keeps the rows' order it always had
SEED_DESCRIPTION = (
    "the job's seed: each rollout's sampling key (drawn from it, the global step and the call), the rows' order "
    "(MaxText's data_shuffle_seed, unless dataset.shuffle_seed sets it) and a random initialisation's weights "
    "(init_weights_seed); repro.json records each; null: 42 for the keys and the rows' order (rl.yml's "
    "data_shuffle_seed), base.yml's 0 for init_weights_seed"
)
SHUFFLE_SEED_DESCRIPTION = (
    "seed of the train and eval rows' shuffle and of a hub dataset's train/test split (MaxText's data_shuffle_seed); null: the job's seed"
)
PROCESSOR_DESCRIPTION = (
    "Python file with process_data(dataset_name, model_tokenizer, template_config, tmvp_config, x) -> {prompts, question, "
    "answer}, replacing MaxText's GSM8K row processing (MaxText's dataset_processor_path); it runs inside train_rl in the "
    "job's pod (not the reward sandbox), on rows with question and answer (from train_files: only those two, as strings)"
)
RESHARD_DESCRIPTION = (
    "weight sync from the trainer to the vllm rollout: weight arrays resharded at a time, bounding the sync's peak "
    "memory (MaxText's rl.reshard_chunk_size); null: all at once. vllm only: the jax rollout syncs in one piece"
)


def eval_mode_problem(mode: str, num_eval_passes: int | None, strategy: str | None) -> str | None:
    if mode == "pass":
        return None
    if num_eval_passes is not None and num_eval_passes < 2:
        return f"eval_mode {mode} compares several completions of a row: set num_eval_passes >= 2 (is {num_eval_passes})"
    if strategy == "greedy":
        return (
            f"eval_mode {mode} with eval_sampling_strategy greedy scores k copies of one completion (greedy samples "
            "with top_k 1): use standard or liberal"
        )
    return None


def eval_batch_problem(eval_batch_size: int | None, max_target_length: int | None) -> str | None:
    if eval_batch_size is None or max_target_length is None:
        return None
    tokens = eval_batch_size * max_target_length
    if tokens > limits.INT32_MAX:
        return (
            f"eval_batch_size * max_target_length = {tokens} rollout tokens per evaluation batch; MaxText indexes them "
            f"with 32-bit integers (at most {limits.INT32_MAX})"
        )
    return None


def packing_problem(max_seq_token_per_tpu: int, max_target_length: int | None) -> str | None:
    if max_target_length is not None and 0 < max_seq_token_per_tpu < max_target_length:
        return (
            f"a packed row must hold a whole sequence: max_seq_token_per_tpu ({max_seq_token_per_tpu}) is below "
            f"max_target_length ({max_target_length}); and {PACKING_REFUSED}"
        )
    return PACKING_REFUSED if max_seq_token_per_tpu else None
