"""grpo.kl_direction (trainer/contract/spec/kl_direction.py): which KL the k3 penalty's gradient is the gradient of.

A categorical policy over a few tokens (logits theta) and a reference. The expectation over x ~ pi is taken exactly,
with no sampling: every token is one single-token completion, run through Tunix's own grpo_loss_fn on a tiny model
with token-mean aggregation and completion_mask pi(x) held constant (the samples' distribution carries no gradient,
as in training), so the loss is sum_x pi(x) kl(x) and its gradient is E_pi[grad kl]. Advantages are 0 and beta 1:
the penalty is the whole loss. Tunix's k3 then has the gradient of KL(ref || pi); rljob's policy_to_reference mode
(k3 times the on-policy ratio, TRL's use_bias_correction_kl) that of KL(pi || ref); each is not the other's.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tunix.rl import algo_core, common
from tunix.rl.grpo import grpo_learner

from trainer.contract import JobSpec
from trainer.contract.run.shim_config import GrpoObjective
from trainer.contract.spec.kl_direction import POLICY_TO_REFERENCE_K3_MODE
from trainer.maxtext_entry import grpo_objective
from trainer.stages.train import objective

VOCAB = 5
PAD, EOS, PROMPT = VOCAB, VOCAB + 1, 0
THETA = jnp.array([0.9, -0.4, 1.6, 0.1, -1.2])
REF = jnp.array([-0.3, 0.8, 0.2, -0.9, 0.5])


class _Categorical(nnx.Module):
    """Logits theta at every position, whatever the tokens: the next token is x ~ softmax(theta)."""

    def __init__(self, theta: jax.Array):
        self.theta = nnx.Param(theta)

    def __call__(self, tokens: jax.Array, positions=None, cache=None, attention_mask=None):
        logits = jnp.concatenate([self.theta[...], jnp.full(2, -1e9)])  # PAD and EOS are never drawn
        return jnp.broadcast_to(logits, (*tokens.shape, VOCAB + 2)), None


@pytest.fixture
def installed(monkeypatch):
    for name in ("GRPOConfig", "GrpoConfig"):
        monkeypatch.setattr(grpo_learner, name, getattr(grpo_learner, name))  # restored after the test
    monkeypatch.setattr(common, "compute_kl_divergence", common.compute_kl_divergence)
    return grpo_objective.install


def _penalty_gradient(kl_loss_mode: str, install) -> jax.Array:
    """E_{x~pi}[grad_theta kl(x)] through Tunix's grpo_loss_fn, exactly."""
    install(kl_loss_mode, None)
    config = grpo_learner.GrpoConfig(num_generations=2, beta=1.0, loss_agg_mode="token-mean")
    config.temperature = 1.0  # the learner sets it from the rollout config
    assert config.kl_loss_mode == kl_loss_mode
    tokens = jnp.arange(VOCAB)[:, None]
    pi = jax.nn.softmax(THETA)
    example = common.TrainExample(
        prompt_ids=jnp.full((VOCAB, 1), PROMPT),
        prompt_mask=jnp.ones((VOCAB, 1)),
        completion_ids=tokens,
        completion_mask=pi[:, None],  # constant weights pi(x): token-mean gives sum_x pi(x) kl(x)
        advantages=jnp.zeros(VOCAB),
        ref_per_token_logps=jax.nn.log_softmax(REF)[tokens],
        old_per_token_logps=None,  # num_iterations 1
    )

    def loss(model: _Categorical) -> jax.Array:
        return algo_core.grpo_loss_fn(model, example, config, PAD, EOS)[0]

    return nnx.grad(loss)(_Categorical(THETA)).theta[...]


def _kl(p_logits: jax.Array, q_logits: jax.Array) -> jax.Array:
    p, q = jax.nn.log_softmax(p_logits), jax.nn.log_softmax(q_logits)
    return jnp.sum(jnp.exp(p) * (p - q))


