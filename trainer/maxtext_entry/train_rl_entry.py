"""`python -m trainer.maxtext_entry.train_rl_entry [--rljob_...] <train_rl args>`: MaxText's train_rl,
unmodified, with the sample and eval recorders installed (sample_recorder.py, eval_recorder.py; with
export.checkpoint=best, the keeper of the best-evaluated weights, best_checkpoint.py), its time
measured by part (goodput_recorder.py), each finished actor checkpoint reported (checkpoint_reporter.py),
the KL estimator and upper clip Tunix is given (grpo_objective.py), the job's seed behind each rollout's
sampling key (rollout_keys.py),
the stop token inside the loss and masks that never take a real token for padding (stop_token.py),
the job's own reward functions run in sandboxed worker processes, never in this one (reward_sandbox.py),
and a stop signal turned into a checkpoint between steps and
exit 75 (graceful_stop.py). train_rl_jax_entry calls `main` with a hook that swaps the
rollout engine for pure JAX on CPU; this module does not know about it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from .best_checkpoint import install as install_best_checkpoint
from .checkpoint_reporter import install as install_checkpoint_reporter
from .eval_recorder import install as install_eval_recorder
from .goodput_recorder import install as install_goodput_recorder
from .graceful_stop import install as install_graceful_stop
from .grpo_objective import install as install_grpo_objective
from .hf_config_registry import register_from_argv, run_as_main
from .reward_sandbox import install_from_flag as install_reward_sandbox
from .rollout_keys import install as install_rollout_keys
from .sample_recorder import install as install_sample_recorder
from .shim_flags import (
    ACTOR_ROOT_FLAG,
    BEST_RECORD_FLAG,
    BEST_ROOT_FLAG,
    CHECKPOINT_EVENTS_FLAG,
    EPSILON_HIGH_FLAG,
    EVAL_FLAG,
    EVAL_SCORING_FLAG,
    KL_LOSS_MODE_FLAG,
    REWARD_SANDBOX_FLAG,
    ROLLOUT_SEED_FLAG,
    SAMPLES_FLAG,
    pop_flags,
)
from .stop_token import install as install_stop_token

TRAIN_RL_MODULE = "maxtext.trainers.post_train.rl.train_rl"


def main(argv: list[str], *, before_train_rl: Callable[[], None] | None = None) -> None:
    # MaxText's reward helpers start a spawn pool; importing it first avoids a hang seen in 0.2.5.
    import multiprocessing.pool  # noqa: F401

    found, argv = pop_flags(
        argv,
        SAMPLES_FLAG,
        EVAL_FLAG,
        EVAL_SCORING_FLAG,
        BEST_ROOT_FLAG,
        BEST_RECORD_FLAG,
        ACTOR_ROOT_FLAG,
        KL_LOSS_MODE_FLAG,
        EPSILON_HIGH_FLAG,
        CHECKPOINT_EVENTS_FLAG,
        REWARD_SANDBOX_FLAG,
        ROLLOUT_SEED_FLAG,
    )
    maxtext_argv = register_from_argv(argv)
    if KL_LOSS_MODE_FLAG in found:
        epsilon_high = found.get(EPSILON_HIGH_FLAG)
        install_grpo_objective(found[KL_LOSS_MODE_FLAG], float(epsilon_high) if epsilon_high else None)
    if ROLLOUT_SEED_FLAG in found:
        install_rollout_keys(int(found[ROLLOUT_SEED_FLAG]))
    if before_train_rl is not None:
        before_train_rl()
    install_stop_token()
    install_reward_sandbox(maxtext_argv, found.get(REWARD_SANDBOX_FLAG))
    install_sample_recorder(found.get(SAMPLES_FLAG))
    recorder = install_eval_recorder(found.get(EVAL_FLAG), found.get(EVAL_SCORING_FLAG) or "maxtext")
    if BEST_ROOT_FLAG in found:
        keeper = install_best_checkpoint(found[BEST_ROOT_FLAG], found[BEST_RECORD_FLAG], found[ACTOR_ROOT_FLAG])
        recorder.on_summary.append(keeper.offer)
    if CHECKPOINT_EVENTS_FLAG in found:
        install_checkpoint_reporter(found[CHECKPOINT_EVENTS_FLAG])
    install_graceful_stop()
    install_goodput_recorder()  # last: it times the other wrappers' work too (the eval recorder's rows)
    run_as_main(TRAIN_RL_MODULE, maxtext_argv)


if __name__ == "__main__":
    main(sys.argv[1:])
