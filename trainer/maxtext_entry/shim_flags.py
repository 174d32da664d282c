"""Flags our entry shims take off argv before MaxText parses the rest (MaxText must see its own only)."""

from __future__ import annotations

REGISTER_FLAG = "--rljob_register_hf_config="  # the checkpoint whose config.json MaxText's table should hold
REVISION_FLAG = "--rljob_hf_config_revision="  # its hub revision
SAMPLES_FLAG = "--rljob_samples_uri="  # where train_rl's completion samples go (sample_recorder.py)
EVAL_FLAG = "--rljob_eval_uri="  # where each evaluation's per-row outcomes go (eval_recorder.py)
EVAL_SCORING_FLAG = "--rljob_eval_scoring="  # what a row's outcome is: maxtext | rewards (eval_recorder.py)
# With export.checkpoint=best (best_checkpoint.py): where the best weights, their record and the actor's checkpoints are.
BEST_ROOT_FLAG = "--rljob_best_checkpoints="
BEST_RECORD_FLAG = "--rljob_best_record="
ACTOR_ROOT_FLAG = "--rljob_actor_checkpoints="
# GRPO's objective where train_rl cannot set it (grpo_objective.py): Tunix's kl_loss_mode and epsilon_high.
KL_LOSS_MODE_FLAG = "--rljob_kl_loss_mode="
EPSILON_HIGH_FLAG = "--rljob_epsilon_high="
# The actor's checkpoint root, whose finalized steps are reported on stdout (checkpoint_reporter.py).
CHECKPOINT_EVENTS_FLAG = "--rljob_checkpoint_events="
# The reward sandbox's limits and error policy, as contract.reward_sandbox.RewardSandboxSettings JSON (reward_sandbox.py).
REWARD_SANDBOX_FLAG = "--rljob_reward_sandbox="
# The job's seed, from which each rollout's sampling key is drawn (rollout_keys.py).
ROLLOUT_SEED_FLAG = "--rljob_rollout_seed="


def pop_flags(argv: list[str], *flags: str) -> tuple[dict[str, str], list[str]]:
    """({flag: value} for the given flags, the remaining argv in order)."""
    found: dict[str, str] = {}
    rest = []
    for arg in argv:
        flag = next((f for f in flags if arg.startswith(f)), None)
        if flag is None:
            rest.append(arg)
        else:
            found[flag] = arg[len(flag) :]
    return found, rest
