"""export.checkpoint=best: what the spec accepts, which weights the keeper saves (Tunix's own CheckpointManager and
Orbax, for real, on a small nnx model), and which checkpoint the export stage reads. The whole path inside the real
train_rl is test_slow_pipeline.py's test_export_best_exports_the_weights_of_the_best_evaluation_not_the_last."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from pydantic import ValidationError

from tests.trainer.spec_edit import with_field
from trainer.contract import JobSpec, RunLayout
from trainer.contract.run.best_checkpoint import BestCheckpoint
from trainer.contract.run.evaluation import EvalSummary

BASE = {
    "name": "best",
    "model": {"source": "/models/tiny"},
    "output": "/runs",
    "grpo": {"num_batches": 6, "num_test_batches": 1, "eval_interval": 2},
    "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
    "export": {"checkpoint": "best"},
}


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("grpo.eval_interval", 0, "grpo.eval_interval"),
        ("grpo.eval_interval", 6, "grpo.eval_interval"),  # an evaluation at the last batch measures the last weights
        ("grpo.num_test_batches", 0, "grpo.num_test_batches"),
    ],
)
def test_best_is_refused_without_an_intermediate_evaluation(field, value, named):
    with pytest.raises(ValidationError) as error:
        JobSpec.model_validate(with_field(BASE, field, value))
    assert "export.checkpoint=best" in str(error.value) and named in str(error.value)


def test_best_with_an_intermediate_evaluation_is_accepted_and_last_needs_none():
    assert JobSpec.model_validate(BASE).export.checkpoint == "best"
    last = with_field(with_field(BASE, "export.checkpoint", "last"), "grpo.eval_interval", 0)
    assert JobSpec.model_validate(last).grpo.eval_interval == 0


def test_train_argv_carries_eval_interval_and_the_keepers_paths_only_for_best():
    from trainer.contract.run.shim_config import BestCheckpointPaths, pop_shim_config
    from trainer.sizing.hf_model import MaxTextModel
    from trainer.stages.train import build_train_command, grpo_args

    spec, layout = JobSpec.model_validate(BASE), RunLayout("/runs", "rl-aaaaaaaaaaaa")
    assert "eval_interval=2" in grpo_args(spec)
    config, rest = pop_shim_config(list(build_train_command(spec, layout, MaxTextModel(name="llama3.1-8b")).args))
    assert not [a for a in rest if a.startswith("--rljob")]  # MaxText's config loader never sees the keeper's paths
    assert config.best_checkpoint == BestCheckpointPaths(
        best_root=layout.best_checkpoints, record_uri=layout.best_checkpoint_record, actor_root=layout.actor_checkpoints
    )
    last = JobSpec.model_validate(with_field(BASE, "export.checkpoint", "last"))
    assert pop_shim_config(list(build_train_command(last, layout, MaxTextModel(name="llama3.1-8b")).args))[0].best_checkpoint is None


def _summary(label: str, correct: float, n: int = 4) -> EvalSummary:
    return EvalSummary(
        label=label,
        step=0,
        n=n,
        correct=correct,
        format_correct=0,
        partial_correct=0,
        samples_per_row=1,
        sampling="greedy, pass",
        rows_file=f"{label}.jsonl",
    )


def _model(seed: int):
    from flax import nnx

    return nnx.Linear(3, 2, rngs=nnx.Rngs(seed))


def _kernel(model) -> np.ndarray:
    return np.asarray(model.kernel[...])


def _saved_kernel(params_dir: Path) -> np.ndarray:
    import orbax.checkpoint as ocp

    with ocp.PyTreeCheckpointer() as checkpointer:
        tree = checkpointer.restore(str(params_dir))
    return np.asarray(tree["kernel"]["value"])


@pytest.fixture
def keeper(tmp_path):
    from trainer.maxtext_entry.best_checkpoint import BestCheckpointKeeper

    layout = RunLayout(str(tmp_path), "rl-aaaaaaaaaaaa")
    return BestCheckpointKeeper(layout.best_checkpoints, layout.best_checkpoint_record, layout.actor_checkpoints)


def _shared_cluster(model, train_steps: int):
    """train_rl's cluster as the keeper reads it: the rollout samples with the actor's own model (the JAX engine)."""
    return SimpleNamespace(
        actor_trainer=SimpleNamespace(model=model, train_steps=train_steps), rollout=SimpleNamespace(model=lambda: model)
    )


def test_a_better_evaluation_saves_the_weights_it_measured_and_a_tie_keeps_the_earlier(keeper):
    model = _model(0)
    at_step_2 = _kernel(model).copy()
    keeper.offer(_summary("before", 4), _shared_cluster(model, 0))  # the starting model is no candidate
    assert keeper.best is None and not keeper.saved_steps()
    keeper.offer(_summary("step-1", 2), _shared_cluster(model, 2))
    model.kernel[...] = model.kernel[...] + 1.0  # training goes on
    keeper.offer(_summary("step-2", 2), _shared_cluster(model, 3))  # as good, later: not kept
    record = BestCheckpoint.model_validate_json(Path(keeper.record_uri).read_text())
    assert (record.step, record.label, record.accuracy, record.n) == (2, "step-1", 0.5, 4)
    assert keeper.saved_steps() == {2} and record.params == keeper.params_uri(2)
    assert np.array_equal(_saved_kernel(Path(record.params)), at_step_2)  # the weights evaluated, not later ones
    lo, hi = record.ci95
    assert lo < 0.5 < hi


def test_a_resumed_keeper_competes_with_the_kept_record_and_a_better_final_evaluation_points_at_the_last(keeper):
    from trainer.maxtext_entry.best_checkpoint import BestCheckpointKeeper

    model = _model(1)
    keeper.offer(_summary("step-2", 3), _shared_cluster(model, 2))
    resumed = BestCheckpointKeeper(keeper.best_root, keeper.record_uri, keeper.actor_root)
    resumed.offer(_summary("step-4", 2), _shared_cluster(model, 4))  # worse than what the first attempt kept
    assert resumed.best is not None and resumed.best.step == 2 and resumed.saved_steps() == {2}
    resumed.offer(_summary("after", 4), _shared_cluster(model, 6))
    record = BestCheckpoint.model_validate_json(Path(keeper.record_uri).read_text())
    assert (record.label, record.step, record.params) == ("after", 6, f"{keeper.actor_root}/6/model_params")
    assert resumed.saved_steps() == set()  # the older best is dropped: the actor's last checkpoint holds these weights


def test_synced_rollouts_save_a_candidate_at_the_sync_and_drop_it_when_its_evaluation_loses(keeper):
    actor, rollout = _model(2), _model(3)  # vLLM's copy: Tunix's is_sharing_weights says no
    config = SimpleNamespace(training_config=SimpleNamespace(eval_every_n_steps=2))
    cluster = SimpleNamespace(
        actor_trainer=SimpleNamespace(model=actor, train_steps=2),
        rollout=SimpleNamespace(model=lambda: rollout),
        cluster_config=config,
        global_steps=1,
    )
    keeper.after_sync(cluster)
    assert keeper.saved_steps() == set()  # before training: train_rl's own first sync
    keeper.training = True
    keeper.after_sync(cluster)
    assert keeper.saved_steps() == set()  # global step 1: no evaluation due after it
    cluster.global_steps = 2
    synced = _kernel(actor).copy()
    keeper.after_sync(cluster)
    assert keeper.saved_steps() == {2}
    actor.kernel[...] = actor.kernel[...] - 1.0
    cluster.actor_trainer.train_steps = 3  # the actor moved on before the hook evaluated
    keeper.offer(_summary("step-2", 1), cluster)
    assert keeper.best is not None and keeper.best.step == 2  # the synced weights, which the rollout sampled with
    assert np.array_equal(_saved_kernel(Path(keeper.best.params)), synced)
    cluster.global_steps, cluster.actor_trainer.train_steps = 4, 4
    keeper.after_sync(cluster)
    keeper.offer(_summary("step-4", 0), cluster)
    assert keeper.saved_steps() == {2}  # the losing candidate is gone


def test_the_export_reads_the_recorded_best_or_says_why_it_exported_the_last(tmp_path):
    from trainer.contract.run.best_checkpoint import record_for
    from trainer.stages.export import actor_params_uri, choose_checkpoint

    layout = RunLayout(str(tmp_path), "rl-aaaaaaaaaaaa")
    spec = JobSpec.model_validate(with_field(BASE, "output", str(tmp_path)))
    fallback = choose_checkpoint(spec, layout, 6)
    assert (fallback.exported, fallback.step, fallback.params) == ("last", 6, actor_params_uri(layout, 6))
    assert fallback.reason and layout.best_checkpoint_record in fallback.reason
    record = record_for(_summary("step-2", 3), 4, f"{layout.best_checkpoints}/4/model_params")
    Path(layout.best_checkpoint_record).parent.mkdir(parents=True)
    Path(layout.best_checkpoint_record).write_text(record.model_dump_json())
    chosen = choose_checkpoint(spec, layout, 6)
    assert (chosen.exported, chosen.step, chosen.params, chosen.best) == ("best", 4, record.params, record)
    last = choose_checkpoint(JobSpec.model_validate(with_field(spec.model_dump(), "export.checkpoint", "last")), layout, 6)
    assert (last.exported, last.step) == ("last", 6)
