"""The rollout's sampling keys after `install(seed)` (trainer/rollout/rollout_keys.py): drawn from the job's seed and the
step `RLCluster.generate` samples for. The wrapper is plain Python around Tunix's method, so a stand-in RLCluster with
Tunix's signature (generate(self, prompts, mode, ...), global_steps) exercises it without MaxText or a model."""

from __future__ import annotations

import sys
import types
from enum import Enum
from typing import Any

import jax
import numpy as np
import pytest

from trainer.contract.spec.rl_settings import DEFAULT_SEED
from trainer.rollout import rollout_keys
from trainer.rollout.rollout_keys import RolloutKeys


class Mode(Enum):  # Tunix passes its rl_cluster.Mode; the wrapper reads its value
    TRAIN = "train"
    EVAL = "eval"


class StandInCluster:
    """RLCluster as the wrapper sees it: `global_steps` (Tunix sets it from a restored checkpoint) and `generate`, whose
    rollout engine draws one key per call."""

    engine_keys: RolloutKeys

    def __init__(self, global_steps: int) -> None:
        self.global_steps = global_steps

    def generate(self, prompts: list[str], mode: Mode = Mode.TRAIN, micro_batch_size: int | None = None) -> Any:
        return self.engine_keys.next_key()


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> type[StandInCluster]:
    """install(1234) over the stand-in, the module's seed and the class restored afterwards."""
    module = types.ModuleType(rollout_keys.RL_CLUSTER_MODULE)
    cluster = type("RLCluster", (StandInCluster,), {})
    module.RLCluster = cluster  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, rollout_keys.RL_CLUSTER_MODULE, module)
    monkeypatch.setattr(rollout_keys, "_seed", rollout_keys._seed)
    rollout_keys.install(1234)
    cluster.engine_keys = rollout_keys.for_this_job()  # type: ignore[attr-defined]  # as the engine takes them at build
    return cluster


def _key(seed: int, step: int, mode: int, call: int) -> np.ndarray:
    key = jax.random.PRNGKey(seed)
    for value in (step, mode, call):
        key = jax.random.fold_in(key, value)
    return np.asarray(key)


def _same(a: Any, b: Any) -> bool:
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def test_the_installed_seed_is_the_one_the_keys_are_drawn_from(installed: type[StandInCluster]) -> None:
    assert 1234 != DEFAULT_SEED
    assert _same(installed(global_steps=5).generate(["p"]), _key(1234, 5, 0, 0))
    assert not _same(installed(global_steps=5).generate(["p"]), _key(DEFAULT_SEED, 5, 0, 1))


def test_the_wrapper_samples_each_call_at_the_clusters_step_and_mode(installed: type[StandInCluster]) -> None:
    cluster = installed(global_steps=7)
    first, second = cluster.generate(["p"]), cluster.generate(["p"], Mode.TRAIN)
    assert _same(first, _key(1234, 7, 0, 0)) and _same(second, _key(1234, 7, 0, 1))  # a step's calls differ
    assert _same(cluster.generate(["p"], mode=Mode.EVAL), _key(1234, 7, 1, 0))  # an evaluation counts apart
    cluster.global_steps = 8
    assert _same(cluster.generate(["p"]), _key(1234, 8, 0, 0))  # the next step: not the keys of step 7 again
    # A job restarted from step 8's checkpoint draws step 8's keys, as the run that was not interrupted did.
    restarted = installed(global_steps=8)
    restarted.engine_keys = rollout_keys.for_this_job()
    assert _same(restarted.generate(["p"]), _key(1234, 8, 0, 0))


def test_installed_again_the_wrapper_wraps_tunixs_own_method_once(installed: type[StandInCluster]) -> None:
    rollout_keys.install(99)
    installed.engine_keys = rollout_keys.for_this_job()
    assert _same(installed(global_steps=3).generate(["p"]), _key(99, 3, 0, 0))
    assert installed.generate.rljob_tunix_generate is StandInCluster.generate  # type: ignore[attr-defined]
