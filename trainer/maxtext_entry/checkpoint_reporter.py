"""Inside train_rl: say on stdout when an actor checkpoint is finished, for evaluations attached to the job.

The service starts an eval job on a checkpoint once it hears of it (JobSpec.eval; service/domain/
attached_evals.py), so the line must never name a checkpoint Orbax is still writing: the eval job would
read half a checkpoint, or none. Tunix's `CheckpointManager.save` returns as soon as an asynchronous save
has started (train_rl leaves Orbax's async checkpointing on), so the save call is the wrong seam.

The seam is Orbax's `CheckpointManager._finalize(step, steps_to_remove)` (orbax-checkpoint 0.12.8,
checkpoint_manager.py): the one method every save ends in, run in Orbax's `save_finalize` thread for an
async save and inline for a sync one. It waits for the checkpointer's commit (the temporary directory
renamed to `<step>`, or `commit_success.txt` written on GCS), then deletes the steps beyond
`max_to_keep`. After it returns, the step is checked with Orbax's own reader rule
(`ocp.utils.is_checkpoint_finalized`): a save whose commit failed is logged by Orbax and not finalized,
so it is not reported. Only managers whose directory is the actor's checkpoint root report (the best
checkpoint keeper saves through Tunix too, elsewhere), and only on process 0 (every host saves).

The line is `RLJOB_CHECKPOINT {"step": N}` (trainer/contract/run/checkpoint_line.py); the train stage turns it into a
CheckpointSaved event with the step's model_params URI it derives itself (trainer/stages/train.py). A failure here is printed and
ignored: reporting a checkpoint must never stop training.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from trainer.contract.run.checkpoint_line import checkpoint_line
from trainer.maxtext_entry.report_line import write_report_line

# (module, class, attribute) wrapped by install(): checked against the installed Orbax by a test.
WRAPPED = ("orbax.checkpoint.checkpoint_manager", "CheckpointManager", "_finalize")


def _same_root(directory: Any, root: str) -> bool:
    return str(directory).rstrip("/") == root.rstrip("/")


class CheckpointReporter:
    """Reports each finalized step of the checkpoint manager rooted at `actor_root`."""

    def __init__(self, actor_root: str, write: Callable[[str], None] | None = None):
        self.actor_root = actor_root
        self._write = write or write_report_line

    def finalized(self, manager: Any, step: int) -> None:
        import jax
        import orbax.checkpoint as ocp

        if not _same_root(manager.directory, self.actor_root) or jax.process_index() != 0:
            return
        if ocp.utils.is_checkpoint_finalized(manager.directory / str(step)):
            self._write(checkpoint_line(step))


def install(actor_root: str, reporter: CheckpointReporter | None = None) -> CheckpointReporter:
    """Wrap Orbax's CheckpointManager._finalize to report the steps it finalized under `actor_root`."""
    import importlib

    module, class_name, attribute = WRAPPED
    owner = getattr(importlib.import_module(module), class_name)
    reporter = reporter or CheckpointReporter(actor_root)
    finalize = getattr(owner, attribute)

    # A stand-in for Orbax's private method: arguments passed through, its result returned.
    def _finalize(self: Any, step: int, *args: Any, **kwargs: Any) -> Any:
        result = finalize(self, step, *args, **kwargs)
        try:
            reporter.finalized(self, step)
        except Exception as e:  # noqa: BLE001 - see the module docstring
            print(f"rljob: reporting checkpoint {step} failed, training goes on: {type(e).__name__}: {e}", file=sys.stderr)
        return result

    _finalize.__wrapped__ = finalize  # type: ignore[attr-defined]  # functools' convention, set by hand
    setattr(owner, attribute, _finalize)
    return reporter
