"""The stop token inside GRPO's loss and masks that never take a real token for padding (stop_token.py),
through Tunix's own log-prob helper and GRPO loss on a small attention model, with pad == EOS as Llama 3's and
SmolLM2's tokenizers have it; and through the wrappers as installed, on Tunix's own learner step (the function
that builds the completion mask), in this process and under the entry shim's main."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tunix.rl import common, rl_cluster
from tunix.rl.algo_core import grpo_loss_fn
from tunix.rl.grpo import grpo_learner

from tests.trainer import grpo_learner_step
from tests.trainer.grpo_learner_step import STEP_LINE_PREFIX, learner_step
from trainer.rollout import stop_token
from trainer.rollout.stop_token import left_padding_mask, mask_from_lengths, with_stop_tokens

REPO = Path(__file__).resolve().parents[3]

EOS = PAD = 2  # SmolLM2's <|im_end|>; Tunix makes Llama 3's pad its EOS
VOCAB, WIDTH = 16, 4  # completion width (max_tokens_to_generate)


class Attention(nnx.Module):
    """One causal attention layer with learned positions: its outputs depend on every token it may attend to."""

    def __init__(self, rngs: nnx.Rngs):
        self.embed, self.position = nnx.Embed(VOCAB, 8, rngs=rngs), nnx.Embed(32, 8, rngs=rngs)
        self.q, self.k, self.v = (nnx.Linear(8, 8, rngs=rngs) for _ in range(3))
        self.out = nnx.Linear(8, VOCAB, rngs=rngs)

    def __call__(self, tokens, positions=None, cache=None, attention_mask=None):
        x = self.embed(jnp.maximum(tokens, 0)) + self.position(jnp.maximum(positions, 0))
        scores = jnp.einsum("btd,bsd->bts", self.q(x), self.k(x)) / jnp.sqrt(8.0)
        weights = jax.nn.softmax(jnp.where(attention_mask, scores, -1e9), axis=-1)
        return self.out(x + jnp.einsum("bts,bsd->btd", weights, self.v(x))), cache


def alone_logps(model: Attention, prompt: list[int], completion: list[int]) -> np.ndarray:
    """Each completion token's log-prob with the sequence alone: no padding, every earlier token attended."""
    ids = jnp.asarray([prompt + completion])
    n = ids.shape[1]
    logits, _ = model(ids, jnp.arange(n)[None], None, jnp.tril(jnp.ones((1, n, n), bool)))
    logps = jax.nn.log_softmax(logits[0, len(prompt) - 1 : n - 1], axis=-1)
    return np.asarray(logps[jnp.arange(len(completion)), jnp.asarray(completion)])


@pytest.fixture()
def installed(monkeypatch):
    """stop_token.install() for one test: Tunix's functions are restored after it and no compiled trace outlives it."""
    for owner, name in (
        (common, "process_ids"),
        (rl_cluster.RLCluster, "generate"),
        (grpo_learner.GRPOLearner, "_generate_and_compute_advantage"),
    ):
        monkeypatch.setattr(owner, name, getattr(owner, name))
    common.compute_per_token_logps.clear_cache()  # its traces call process_ids: none may outlive a swap
    stop_token.install()
    yield
    common.compute_per_token_logps.clear_cache()


def test_a_completion_that_stopped_gets_its_eos_and_a_mask_that_counts_it():
    stopped = with_stop_tokens([np.array([5, 6]), np.array([], dtype=np.int32), np.array([5, 6, 7, 8])], WIDTH, EOS)
    assert [t.tolist() for t in stopped] == [[5, 6, EOS], [EOS], [5, 6, 7, 8]]  # the last one ran out of tokens
    assert with_stop_tokens([np.array([5, EOS])], WIDTH, EOS)[0].tolist() == [5, EOS]  # an engine that kept it
    assert mask_from_lengths([3, 1, 4], WIDTH).astype(int).tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
    # Left padding is the leading run of pad ids; a pad-valued token inside the prompt is a token.
    prompts = jnp.asarray([[PAD, PAD, 1, 5, EOS, 7], [1, 5, EOS, 7, EOS, 9]])
    assert left_padding_mask(prompts, PAD).astype(int).tolist() == [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]


def _padded_batch_logps(model: Attention) -> tuple[np.ndarray, list[tuple[list[int], list[int]]]]:
    # Chat prompts: an end-of-turn token (== EOS == pad) inside each, then left padding to one width.
    rows = [([1, 5, EOS, 7, 9], [9, 4, EOS]), ([1, 6, EOS, 3], [3, EOS])]
    prompts = jnp.asarray([[PAD] * (5 - len(p)) + p for p, _ in rows])
    completions = jnp.asarray([c + [PAD] * (WIDTH - len(c)) for _, c in rows])
    graphdef, state = nnx.split(model)
    logps = common.compute_per_token_logps(graphdef, state, prompts, completions, pad_id=PAD, eos_id=EOS)
    return np.asarray(logps), rows


def test_log_probs_of_a_padded_batch_are_those_of_each_sequence_alone(installed):
    model = Attention(nnx.Rngs(0))
    logps, rows = _padded_batch_logps(model)
    for i, (prompt, completion) in enumerate(rows):
        np.testing.assert_allclose(logps[i, : len(completion)], alone_logps(model, prompt, completion), atol=1e-5)


def test_tunixs_own_masks_change_the_log_probs_when_the_prompt_holds_the_pad_id():
    """The defect the previous test guards against: without install(), the end-of-turn tokens are masked out."""
    common.compute_per_token_logps.clear_cache()
    model = Attention(nnx.Rngs(0))
    logps, rows = _padded_batch_logps(model)
    prompt, completion = rows[0]
    assert np.abs(logps[0, : len(completion)] - alone_logps(model, prompt, completion)).max() > 1e-3


