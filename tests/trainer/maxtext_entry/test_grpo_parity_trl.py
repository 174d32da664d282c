"""Issue 66 section 1: rljob's GRPO objective equals TRL 1.16's on identical batches, setting for setting.

rljob's side is a job spec's `grpo` section run as a job runs it: the rl.* arguments trainer/stages/train.py passes, Tunix's
GrpoConfig as train_rl builds it from them, grpo_objective.py's kl_loss_mode and epsilon_high installed from the spec,
and Tunix's grpo_loss_fn. TRL's side is a GRPOTrainer built from the GRPOConfig `trl_args` maps the spec to (the
mapping table in docs/trainer.md), its `_generate_and_score_completions` making the inputs and `compute_loss` scoring
them. tests/trainer/maxtext_entry/grpo_parity_sides.py has both. The loss and its gradient with respect to every token's log-prob
must agree to float32 rounding; masked tokens hold garbage log-probs that must not matter.

Advantages are compared on their own: both normalise by the group's standard deviation (n - 1), plus an epsilon
that is not the same (Tunix 1e-6, TRL 1e-4), so the loss comparison hands both sides Tunix's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from tunix.rl import algo_core

from trainer.contract import JobSpec
from trainer.contract.spec.grpo import TUNIX_ONLY_LOSS_AGG_MODES

from .grpo_parity_sides import EOS, Batch, TrlGrpo, tunix_loss_and_grad

G, WIDTH = 4, 6
# Two prompts' groups; rows 1 and 6 are cut at WIDTH (no EOS), the others end with it. Row 6's reward is its group's
# mean: its advantage is 0.
COMPLETIONS = [[3, 4, EOS], [3, 3, 3, 3, 3, 3], [4, EOS], [EOS], [3, 4, 4, 3, EOS], [4, 4, EOS], [4, 3, 4, 3, 4, 3], [4, EOS]]
REWARDS = np.array([1.0, 0.0, 0.5, 0.0, 1.0, 0.2, 0.7, 0.9], np.float32)
TUNIX_ADVANTAGE_EPSILON, TRL_ADVANTAGE_EPSILON = 1e-6, 1e-4  # algo_core.compute_advantages; GRPOTrainer
RTOL, ATOL = 2e-5, 2e-7  # float32 on both sides, summed in different orders

# rljob's loss_agg_mode and the TRL loss_type that aggregates the same way (one process, one accumulation step).
AGGREGATIONS = [
    ("sequence-mean-token-mean", "grpo"),  # mean over rows of each row's token mean
    ("token-mean", "bnpo"),  # sum over the batch's tokens / their count
    ("token-mean", "dapo"),  # sum / the generation batch's token count (num_items_in_batch): the same here
    ("sequence-mean-token-scale", "dr_grpo"),  # sum / (rows * max_completion_length)
    ("seq-mean-token-sum", "luspo"),  # mean over rows of each row's token sum
    ("sequence-mean-token-sum-norm", "luspo"),  # sum / rows: the same
]
# The rest of the objective: old log-probs (None: num_iterations 1), beta, the KL's direction, the clip.
OBJECTIVES: dict[str, tuple[dict[str, Any], bool]] = {
    "on_policy_no_kl": ({"beta": 0.0, "epsilon": 0.2}, False),
    "off_policy_clip_higher_k3_reference_to_policy": (
        {"num_iterations": 2, "beta": 0.04, "epsilon": 0.2, "epsilon_high": 0.28, "kl_direction": "reference_to_policy"},
        True,
    ),
    "off_policy_clip_k3_default_direction": ({"num_iterations": 2, "beta": 0.3, "epsilon": 0.1}, True),
    "on_policy_k3_policy_to_reference": (
        {"beta": 0.04, "epsilon": 0.2, "epsilon_high": 0.28, "kl_direction": "policy_to_reference"},
        False,
    ),
}


def trl_args(spec: JobSpec, loss_type: str) -> dict[str, Any]:
    """The GRPOConfig arguments that ask TRL for the spec's objective (docs/trainer.md's table)."""
    g = spec.grpo
    return {
        "loss_type": loss_type,
        "beta": g.beta,
        "epsilon": g.epsilon,
        "epsilon_high": g.epsilon_high,  # None: TRL clips above at epsilon, as Tunix does
        "num_iterations": g.num_iterations,
        # TRL's k3 weighted by the importance ratio is rljob's policy_to_reference; unweighted, Tunix's k3.
        "use_bias_correction_kl": g.kl_direction == "policy_to_reference",
        "importance_sampling_level": "sequence" if g.loss_algo == "gspo-token" else "token",
        "scale_rewards": "group",  # TRL's default; Tunix's grpo estimator
    }


def _batch(old_policy: bool, garbage: float = 40.0, dropped_rows: tuple[int, ...] = ()) -> Batch:
    """Log-probs near the policy's (old ones about 0.3 nats away: many ratios outside the clip), and up to
    `garbage` nats of noise wherever a row has ended."""
    rng = np.random.default_rng(66)
    shape = (len(COMPLETIONS), WIDTH)
    policy = -rng.uniform(0.05, 3.0, shape)
    old = policy + rng.normal(0.0, 0.3, shape)
    ref = policy + rng.normal(0.0, 0.5, shape)
    ended = np.array([[t >= len(c) for t in range(WIDTH)] for c in COMPLETIONS])
    for logps in (policy, old, ref):
        logps[ended] = -rng.uniform(0.0, garbage, int(ended.sum()))
    f32 = np.float32
    old_logps = old.astype(f32) if old_policy else None
    return Batch(COMPLETIONS, REWARDS, G, WIDTH, policy.astype(f32), old_logps, ref.astype(f32), dropped_rows)


def _spec(tiny_spec_dict: dict, **grpo: Any) -> JobSpec:
    fields = {"batch_size": len(COMPLETIONS) // G, "num_generations": G, **grpo}
    mode = fields.get("loss_agg_mode")
    if mode in TUNIX_ONLY_LOSS_AGG_MODES:
        # The spec refuses it (MaxText's config would), so the comparison is of what Tunix would do, were it passed.
        with pytest.raises(ValidationError, match="MaxText 0.2.5's train_rl refuses it"):
            JobSpec.model_validate({**tiny_spec_dict, "grpo": {**tiny_spec_dict.get("grpo", {}), **fields}})
        spec = JobSpec.model_validate(
            {**tiny_spec_dict, "grpo": {**tiny_spec_dict.get("grpo", {}), **fields, "loss_agg_mode": "token-mean"}}
        )
        return spec.model_copy(update={"grpo": spec.grpo.model_copy(update={"loss_agg_mode": mode})})
    return JobSpec.model_validate({**tiny_spec_dict, "grpo": {**tiny_spec_dict.get("grpo", {}), **fields}})


@pytest.fixture(scope="module")
def trl(tmp_path_factory: pytest.TempPathFactory) -> TrlGrpo:
    return TrlGrpo(tmp_path_factory.mktemp("trl"))


def _both_sides(
    spec: JobSpec, loss_type: str, batch: Batch, trl: TrlGrpo, monkeypatch: pytest.MonkeyPatch, **trl_extra: Any
) -> tuple[tuple[float, np.ndarray], tuple[float, np.ndarray]]:
    """(loss, gradient) of rljob's objective and of TRL's on the batch, both given Tunix's advantages."""
    import torch

    tunix = tunix_loss_and_grad(spec, batch, monkeypatch)
    trainer = trl.trainer(batch, **trl_args(spec, loss_type), **trl_extra)
    inputs = trl.inputs(trainer, batch)
    assert np.array_equal(inputs["completion_mask"].numpy(), batch.completion_mask())  # the same tokens count
    assert (inputs.get("old_per_token_logps") is None) == (batch.old_logps is None)
    advantages = torch.tensor(algo_core.compute_advantages(batch.rewards, G))
    return tunix, trl.loss_and_grad(trainer, inputs, batch, advantages=advantages)


