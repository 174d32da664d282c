"""The jax rollout prefills each distinct prompt once and copies its KV cache to the prompt's repeats
(GRPO's generations): the completions must be the ones prefilling every row gives, sampled and greedy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import REPO, TINY_EXAMPLE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def result(tiny_dir):
    from trainer.contract.spec.file import load_spec_file
    from trainer.sources import resolve_model

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("RLJOB_TINY_DIR", str(tiny_dir))
        monkeypatch.setenv("RLJOB_OUTPUT", str(tiny_dir / "runs"))
        model = resolve_model(load_spec_file(TINY_EXAMPLE))
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("shared_prefill_check.py")), str(tiny_dir / "model"), *model.args()],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_shared_prefill_samples_what_prefilling_every_row_samples(result):
    for mode in ("sampled", "greedy"):
        # Two distinct prompts among five rows: the prefill ran over two rows, or over all five without sharing.
        assert result[f"{mode}_shared_prefill_batches"] == [2], result
        assert result[f"{mode}_every_row_prefill_batches"] == [5], result
        assert result[f"{mode}_shared"] == result[f"{mode}_every_row"], result
        assert all(len(row) == 12 for row in result[f"{mode}_shared"]), result
    # Sampling still draws each repeat on its own: copies of one prompt do not all sample the same tokens.
    assert len({tuple(row) for row in result["sampled_shared"][:3]}) > 1, result
    # Tunix's weight-sharing check answers (train_rl then needs no sync), and after an optimizer step the
    # same rollout samples from the new weights: what a rollout built on them samples, not what it did before.
    assert result["shares_weights"] is True
    assert result["update_after"] == result["update_rebuilt"] != result["update_before"], result


def test_each_step_samples_with_a_key_of_its_own(result):
    # Issue 53: with Tunix's unset seed every step drew PRNGKey(0), so one prompt sampled the same rows at every step.
    first, second = result["two_steps"]
    assert first != second, result["two_steps"]


def test_the_first_token_drawn_once_a_step_follows_the_softmax(result):
    # One row a step over `draws` steps: with one key for every step each draw is the same token. The bound is 4.5
    # binomial standard deviations (two-sided chance about 7e-6 a token) plus 0.01 for the softmax the engine computes
    # in its own precision.
    draws = result["draws"]
    assert result["distinct_first_tokens"] > 1, result
    for p, freq in zip(result["top_probs"], result["top_freqs"], strict=True):
        assert abs(freq - p) <= 4.5 * (p * (1 - p) / draws) ** 0.5 + 0.01, result
    assert 0.3 <= result["top_probs"][0] <= 0.7, result  # the temperature search found a peaked, not degenerate, softmax
