"""The sampler-trainer agreement of one step (trainer/maxtext_entry/logprob_agreement.py): over the tokens the engine
sampled, position for position, and nothing after them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

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


class _Toy:
    """A two-layer language model in Tunix's call form (logits, cache), small enough to check by hand."""

    def __new__(cls, vocab: int = 11, width: int = 6) -> Any:
        from flax import nnx

        class Toy(nnx.Module):
            def __init__(self, rngs: nnx.Rngs) -> None:
                self.embed = nnx.Embed(vocab, width, rngs=rngs)
                self.out = nnx.Linear(width, vocab, rngs=rngs)

            def __call__(self, tokens: Any, positions: Any, cache: Any, attention_mask: Any, **_: Any) -> tuple[Any, None]:
                return self.out(self.embed(tokens)), None

        return Toy(nnx.Rngs(0))


def _cluster(model: Any, offload: bool = False) -> Any:
    import contextlib

    import jax
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()[:1]), ("fsdp",))

    @contextlib.contextmanager
    def rules(role: Any) -> Any:
        with mesh:
            yield mesh, None

    config = SimpleNamespace(offload_to_cpu=offload, training_config=SimpleNamespace(data_sharding_axis=("fsdp",)))
    rollout = SimpleNamespace(pad_id=lambda: 0, eos_id=lambda: 1)
    return SimpleNamespace(
        cluster_config=config, actor_trainer=SimpleNamespace(model=model), rollout=rollout, _get_mesh_and_logical_axis_rules_cm=rules
    )


def _by_hand(model: Any, prompt: np.ndarray, completion: np.ndarray, temperature: float) -> np.ndarray:
    tokens = np.concatenate([prompt, completion], axis=1)
    logits = np.asarray(model.out(model.embed(tokens)), np.float64) / temperature
    logps = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    start = prompt.shape[1]
    return np.take_along_axis(logps[:, start - 1 : -1], completion[..., None], -1)[..., 0]


def test_the_trainer_side_is_the_actors_current_weights_read_without_collecting(monkeypatch):
    import gc

    import jax.numpy as jnp
    from flax import nnx

    from trainer.maxtext_entry.logprob_agreement import read_trainer_logps

    collections = []
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or 0)  # Tunix's own read collects each step
    model = _Toy()
    cluster = _cluster(model)
    prompt, completion = np.array([[2, 3, 4], [5, 6, 7]]), np.array([[8, 9, 10, 2], [3, 4, 5, 6]])
    before = read_trainer_logps(cluster, jnp.asarray(prompt), jnp.asarray(completion), 0.7)
    np.testing.assert_allclose(before, _by_hand(model, prompt, completion, 0.7), rtol=1e-5, atol=1e-5)
    state = nnx.state(model)
    nnx.update(model, jax_tree_scaled(state, 1.5))  # an update: the next read must see it
    after = read_trainer_logps(cluster, jnp.asarray(prompt), jnp.asarray(completion), 0.7)
    np.testing.assert_allclose(after, _by_hand(model, prompt, completion, 0.7), rtol=1e-5, atol=1e-5)
    assert np.abs(after - before).max() > 1e-3
    assert collections == []
    with pytest.raises(ValueError, match="offloads it to the host"):
        read_trainer_logps(_cluster(model, offload=True), jnp.asarray(prompt), jnp.asarray(completion), 0.7)


def jax_tree_scaled(state: Any, by: float) -> Any:
    import jax

    return jax.tree.map(lambda x: x * by, state)
