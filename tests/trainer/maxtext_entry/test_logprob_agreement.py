"""The sampler-trainer agreement of one step (trainer/maxtext_entry/logprob_agreement.py): over the tokens the engine
sampled, position for position, and nothing after them."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.maxtext_entry.logprob_agreement import PREFIX, agreement, as_tunix_metrics

RNG = np.random.default_rng(0)


def _batch(rows: int = 4, width: int = 12) -> tuple[list[np.ndarray], np.ndarray]:
    trainer = -RNG.exponential(1.0, size=(rows, width))
    lengths = [12, 7, 1, 9]
    return [trainer[i, :n].copy() for i, n in enumerate(lengths[:rows])], trainer


def test_the_same_log_probabilities_agree_exactly():
    sampled, trainer = _batch()
    found = agreement(sampled, trainer)
    assert found == {
        "logp_diff_mean": 0.0,
        "logp_diff_max": 0.0,
        "prob_diff_mean": 0.0,
        "prob_diff_max": 0.0,
        "probs_pearson_corr": pytest.approx(1.0),
    }


def test_only_the_sampled_positions_count_not_what_follows_them():
    sampled, trainer = _batch()
    trainer[1, 7:] = 0.0  # the EOS rljob appends and the padding: no sampled log-probability there
    assert agreement(sampled, trainer)["logp_diff_max"] == 0.0


def test_a_difference_is_measured_per_token():
    sampled, trainer = _batch()
    drifted = [s + 0.01 for s in sampled]
    drifted[3][4] -= 0.5
    found = agreement(drifted, trainer)
    tokens = sum(len(s) for s in sampled)
    assert found["logp_diff_mean"] == pytest.approx(((tokens - 1) * 0.01 + 0.49) / tokens)
    assert found["logp_diff_max"] == pytest.approx(0.49)
    engine, ours = np.exp(np.concatenate(drifted)), np.exp(np.concatenate(sampled))
    assert found["prob_diff_max"] == pytest.approx(np.abs(engine - ours).max())
    assert found["probs_pearson_corr"] == pytest.approx(np.corrcoef(engine, ours)[0, 1])


def test_one_position_off_is_far_from_agreement():
    sampled, trainer = _batch()
    shifted = np.roll(trainer, 1, axis=1)
    assert agreement(sampled, shifted)["logp_diff_mean"] > 0.5


def test_a_batch_without_a_sampled_token_has_no_agreement():
    assert agreement([np.array([]), np.array([])], np.zeros((2, 4))) is None


def test_the_step_metrics_reduce_as_their_names_say():
    sampled, trainer = _batch()
    metrics = as_tunix_metrics(agreement(sampled, trainer))
    assert {name: reduce for name, (_, reduce) in metrics.items()} == {
        PREFIX + "logp_diff_mean": np.mean,
        PREFIX + "logp_diff_max": np.max,
        PREFIX + "prob_diff_mean": np.mean,
        PREFIX + "prob_diff_max": np.max,
        PREFIX + "probs_pearson_corr": np.mean,
    }


def test_the_correlation_holds_when_every_probability_is_small():
    # a 128k vocabulary early in training: each sampled token's probability ~1e-5 (Tunix's 1e-12 floor reads ~0 here)
    sampled = [np.log(RNG.uniform(1e-6, 1e-5, size=20))]
    trainer = np.stack([sampled[0] + RNG.normal(0, 1e-4, size=20)])
    assert agreement(sampled, trainer)["probs_pearson_corr"] > 0.99


def test_a_constant_probability_leaves_the_correlation_out():
    found = agreement([np.full(5, -1.0)], np.full((1, 5), -1.0))
    assert "probs_pearson_corr" not in found and found["logp_diff_max"] == 0.0
