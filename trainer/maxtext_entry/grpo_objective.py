"""The parts of GRPO's objective that MaxText 0.2.5's train_rl cannot set: the KL estimator and the upper
clipping bound.

train_rl builds Tunix's `GrpoConfig(num_generations=..., beta=..., epsilon=..., loss_algo=..., loss_agg_mode=...)`
for the standard learner and passes neither `kl_loss_mode` nor `epsilon_high` (its `rl.epsilon_high` reaches
only the agentic learner). So every job ran Tunix's default `kl_loss_mode="kl"` (k1, log pi - log pi_ref taken
as a loss: on-policy its gradient averages to zero at any distance from the reference, so it never pulls the
policy back) and clipped both sides at `epsilon` (Tunix reads `epsilon_high` only if the config has one).

`install` replaces the class in Tunix's module, before train_rl is loaded and imports it, with a subclass whose
defaults are the job's: train_rl's own call then builds it, and logs it ("GRPO config resolved:"), so the job's
train log shows what Tunix was given.
"""

from __future__ import annotations

import dataclasses
from typing import Any

GRPO_LEARNER_MODULE = "tunix.rl.grpo.grpo_learner"


def install(kl_loss_mode: str, epsilon_high: float | None) -> Any:
    """Make Tunix's `GrpoConfig` (and its alias `GRPOConfig`) default to these; the class installed.
    `epsilon_high` None: no such field, so Tunix clips above at `epsilon`, as without this."""
    import importlib

    learner: Any = importlib.import_module(GRPO_LEARNER_MODULE)  # Tunix ships no types
    base = getattr(learner.GRPOConfig, "rljob_tunix_class", learner.GRPOConfig)  # installed again: from Tunix's own
    fields: list[tuple[str, Any, Any]] = [("kl_loss_mode", str, dataclasses.field(default=kl_loss_mode))]
    if epsilon_high is not None:
        fields.append(("epsilon_high", float, dataclasses.field(default=epsilon_high)))
    config: Any = dataclasses.make_dataclass("GRPOConfig", fields, bases=(base,), kw_only=True)
    config.__module__ = base.__module__
    config.__doc__ = base.__doc__
    config.rljob_tunix_class = base
    learner.GRPOConfig = config
    learner.GrpoConfig = config
    return config
