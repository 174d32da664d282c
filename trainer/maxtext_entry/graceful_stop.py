"""Inside train_rl: a stop signal ends training at the next step boundary with a checkpoint of the
current step, then the process exits 75 (retryable) so the Job relaunches it and train_rl resumes there.

A spot TPU VM gets SIGTERM 30 s before it is stopped; the trainer process forwards the same signal
when a flex-start run reaches its deadline (trainer/run_stop.py). The handler only records the signal:
JAX state is not safe to touch from a signal handler, and a step cut in half has nothing to save. It is
installed when the first step starts: before that (model loading, compilation) there is nothing to
save, and the default action ends the process at once.

Where it hooks (Tunix 0.1.7, nothing of MaxText):
- `RLLearner.train` runs one GRPO step per `_run_global_step` call and ends its loop on StopIteration
  (its "data exhausted" path), then calls `rl_cluster.close()`, which flushes buffered metrics and
  closes the actor's Orbax CheckpointManager (waiting for the save). So the wrapper around
  `_run_global_step` saves the actor through that same manager and raises StopIteration.
- The save passes the custom metadata Tunix's periodic saves carry: `global_step`, which train_rl
  restores into `rl_cluster.global_steps` (metric steps and sample files are numbered by it). Tunix's
  own end-of-training save (`_save_last_checkpoint`) omits it, so it is not relied on.
- The wrapper around `train` turns the stopped loop into `SystemExit(75)` instead of letting train_rl
  run its post-training evaluation.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from trainer.contract.run.exit_codes import ExitCode


@dataclass
class StopFlag:
    """Set by the signal handler; read between training steps."""

    signum: int | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum  # nothing else: see the module docstring

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def describe(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "no signal"


def stop_checkpoint_metadata(trainer_metadata: dict[str, Any], global_steps: int) -> dict[str, Any]:
    """The custom metadata of a checkpoint saved between steps.

    Tunix's periodic save runs inside a step, before `global_steps` is incremented, and so stores
    `global_steps + 1`; between steps the increment has happened and the same step is `global_steps`.
    """
    return {**trainer_metadata, "global_step": global_steps}


def save_actor_between_steps(cluster: Any, started_at_step: int) -> int | None:
    """Save the actor at its current step through Tunix's checkpoint manager; the saved step, or None
    when there is nothing new to keep (no step trained since the restore, or that step already saved)."""
    trainer = cluster.actor_trainer
    step = int(trainer.train_steps)
    latest = trainer.checkpoint_manager.latest_step()
    if step == started_at_step or (latest is not None and latest >= step):
        return None
    metadata = stop_checkpoint_metadata(trainer.custom_checkpoint_metadata(), int(cluster.global_steps))
    # PeftTrainer keeps no public flag for LoRA; its own saves pass this attribute the same way.
    lora = bool(getattr(trainer, "_lora_enabled", False))
    saved = trainer.checkpoint_manager.save(
        step, trainer.model, trainer.optimizer, save_only_lora_params=lora, force=True, custom_metadata=metadata
    )
    return step if saved else None


def _say(message: str) -> None:
    print(f"rljob: {message}", file=sys.stderr, flush=True)


def wrap_training_loop(
    run_global_step: Callable[..., Any], train: Callable[..., Any], flag: StopFlag
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Stand-ins for `RLLearner._run_global_step` and `RLLearner.train` that stop on `flag` between steps.

    Tunix ships no types: `self` is an RLLearner and the other arguments are Tunix's, passed through.
    """
    started: dict[int, int] = {}  # id(learner) -> the actor step this process started training at

    def _run_global_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        step = int(self.rl_cluster.actor_trainer.train_steps)
        if id(self) not in started:
            started[id(self)] = step
            if threading.current_thread() is threading.main_thread():  # signal.signal's own condition
                signal.signal(signal.SIGTERM, flag.handle)
            _say(f"training starts at step {step}")
        if flag.requested:
            saved = save_actor_between_steps(self.rl_cluster, started[id(self)])
            if saved is None and step == started[id(self)]:
                # No step trained here: the checkpoint it resumed from (or the converted one) is current.
                _say(f"stop requested ({flag.describe()}) before any step trained; exiting {int(ExitCode.RETRYABLE)}")
                raise SystemExit(int(ExitCode.RETRYABLE))
            _say(f"stop requested ({flag.describe()}): checkpoint at step {step}; exiting once it is written")
            raise StopIteration  # Tunix's loop ends on it and closes the checkpoint manager (waits for the save)
        return run_global_step(self, *args, **kwargs)

    def _train(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = train(self, *args, **kwargs)
        if flag.requested:
            _say(
                f"stopped by {flag.describe()} at step {int(self.rl_cluster.actor_trainer.train_steps)}; "
                f"exiting {int(ExitCode.RETRYABLE)} so a rerun resumes from it"
            )
            raise SystemExit(int(ExitCode.RETRYABLE))
        return result

    return _run_global_step, _train


def install(flag: StopFlag | None = None) -> StopFlag:
    """Wrap Tunix's training loop to record SIGTERM from its first step on and stop on it between steps."""
    from tunix.rl import rl_learner

    flag = flag or StopFlag()
    wrapped = wrap_training_loop(rl_learner.RLLearner._run_global_step, rl_learner.RLLearner.train, flag)
    rl_learner.RLLearner._run_global_step, rl_learner.RLLearner.train = wrapped
    return flag
