"""Inside train_rl: keep the weights of the best evaluation (trainer/contract/run/best_checkpoint.py says why here).

Which weights an evaluation measured depends on how the rollout engine holds them, and Tunix decides that
with `rl/utils.py is_sharing_weights(actor, rollout.model())`:
- shared (the JAX rollout on CPU): the rollout samples with the actor's own arrays, so an evaluation measures
  the actor as it is while it runs. MaxText's hook (post_train/rl/hooks.py) runs it from the actor's
  `on_train_step_end`, so no update happens meanwhile, but its `step-N` label is Tunix's global step (batches
  done), which need not equal the actor's updates. A better evaluation is saved from the actor's model right
  then, at `actor_trainer.train_steps`.
- synced (vLLM on TPU): the rollout holds the weights of the last `RLCluster.sync_weights`, at the end of a
  batch, while the actor may have moved on by the time the hook evaluates. So at each sync after which an
  evaluation is due (global_steps a multiple of eval_every_n_steps), those weights are saved as a candidate,
  kept if their evaluation is the best and deleted otherwise. This path runs only where the rollout is
  synced; no CPU run here reaches it (test_best_checkpoint.py drives it with Tunix's real checkpoint manager).
The evaluation after training measures the final weights, which the actor's last checkpoint already holds.

Only process 0 writes the record and deletes; Orbax's save is collective, so every host saves. A failure
here is printed and ignored like the eval recorder's: keeping the best must never stop training, and an
export asked for `best` without a record exports the last and says so.
"""

from __future__ import annotations

import sys
from typing import Any

from trainer.contract import join_uri
from trainer.contract.run.best_checkpoint import BestCheckpoint, beats, record_for
from trainer.contract.run.evaluation import AFTER, EvalSummary

PARAMS_ITEM = "model_params"  # Tunix's item name for the model's state (tunix/sft/checkpoint_manager.py)


class BestCheckpointKeeper:
    def __init__(self, best_root: str, record_uri: str, actor_root: str):
        from trainer.storage import store_for

        self.best_root, self.record_uri, self.actor_root = best_root, record_uri, actor_root
        self.store = store_for(record_uri)
        self.best = self._read_record()  # a resumed trainer competes with what an earlier attempt kept
        self.synced_step: int | None = None  # synced rollouts: the actor step the rollout's weights are from
        self.training = False

    def _read_record(self) -> BestCheckpoint | None:
        if not self.store.exists(self.record_uri):
            return None
        return BestCheckpoint.model_validate_json(self.store.read_bytes(self.record_uri))

    def saved_steps(self) -> set[int]:
        prefix = self.best_root.rstrip("/") + "/"
        first = (obj.uri[len(prefix) :].split("/", 1)[0] for obj in self.store.list(self.best_root))
        return {int(name) for name in first if name.isdigit()}

    def params_uri(self, step: int) -> str:
        return join_uri(self.best_root, str(step), PARAMS_ITEM)

    def save(self, step: int, model: Any) -> None:
        """The model's state as Tunix saves an actor checkpoint without its optimizer, synchronously."""
        import orbax.checkpoint as ocp
        from tunix.sft.checkpoint_manager import CheckpointManager

        if step in self.saved_steps():
            return
        options = ocp.CheckpointManagerOptions(max_to_keep=None, enable_async_checkpointing=False, create=True)
        manager = CheckpointManager(self.best_root, options=options)
        manager.save(step, model, force=True)
        manager.close()

    def after_sync(self, rl_cluster: Any) -> None:
        """Synced rollouts: the weights just synced are the ones the next due evaluation will measure."""
        if not self.training:
            return  # train_rl's unconditional sync before training: no evaluation measures it as step-N
        self.synced_step = int(rl_cluster.actor_trainer.train_steps)
        interval = int(rl_cluster.cluster_config.training_config.eval_every_n_steps or 0)
        if interval > 0 and int(rl_cluster.global_steps) % interval == 0:
            self.save(self.synced_step, rl_cluster.actor_trainer.model)

    def offer(self, summary: EvalSummary, rl_cluster: Any) -> None:
        """After an evaluation: keep its weights if it is the best so far, then drop every other kept step."""
        import jax

        actor = rl_cluster.actor_trainer
        step = self._measured_step(summary, rl_cluster)
        if step is not None and beats(summary, self.best):
            if summary.label == AFTER and step not in self.saved_steps():
                params = join_uri(self.actor_root, str(step), PARAMS_ITEM)  # the actor's last checkpoint
            else:
                self.save(step, actor.model)  # a no-op when the sync already saved it
                params = self.params_uri(step)
            self.best = record_for(summary, step, params)
            if jax.process_index() == 0:
                self.store.write_bytes(self.record_uri, self.best.model_dump_json(indent=1).encode())
        if jax.process_index() == 0:
            keep = self.best.step if self.best is not None and self.best.params.startswith(self.best_root) else None
            for old in self.saved_steps() - {keep}:
                self.store.delete(join_uri(self.best_root, str(old)))

    def _measured_step(self, summary: EvalSummary, rl_cluster: Any) -> int | None:
        from tunix.rl import utils as rl_utils

        actor = rl_cluster.actor_trainer
        if summary.label == AFTER or rl_utils.is_sharing_weights(actor.model, rl_cluster.rollout.model()):
            return int(actor.train_steps)
        return self.synced_step


def _warn(what: str, error: Exception) -> None:
    print(f"rljob: {what} failed, training goes on: {type(error).__name__}: {error}", file=sys.stderr)


def install(best_root: str, record_uri: str, actor_root: str) -> BestCheckpointKeeper:
    """Wrap Tunix's weight sync and train loop; returns the keeper, whose `offer` the eval recorder calls."""
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl import rl_learner

    keeper = BestCheckpointKeeper(best_root, record_uri, actor_root)
    sync_weights, train = rl_cluster_lib.RLCluster.sync_weights, rl_learner.RLLearner.train

    # Stand-ins for Tunix's methods (it ships no types): arguments passed through.
    def _sync_weights(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = sync_weights(self, *args, **kwargs)
        try:
            keeper.after_sync(self)
        except Exception as e:  # noqa: BLE001 - see the module docstring
            _warn("saving the synced weights as a best-checkpoint candidate", e)
        return result

    def _train(self: Any, *args: Any, **kwargs: Any) -> Any:
        keeper.training = True
        try:
            return train(self, *args, **kwargs)
        finally:
            keeper.training = False

    rl_cluster_lib.RLCluster.sync_weights = _sync_weights
    rl_learner.RLLearner.train = _train
    return keeper
