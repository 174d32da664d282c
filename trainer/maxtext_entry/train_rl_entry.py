"""`python -m trainer.maxtext_entry.train_rl_entry [--rljob_shim_config=<json>] <train_rl args>`: MaxText's train_rl,
unmodified, with what INSTALLS lists installed first, in that order, as the train stage's shim configuration
(trainer/contract/run/shim_config.py) asks. train_rl_jax_entry calls `main` with its swap of the rollout engine for
pure JAX on CPU, which takes its place in the table; this module does not know what it does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from trainer.contract.run.shim_config import ShimConfig, pop_shim_config
from trainer.rollout.rollout_keys import install as install_rollout_keys
from trainer.rollout.stop_token import install as install_stop_token

from .best_checkpoint import install as install_best_checkpoint
from .checkpoint_reporter import install as install_checkpoint_reporter
from .eval_recorder import install as install_eval_recorder
from .goodput_recorder import install as install_goodput_recorder
from .graceful_stop import install as install_graceful_stop
from .grpo_objective import install as install_grpo_objective
from .hf_config_registry import register_hf_config_of, run_as_main
from .logprob_agreement import install as install_logprob_agreement
from .reward_sandbox import install_for_job as install_reward_sandbox
from .sample_recorder import install as install_sample_recorder

TRAIN_RL_MODULE = "maxtext.trainers.post_train.rl.train_rl"


@dataclass(frozen=True)
class EntryRun:
    """What an install may read: the stage's shim configuration, the argv MaxText will get, and the jax entry's swap
    of the rollout engine (None on the vllm entry)."""

    config: ShimConfig
    maxtext_argv: list[str]
    swap_rollout_engine: Callable[[], None] | None


def _objective(run: EntryRun) -> None:
    if run.config.objective is not None:
        install_grpo_objective(run.config.objective.kl_loss_mode, run.config.objective.epsilon_high)


def _rollout_keys(run: EntryRun) -> None:
    if run.config.rollout_seed is not None:
        install_rollout_keys(run.config.rollout_seed)


def _rollout_engine(run: EntryRun) -> None:
    if run.swap_rollout_engine is not None:
        run.swap_rollout_engine()


def _evaluations(run: EntryRun) -> None:
    recording = run.config.evaluations
    recorder = install_eval_recorder(recording.uri if recording else None, recording.scoring if recording else "maxtext")
    best = run.config.best_checkpoint
    if best is not None:
        recorder.on_summary.append(install_best_checkpoint(best.best_root, best.record_uri, best.actor_root).offer)


def _checkpoint_events(run: EntryRun) -> None:
    if run.config.checkpoint_events_root is not None:
        install_checkpoint_reporter(run.config.checkpoint_events_root)


@dataclass(frozen=True)
class Install:
    name: str
    install: Callable[[EntryRun], object]  # what an install returns is its own (tests read some); main ignores it
    why_here: str  # what fixes its place in the order, or that nothing does


# Every install runs before train_rl is imported, which some need (train_rl binds Tunix's GRPOConfig and the vLLM
# rollout module by name). Among themselves the order matters where two wrap the same function, the later one
# outside: goodput's timers wrap RLCluster's calls, the evaluation and the checkpoint manager, so it comes last.
INDEPENDENT = "wraps or replaces what no other install touches: any place before goodput"
INSTALLS: tuple[Install, ...] = (
    Install("hf_config", lambda run: register_hf_config_of(run.config.hf_config, run.maxtext_argv), INDEPENDENT),
    Install("objective", _objective, INDEPENDENT),
    Install(
        "logprob_agreement",
        lambda run: install_logprob_agreement(),
        "wraps RLCluster.generate innermost: it reads generate's `mode` from the signature of Tunix's own, and its "
        "functools.wraps keeps that signature for rollout_keys' wrapper outside it",
    ),
    Install(
        "rollout_keys",
        _rollout_keys,
        "wraps RLCluster.generate before stop_token does: it reads generate's `mode` parameter from its signature, which "
        "stop_token's (self, *args, **kwargs) stand-in would hide",
    ),
    Install("rollout_engine", _rollout_engine, INDEPENDENT),
    Install("stop_token", lambda run: install_stop_token(), "wraps RLCluster.generate outside rollout_keys' wrapper (see there)"),
    Install("reward_sandbox", lambda run: install_reward_sandbox(run.maxtext_argv, run.config.reward_sandbox), INDEPENDENT),
    Install("samples", lambda run: install_sample_recorder(run.config.samples_uri), INDEPENDENT),
    Install(
        "evaluations",
        _evaluations,
        "wraps MaxText's evaluate: before goodput, so recording an evaluation's rows counts as eval time; the best-"
        "checkpoint keeper listens to its summaries, so both install here",
    ),
    Install("checkpoint_events", _checkpoint_events, INDEPENDENT),
    Install(
        "graceful_stop",
        lambda run: install_graceful_stop(),
        "wraps RLLearner.train outside the evaluation recorder's wrapper of it, so a stop's exit comes after the recorder "
        "has marked training finished",
    ),
    Install("goodput", lambda run: install_goodput_recorder(), "last: its timers are outermost, so they time every other wrapper's work"),
)


def main(argv: list[str], *, swap_rollout_engine: Callable[[], None] | None = None) -> None:
    # MaxText's reward helpers start a spawn pool; importing it first avoids a hang seen in 0.2.5.
    import multiprocessing.pool  # noqa: F401

    config, maxtext_argv = pop_shim_config(argv)
    run = EntryRun(config, maxtext_argv, swap_rollout_engine)
    for step in INSTALLS:
        step.install(run)
    run_as_main(TRAIN_RL_MODULE, maxtext_argv)


if __name__ == "__main__":
    main(sys.argv[1:])
