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

Tunix's k3 (`low_var_kl`) taken as the loss has the gradient of KL(pi_ref || pi); spec grpo.kl_direction
policy_to_reference asks for that of KL(pi || pi_ref), TRL's (trainer/contract/spec/kl_direction.py). For it `install`
also wraps Tunix's `common.compute_kl_divergence`, which the GRPO loss reads from that module when it is traced, with
one more method: k3 times exp(logp - stop_gradient(logp)), the on-policy importance ratio (value 1, gradient
grad log pi). Every other method goes to Tunix's function unchanged.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from trainer.contract.spec.kl_direction import POLICY_TO_REFERENCE_K3_MODE

GRPO_LEARNER_MODULE = "tunix.rl.grpo.grpo_learner"
KL_MODULE = "tunix.rl.common"  # algo_core.grpo_loss_fn calls common.compute_kl_divergence(logps, ref_logps, kl_loss_mode, ...)
KL_FUNCTION = "compute_kl_divergence"
LOSS_MODULE = "tunix.rl.algo_core"  # grpo_loss_fn's module
TUNIX_K3_MODE = "low_var_kl"


def install(kl_loss_mode: str, epsilon_high: float | None) -> Any:
    """Make Tunix's `GrpoConfig` (and its alias `GRPOConfig`) default to these; the class installed.
    `epsilon_high` None: no such field, so Tunix clips above at `epsilon`, as without this."""
    if kl_loss_mode == POLICY_TO_REFERENCE_K3_MODE:
        install_kl_modes()
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


def install_kl_modes() -> Any:
    """Wrap Tunix's `compute_kl_divergence` in its module with rljob's ratio-weighted k3; the wrapper installed."""
    common: Any = importlib.import_module(KL_MODULE)
    current = getattr(common, KL_FUNCTION, None)
    if current is None:
        raise RuntimeError(f"{KL_MODULE} has no {KL_FUNCTION}: {POLICY_TO_REFERENCE_K3_MODE} cannot be installed in this Tunix")
    loss: Any = importlib.import_module(LOSS_MODULE)
    if getattr(loss, "common", None) is not common:  # a name imported from common would not see the wrapper
        raise RuntimeError(f"{LOSS_MODULE} does not read {KL_FUNCTION} from {KL_MODULE}: {POLICY_TO_REFERENCE_K3_MODE} cannot be installed")
    tunix_kl = getattr(current, "rljob_tunix_function", current)  # installed again: wrap Tunix's own

    def compute_kl_divergence(per_token_logps: Any, ref_per_token_logps: Any, method: str = TUNIX_K3_MODE, clamp_value: Any = None) -> Any:
        if method != POLICY_TO_REFERENCE_K3_MODE:
            return tunix_kl(per_token_logps, ref_per_token_logps, method, clamp_value=clamp_value)
        import jax
        import jax.numpy as jnp

        k3 = tunix_kl(per_token_logps, ref_per_token_logps, TUNIX_K3_MODE, clamp_value=clamp_value)
        logps = per_token_logps.astype(jnp.float32)
        return jnp.exp(logps - jax.lax.stop_gradient(logps)) * k3  # the on-policy ratio: value 1, gradient grad log pi

    compute_kl_divergence.__doc__ = tunix_kl.__doc__
    compute_kl_divergence.rljob_tunix_function = tunix_kl  # type: ignore[attr-defined]
    setattr(common, KL_FUNCTION, compute_kl_divergence)
    return compute_kl_divergence
