"""Each rollout's sampling key, drawn from the job's seed and the global step.

MaxText 0.2.5's train_rl builds Tunix's `RolloutConfig` without a seed, Tunix's vanilla rollout passes `seed=None`
on, and Tunix's `Sampler.__call__` then samples with `jax.random.PRNGKey(0)` (tunix/generate/sampler.py, `if seed
is None: seed = jax.random.PRNGKey(0)`), folded only with the decoding position (its top_p branch:
`fold_in(sampler_state.seed, decoding_step)`). So every step drew the same noise per position: training pushed on
the sampling paths that fixed noise reaches, and never on the paths it does not.

The key of a rollout call is PRNGKey(seed) folded with the global step, the mode (train or eval) and the call's
index among the engine's calls of that step and mode. Tunix's learner sets `rl_cluster.global_steps` from the
restored checkpoint's step (rl_learner.py, `restored_global_step()`) and, when actor and rollout share one mesh (as
with this engine), generates synchronously inside the step (`can_enable_async_rollout` is false), so a job
restarted from step N draws the keys of step N + 1 exactly as the run that was not interrupted.

`install` seeds the job and wraps `RLCluster.generate`, the one caller that knows the step, to record (step, mode)
for the engine's calls made inside it; each engine counts its calls (`for_this_job`). Called outside it (a check
script), the step is 0 and the index still advances, so successive calls still differ.

The vLLM rollout (TPU) is not given these keys: Tunix's vllm_sampler sets a per-request seed only when one is given
("vLLM Jax backend doesn't support per request seed", tunix/generate/vllm_sampler.py), and vLLM otherwise draws
from its engine's generator, which advances with every request: fresh each step, not reproducible across restarts.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import inspect
import threading
from collections.abc import Iterator
from typing import Any

import jax

from trainer.contract.spec.rl_settings import DEFAULT_SEED

RL_CLUSTER_MODULE = "tunix.rl.rl_cluster"

_STEP: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("rljob_rollout_step", default=None)
MODE_INDEX = {"train": 0, "eval": 1}


class RolloutKeys:
    """The key sequence of one job: deterministic in (seed, global step, mode, call index)."""

    def __init__(self, seed: int):
        self.seed = seed
        self._lock = threading.Lock()
        self._step: tuple[int, int] | None = None
        self._calls = 0

    def key_for(self, step: int, mode: int, call: int) -> jax.Array:
        key = jax.random.PRNGKey(self.seed)
        for value in (step, mode, call):
            key = jax.random.fold_in(key, value)
        return key

    def next_key(self) -> jax.Array:
        step = _STEP.get() or (0, 0)
        with self._lock:
            if step != self._step:
                self._step, self._calls = step, 0
            call = self._calls
            self._calls += 1
        return self.key_for(*step, call)


_seed = DEFAULT_SEED


def for_this_job() -> RolloutKeys:
    """A key sequence for one engine, from the installed seed (each engine counts its own calls)."""
    return RolloutKeys(_seed)


@contextlib.contextmanager
def sampling_step(step: int, mode: str = "train") -> Iterator[None]:
    """Rollout calls inside draw the keys of this global step and mode (what `RLCluster.generate` sets)."""
    token = _STEP.set((step, MODE_INDEX.get(mode, len(MODE_INDEX))))
    try:
        yield
    finally:
        _STEP.reset(token)


def install(seed: int) -> None:
    """Seed the job's rollout keys and let `RLCluster.generate` tell the engine which step it samples for."""
    global _seed
    _seed = seed
    cluster: Any = importlib.import_module(RL_CLUSTER_MODULE).RLCluster  # Tunix ships no types
    original = getattr(cluster.generate, "rljob_tunix_generate", cluster.generate)  # installed again: Tunix's own
    signature = inspect.signature(original)
    if "mode" not in signature.parameters:
        raise RuntimeError(f"{RL_CLUSTER_MODULE}.RLCluster.generate has no `mode` parameter: the installed Tunix is not the pinned one")

    @functools.wraps(original)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        mode = str(getattr(bound.arguments["mode"], "value", bound.arguments["mode"])).lower()
        with sampling_step(int(self.global_steps), mode):
            return original(self, *args, **kwargs)

    generate.rljob_tunix_generate = original  # type: ignore[attr-defined]  # a function attribute, set at run time
    cluster.generate = generate
