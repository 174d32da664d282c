"""GRPO's objective where MaxText's train_rl cannot set it: the KL estimator and the upper clip
(trainer/maxtext_entry/grpo_objective.py), with Tunix's own functions.

The estimator is a choice with a consequence, shown here on a small categorical policy with no reward at all:
on-policy samples, the KL penalty as the only loss, Tunix's compute_kl_divergence. k1 (Tunix's default, `kl`) is
log p - log p_ref; its gradient is the score function, whose mean under p is zero at any distance from the
reference, so the policy only drifts. k2 and k3 have a gradient whose mean points back to the reference.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from tunix.rl import common
from tunix.rl.grpo import grpo_learner

from trainer.contract import JobSpec
from trainer.contract.run.shim_config import GrpoObjective
from trainer.maxtext_entry import grpo_objective
from trainer.stages.train import KL_LOSS_MODES, objective

VOCAB, SAMPLES, STEPS, LEARNING_RATE = 8, 256, 60, 0.5


def _exact_kl(logits: jax.Array, ref_logits: jax.Array) -> float:
    logp, ref = jax.nn.log_softmax(logits), jax.nn.log_softmax(ref_logits)
    return float(jnp.sum(jnp.exp(logp) * (logp - ref)))


def _penalty_only_updates(estimator: str) -> tuple[float, float]:
    """KL(p || p_ref) before and after STEPS updates on the penalty alone, same seeds for every estimator."""
    ref = jax.random.normal(jax.random.key(0), (VOCAB,))
    logits = ref + 1.5 * jax.random.normal(jax.random.key(1), (VOCAB,))

    def penalty(logits: jax.Array, tokens: jax.Array) -> jax.Array:
        logp = jax.nn.log_softmax(logits)[tokens]
        ref_logp = jax.nn.log_softmax(ref)[tokens]
        return common.compute_kl_divergence(logp, ref_logp, KL_LOSS_MODES[estimator]).mean()

    grad = jax.jit(jax.grad(penalty))
    before = _exact_kl(logits, ref)
    for step in range(STEPS):
        tokens = jax.random.categorical(jax.random.key(100 + step), logits, shape=(SAMPLES,))  # on-policy
        logits = logits - LEARNING_RATE * grad(logits, tokens)
    return before, _exact_kl(logits, ref)


@pytest.mark.timeout(120)
def test_k2_and_k3_pull_the_policy_back_to_the_reference_and_k1_does_not():
    results = {estimator: _penalty_only_updates(estimator) for estimator in ("k1", "k2", "k3")}
    before = results["k1"][0]
    assert before > 0.3 and all(r[0] == before for r in results.values())  # one starting distance for all
    # Measured: KL 0.76 -> k1 0.73, k2 0.016, k3 0.010 (see the module docstring for why).
    assert results["k3"][1] < 0.2 * before and results["k2"][1] < 0.2 * before, results
    assert results["k1"][1] > 0.7 * before, results


def test_the_default_job_uses_k3_and_each_estimator_is_one_tunix_knows(tiny_spec_dict):
    spec = JobSpec.model_validate({**tiny_spec_dict, "grpo": {}})
    assert spec.grpo.kl_estimator == "k3" and objective(spec) == GrpoObjective(kl_loss_mode="low_var_kl")
    x = jnp.array([-1.0, -2.0])
    for mode in KL_LOSS_MODES.values():
        common.compute_kl_divergence(x, x + 0.5, mode)  # raises on a mode Tunix does not have
    with pytest.raises(ValueError, match="must be one of"):
        common.compute_kl_divergence(x, x, "k3")


def test_every_loss_agg_mode_the_spec_allows_is_one_tunix_aggregates():
    modes = JobSpec.model_json_schema()["$defs"]["GrpoSpec"]["properties"]["loss_agg_mode"]["enum"]
    loss, mask = jnp.ones((2, 3)), jnp.array([[1, 1, 0], [1, 0, 0]])
    for mode in modes:
        common.aggregate_loss(loss, mask, mode)
    with pytest.raises(ValueError, match="Unsupported loss aggregation mode"):
        common.aggregate_loss(loss, mask, "sequence-mean")  # in MaxText's rl.yml comment, not in Tunix


def test_the_installed_config_is_what_train_rls_own_call_builds(monkeypatch):
    """train_rl calls `GrpoConfig(num_generations=..., beta=..., epsilon=..., loss_algo=..., loss_agg_mode=...)`
    after importing it from Tunix's module: the installed class must be the one that call finds, keep every
    argument it passes, and carry the job's estimator and upper clip (Tunix's loss reads both attributes)."""
    for name in ("GRPOConfig", "GrpoConfig"):
        monkeypatch.setattr(grpo_learner, name, getattr(grpo_learner, name))  # restored after the test
    original = grpo_learner.GRPOConfig
    grpo_objective.install("low_var_kl", 0.28)
    from tunix.rl.grpo.grpo_learner import GrpoConfig  # as train_rl imports it

    config = GrpoConfig(
        num_generations=4, num_iterations=1, beta=0.04, epsilon=0.2, loss_algo="grpo", loss_agg_mode="sequence-mean-token-scale"
    )
    assert isinstance(config, original) and grpo_learner.GRPOConfig is GrpoConfig
    resolved = dataclasses.asdict(config)  # what train_rl logs as "GRPO config resolved"
    assert resolved["kl_loss_mode"] == "low_var_kl" and resolved["epsilon_high"] == 0.28
    assert (resolved["beta"], resolved["epsilon"], resolved["loss_agg_mode"]) == (0.04, 0.2, "sequence-mean-token-scale")

    grpo_objective.install("kl", None)
    config = grpo_learner.GrpoConfig(num_generations=2)
    assert config.kl_loss_mode == "kl" and not hasattr(config, "epsilon_high")  # Tunix then clips above at epsilon


def test_epsilon_high_below_epsilon_is_refused_naming_both(tiny_spec_dict):
    body = {**tiny_spec_dict, "grpo": {"epsilon": 0.2, "epsilon_high": 0.1}}
    with pytest.raises(ValueError, match=r"epsilon_high \(0.1\) is below epsilon \(0.2\)"):
        JobSpec.model_validate(body)
    assert JobSpec.model_validate({**body, "grpo": {"epsilon": 0.2, "epsilon_high": 0.28}}).grpo.epsilon_high == 0.28