def _all_empty_group(ours: bool) -> common.TrainExample:
    """Two completions that both stopped at once: Tunix's example (no EOS, mask from `!= pad`) or ours."""
    prompt = jnp.asarray([[1, 5, EOS, 7], [1, 5, EOS, 7]])
    if ours:
        tokens = with_stop_tokens([np.array([], np.int32)] * 2, WIDTH, EOS)
        completion = jnp.asarray([list(t) + [PAD] * (WIDTH - len(t)) for t in tokens])
        mask = jnp.asarray(mask_from_lengths([len(t) for t in tokens], WIDTH))
        prompt_mask = left_padding_mask(prompt, PAD)
    else:
        completion = jnp.full((2, WIDTH), PAD)
        mask, prompt_mask = completion != PAD, prompt != PAD
    return common.TrainExample(
        prompt_ids=prompt,
        prompt_mask=prompt_mask,
        completion_ids=completion,
        completion_mask=mask,
        advantages=jnp.zeros(2),
        ref_per_token_logps=None,
        old_per_token_logps=None,
    )


def _stop_at_once(model: Attention) -> float:
    """P(EOS as the first completion token) after the prompt."""
    ids = jnp.asarray([[1, 5, EOS, 7]])
    logits, _ = model(ids, jnp.arange(4)[None], None, jnp.tril(jnp.ones((1, 4, 4), bool)))
    return float(jax.nn.softmax(logits[0, -1])[EOS])


def _kl_step(ours: bool) -> tuple[float, float, float, float]:
    """A policy that drifted toward stopping, an all-empty group (zero advantages), one SGD step on Tunix's GRPO
    loss with the k3 penalty (beta 0.08). Returns loss, P(stop) of the reference, before and after."""
    reference, policy = Attention(nnx.Rngs(0)), Attention(nnx.Rngs(0))
    policy.out.bias[...] = policy.out.bias[...].at[EOS].add(3.0)
    example = _all_empty_group(ours)
    graphdef, state = nnx.split(reference)
    ref = common.compute_per_token_logps(graphdef, state, example.prompt_ids, example.completion_ids, pad_id=PAD, eos_id=EOS)
    example = example.replace(ref_per_token_logps=ref)
    config = grpo_learner.GRPOConfig(num_generations=2, beta=0.08, kl_loss_mode="low_var_kl")
    config.temperature = 1.0  # GRPOLearner sets it from the rollout config (grpo_learner.py)
    before = _stop_at_once(policy)
    loss, grads = nnx.value_and_grad(lambda m: grpo_loss_fn(m, example, config, PAD, EOS)[0])(policy)
    nnx.update(policy, jax.tree.map(lambda p, g: p - 1.0 * g, nnx.state(policy, nnx.Param), grads))
    return float(loss), _stop_at_once(reference), before, _stop_at_once(policy)


def test_an_all_empty_group_is_pulled_back_toward_the_reference(installed):
    loss, reference, before, after = _kl_step(ours=True)
    assert loss > 0 and before > reference
    assert after < before - 0.01, (reference, before, after)  # the KL term now restores: stopping is in the loss


def test_with_tunixs_own_masks_an_all_empty_group_has_no_loss_and_nothing_moves():
    """What stop_token.py fixes: the group drops out of the loss and the KL, so a collapse cannot be undone."""
    common.compute_per_token_logps.clear_cache()
    loss, _, before, after = _kl_step(ours=False)
    assert loss == 0.0 and after == pytest.approx(before, abs=1e-7)


# One learner step on grpo_learner_step.COMPLETIONS ([5, 6], [], [5, 6, 7, 8], [9], as Tunix's sampler returns them:
# without their EOS), with the stop token counted: each completion that stopped carries its EOS and its mask counts
# it, the one that ran out of tokens carries none, and the prompt's end-of-turn token (== pad) is attended.
E, P = grpo_learner_step.EOS, grpo_learner_step.PAD
STOP_TOKEN_COUNTED = {
    "completion_ids": [[5, 6, E, P], [E, P, P, P], [5, 6, 7, 8], [9, E, P, P]],
    "completion_mask": [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]],
    "prompt_mask": [[0, 1, 1, 1]] * 4,
}


def test_tunixs_learner_step_counts_the_stop_token_in_the_completion_mask(installed):
    step = learner_step()
    assert {name: step[name] for name in STOP_TOKEN_COUNTED} == STOP_TOKEN_COUNTED
    metrics = step["metrics"]
    assert (metrics["completions/empty_fraction"], metrics["completions/stopped_fraction"]) == (0.25, 0.75)


def test_tunixs_own_learner_step_leaves_the_stop_token_out_of_the_mask():
    """What the previous test guards against: Tunix's masks are `!= pad`, and its sampler drops the EOS."""
    step = learner_step()
    assert step["completion_mask"] == [[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert step["prompt_mask"] == [[0, 1, 1, 0]] * 4
    assert "completions/empty_fraction" not in step["metrics"]


def test_the_entry_shim_installs_the_stop_token_before_train_rl_runs():
    """train_rl_entry.main, every wrapper installed as in the train stage, with the learner step in train_rl's place."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "tests.trainer.grpo_learner_step"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith(STEP_LINE_PREFIX)]
    assert result.returncode == 0 and lines, result.stdout[-4000:] + result.stderr[-4000:]
    step = json.loads(lines[-1].removeprefix(STEP_LINE_PREFIX))
    assert step["module"] == "maxtext.trainers.post_train.rl.train_rl"
    assert {name: step[name] for name in STOP_TOKEN_COUNTED} == STOP_TOKEN_COUNTED