def _assert_equal(tunix: tuple[float, np.ndarray], trl: tuple[float, np.ndarray], batch: Batch) -> dict[str, float]:
    np.testing.assert_allclose(tunix[0], trl[0], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(tunix[1], trl[1], rtol=RTOL, atol=ATOL)
    counted = batch.completion_mask()
    # Only counted tokens move, most of them (not those the clip holds, nor row 6, whose advantage is 0).
    assert not tunix[1][~counted].any() and (np.abs(tunix[1][counted]) > 1e-6).mean() > 0.5
    return {"loss": abs(tunix[0] - trl[0]), "grad": float(np.abs(tunix[1] - trl[1]).max()), "value": tunix[0]}


@pytest.mark.parametrize("objective", list(OBJECTIVES))
@pytest.mark.parametrize(("loss_agg_mode", "loss_type"), AGGREGATIONS)
def test_loss_and_gradient_equal_trls(objective, loss_agg_mode, loss_type, tiny_spec_dict, trl, monkeypatch):
    grpo, old_policy = OBJECTIVES[objective]
    spec = _spec(tiny_spec_dict, loss_agg_mode=loss_agg_mode, **grpo)
    batch = _batch(old_policy)
    if old_policy:  # the clip is at work on both sides of 1
        ratio = np.exp(batch.policy_logps - batch.old_logps)[batch.completion_mask()]
        assert (ratio > 1.3).any() and (ratio < 0.8).any()
    diffs = _assert_equal(*_both_sides(spec, loss_type, batch, trl, monkeypatch), batch)
    print(f"PARITY {objective} {loss_agg_mode}/{loss_type}: {diffs}")


def test_garbage_log_probs_past_a_completions_end_change_nothing_on_either_side(tiny_spec_dict, trl, monkeypatch):
    grpo, old_policy = OBJECTIVES["off_policy_clip_higher_k3_reference_to_policy"]
    spec = _spec(tiny_spec_dict, loss_agg_mode="sequence-mean-token-mean", **grpo)
    wild, tame = (_both_sides(spec, "grpo", _batch(old_policy, garbage=g), trl, monkeypatch) for g in (40.0, 0.01))
    for side in (0, 1):
        assert wild[side][0] == tame[side][0] and np.array_equal(wild[side][1], tame[side][1])


@pytest.mark.parametrize("objective", [o for o in OBJECTIVES if OBJECTIVES[o][0].get("kl_direction") != "policy_to_reference"])
def test_gspo_token_equals_trls_sequence_level_importance_sampling(objective, tiny_spec_dict, trl, monkeypatch):
    """Tunix's gspo-token (the sequence's mean log-ratio as every token's ratio, the gradient per token) with
    sequence-mean-token-mean is TRL's importance_sampling_level "sequence" with loss_type "grpo"."""
    grpo, old_policy = OBJECTIVES[objective]
    spec = _spec(tiny_spec_dict, loss_agg_mode="sequence-mean-token-mean", loss_algo="gspo-token", **grpo)
    batch = _batch(old_policy)
    print(f"PARITY gspo {objective}: {_assert_equal(*_both_sides(spec, 'grpo', batch, trl, monkeypatch), batch)}")


def test_gspo_token_with_policy_to_reference_weights_the_kl_per_token_and_trl_per_sequence(tiny_spec_dict, trl, monkeypatch):
    """rljob's ratio-weighted k3 takes each token's own on-policy ratio (grpo_objective.py); TRL, at sequence level,
    the sequence's (exp of the mean log-ratio, whose gradient is grad log p / n spread over the row). Same value (both
    ratios are 1 on-policy); the gradients differ by beta / (rows * n_i) * (k3_t - mean of row i's k3), exactly."""
    grpo, old_policy = OBJECTIVES["on_policy_k3_policy_to_reference"]
    spec = _spec(tiny_spec_dict, loss_agg_mode="sequence-mean-token-mean", loss_algo="gspo-token", **grpo)
    batch = _batch(old_policy)
    (tunix_loss, tunix_grad), (trl_loss, trl_grad) = _both_sides(spec, "grpo", batch, trl, monkeypatch)
    np.testing.assert_allclose(tunix_loss, trl_loss, rtol=RTOL, atol=ATOL)
    mask = batch.completion_mask()
    diff = (batch.ref_logps - batch.policy_logps).astype(np.float64)
    k3 = np.where(mask, np.exp(diff) - diff - 1, 0.0)
    lengths = mask.sum(-1, keepdims=True)
    predicted = spec.grpo.beta / (len(mask) * lengths) * (k3 - k3.sum(-1, keepdims=True) / lengths) * mask
    np.testing.assert_allclose(tunix_grad - trl_grad, predicted, rtol=1e-3, atol=1e-7)
    print(f"GSPO policy_to_reference: gradient max abs diff {np.abs(tunix_grad - trl_grad).max():.3g}")
    assert np.abs(tunix_grad - trl_grad).max() > 1e-4


@pytest.mark.parametrize(("loss_agg_mode", "loss_type"), AGGREGATIONS)
def test_a_row_with_no_counted_token_divides_trls_row_means_and_not_tunixs(loss_agg_mode, loss_type, tiny_spec_dict, trl, monkeypatch):
    """TRL's mask_truncated_completions leaves the rows cut at max_completion_length with no token counted (Tunix has
    no such option; it gets the same mask here). Tunix averages per-row losses over the rows with a token, TRL over
    all rows: where the mode averages rows, Tunix's loss and gradient are TRL's times rows / rows with a token."""
    grpo, old_policy = OBJECTIVES["off_policy_clip_higher_k3_reference_to_policy"]
    spec = _spec(tiny_spec_dict, loss_agg_mode=loss_agg_mode, **grpo)
    batch = _batch(old_policy, dropped_rows=(1, 6))  # the two cut rows
    (tunix_loss, tunix_grad), (trl_loss, trl_grad) = _both_sides(spec, loss_type, batch, trl, monkeypatch, mask_truncated_completions=True)
    rows = len(batch.completions)
    factor = 1.0 if loss_agg_mode == "token-mean" else rows / (rows - len(batch.dropped_rows))
    np.testing.assert_allclose(tunix_loss, factor * trl_loss, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(tunix_grad, factor * trl_grad, rtol=RTOL, atol=ATOL)


def test_advantages_from_the_same_rewards_differ_only_in_the_std_epsilon(trl):
    """Both: (reward - the group's mean) / (the group's std with n - 1, + epsilon); a group of equal rewards gets 0."""
    rewards = np.array([1, 0, 0, 0, 0.5, 0.5, 0.5, 0.5, 0.1, 0.9, 0.4, 0.7], np.float32)
    zeros = np.zeros((len(rewards), WIDTH), np.float32)
    batch = Batch([[3, EOS]] * len(rewards), rewards, G, WIDTH, zeros, None, zeros)
    tunix = algo_core.compute_advantages(rewards, G)
    trainer = trl.trainer(batch, loss_type="grpo", beta=0.0, scale_rewards="group")
    trl_advantages = trl.inputs(trainer, batch)["advantages"].numpy()
    groups = rewards.reshape(-1, G)
    centred = (groups - groups.mean(-1, keepdims=True)).ravel()
    std = np.repeat(groups.std(-1, ddof=1), G)
    np.testing.assert_allclose(tunix * (std + TUNIX_ADVANTAGE_EPSILON), centred, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(trl_advantages * (std + TRL_ADVANTAGE_EPSILON), centred, rtol=1e-5, atol=1e-7)
    assert not tunix[4:8].any() and not trl_advantages[4:8].any()
    # Measured: 3.4e-4 apart at most here (a relative 1e-4 / std).
    print(f"ADVANTAGES max abs diff {np.abs(tunix - trl_advantages).max():.3g}")
    assert 1e-4 < np.abs(tunix - trl_advantages).max() < 1e-3