def test_each_direction_has_the_gradient_of_its_own_kl_and_not_the_others(installed):
    reference_to_policy = jax.grad(lambda theta: _kl(REF, theta))(THETA)  # KL(ref || pi)
    policy_to_reference = jax.grad(lambda theta: _kl(theta, REF))(THETA)  # KL(pi || ref)
    assert float(jnp.abs(reference_to_policy - policy_to_reference).max()) > 0.1  # the case tells them apart

    tunix_k3 = _penalty_gradient("low_var_kl", installed)
    np.testing.assert_allclose(tunix_k3, reference_to_policy, atol=1e-5)
    ratio_k3 = _penalty_gradient(POLICY_TO_REFERENCE_K3_MODE, installed)
    np.testing.assert_allclose(ratio_k3, policy_to_reference, atol=1e-5)
    assert not np.allclose(tunix_k3, policy_to_reference, atol=1e-2) and not np.allclose(ratio_k3, reference_to_policy, atol=1e-2)


def test_the_new_mode_keeps_k3s_value_and_leaves_tunixs_modes_alone(installed):
    installed(POLICY_TO_REFERENCE_K3_MODE, None)
    wrapper, tunix = common.compute_kl_divergence, common.compute_kl_divergence.rljob_tunix_function
    logp, ref = jnp.log(jnp.array([0.2, 0.5])), jnp.log(jnp.array([0.4, 0.1]))
    np.testing.assert_allclose(wrapper(logp, ref, POLICY_TO_REFERENCE_K3_MODE), tunix(logp, ref, "low_var_kl"), rtol=1e-6)
    for mode in ("kl", "mse_kl", "low_var_kl"):
        np.testing.assert_array_equal(wrapper(logp, ref, mode, clamp_value=0.3), tunix(logp, ref, mode, clamp_value=0.3))
    installed(POLICY_TO_REFERENCE_K3_MODE, None)  # installed again: wraps Tunix's own, not the wrapper
    assert common.compute_kl_divergence.rljob_tunix_function is tunix


def test_a_tunix_without_the_patched_names_is_refused_clearly(installed, monkeypatch):
    monkeypatch.delattr(common, "compute_kl_divergence")
    with pytest.raises(RuntimeError, match="tunix.rl.common has no compute_kl_divergence"):
        installed(POLICY_TO_REFERENCE_K3_MODE, None)
    monkeypatch.setattr(common, "compute_kl_divergence", lambda *a, **k: None, raising=False)
    monkeypatch.setattr(algo_core, "common", object())
    with pytest.raises(RuntimeError, match="does not read compute_kl_divergence from tunix.rl.common"):
        installed(POLICY_TO_REFERENCE_K3_MODE, None)


def test_the_spec_passes_the_direction_and_old_specs_keep_their_hash(tiny_spec_dict):
    default = JobSpec.model_validate({**tiny_spec_dict, "grpo": {}})
    assert default.grpo.kl_direction is None and "kl_direction" not in json.loads(default.canonical_json())["grpo"]
    assert objective(default) == GrpoObjective(kl_loss_mode="low_var_kl")
    same = JobSpec.model_validate({**tiny_spec_dict, "grpo": {"kl_direction": "reference_to_policy"}})
    assert objective(same) == GrpoObjective(kl_loss_mode="low_var_kl")
    trl = JobSpec.model_validate({**tiny_spec_dict, "grpo": {"kl_direction": "policy_to_reference"}})
    assert objective(trl) == GrpoObjective(kl_loss_mode=POLICY_TO_REFERENCE_K3_MODE)
    assert trl.content_hash() != default.content_hash()


@pytest.mark.parametrize(
    ("grpo", "message"),
    [
        ({"kl_estimator": "k2", "kl_direction": "policy_to_reference"}, "applies to kl_estimator k3"),
        ({"beta": 0, "kl_direction": "reference_to_policy"}, "no effect with beta 0"),
        ({"num_iterations": 2, "kl_direction": "policy_to_reference"}, "needs num_iterations 1"),
        ({"kl_direction": "reverse"}, "reference_to_policy"),
    ],
)
def test_a_direction_that_cannot_apply_is_refused_naming_the_field(tiny_spec_dict, grpo, message):
    with pytest.raises(ValueError, match=message) as refused:
        JobSpec.model_validate({**tiny_spec_dict, "grpo": grpo})
    assert "grpo.kl_direction" in str(refused.value)
