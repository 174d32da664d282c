"""The JAX evaluation engine (trainer/evals/jax_model.py, jax_sampler.py), checked against transformers' torch models
on the same checkpoints: logits after a prefill and through the KV cache, for Llama (Llama 3.1's RoPE scaling, left
padding) and Qwen3 (its query/key norms, tied logits); its top-k sampling against the distribution it draws from; the
checkpoints it refuses; and the export check on a host without torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.trainer.conftest import REPO
from trainer.evals.jax_model import UnsupportedCheckpoint, read_shape, rope_inv_freq
from trainer.evals.jax_sampler import JaxModel, pick_tokens

pytestmark = pytest.mark.slow

SMALL = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4}


def _save_random(kind: str, out: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    if kind == "llama":
        config = LlamaConfig(
            **SMALL,
            num_key_value_heads=2,
            head_dim=8,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,  # short, so the test's positions reach every band
            },
            rope_theta=10000.0,
            tie_word_embeddings=False,
        )
        model = LlamaForCausalLM(config)
    else:
        config = Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=16, rope_theta=1e6, tie_word_embeddings=True)
        model = Qwen3ForCausalLM(config)
        with torch.no_grad():  # random norm scales, so dropping or swapping one shows
            for name, param in model.named_parameters():
                if name.endswith("norm.weight"):
                    param.uniform_(0.5, 1.5)
    model.save_pretrained(str(out))
    return out


def _torch_logits(model_dir: Path, ids: list[int]) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].numpy()


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_logits_agree_with_transformers_through_prefill_padding_and_cache(kind, tmp_path):
    model_dir = _save_random(kind, tmp_path / kind)
    model = JaxModel(model_dir)
    rng = np.random.default_rng(1)
    prompts = [list(rng.integers(0, 96, n)) for n in (5, 11, 24)]
    follow = [list(rng.integers(0, 96, 4)) for _ in prompts]  # fed one at a time through the cache
    width, rows = 32, len(prompts)
    tokens = np.zeros((rows, width), np.int32)
    valid = np.zeros((rows, width + 4), bool)
    for row, ids in enumerate(prompts):
        tokens[row, width - len(ids) :] = ids
        valid[row, width - len(ids) : width] = True
    positions = np.clip(np.cumsum(valid[:, :width], axis=1) - 1, 0, None)
    cache_k, cache_v = model.empty_cache(rows, width + 4)
    logits, cache_k, cache_v = model(tokens, positions, cache_k, cache_v, 0, valid)
    got = [np.asarray(logits)]
    position = positions[:, -1] + 1
    for step in range(3):
        valid[:, width + step] = True
        fed = np.array([[f[step]] for f in follow], np.int32)
        logits, cache_k, cache_v = model(fed, position[:, None], cache_k, cache_v, width + step, valid)
        got.append(np.asarray(logits))
        position = position + 1
    for row, ids in enumerate(prompts):
        reference = _torch_logits(model_dir, ids + follow[row][:3])
        for step in range(4):
            want = reference[len(ids) - 1 + step]
            np.testing.assert_allclose(got[step][row], want, atol=2e-5 * max(1.0, np.abs(want).max()), err_msg=f"row {row} step {step}")


def test_rope_frequencies_equal_transformers_for_each_type():
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaled = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    for rope_scaling in (None, scaled):
        config = LlamaConfig(hidden_size=256, num_attention_heads=2, rope_theta=500000.0, rope_scaling=rope_scaling)
        kind = (rope_scaling or {}).get("rope_type", "default")
        if kind == "default":
            want = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, dtype=torch.int64).float() / 128))
        else:
            want, _ = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
        np.testing.assert_allclose(rope_inv_freq(config.to_dict(), 128), want.numpy(), rtol=1e-6)


def test_top_k_sampling_draws_from_the_top_k_softmax():
    import jax

    logits = np.array([[2.0, 1.0, 0.5, 0.0, -1.0, 3.0]], np.float32)
    draws = 4000
    keys = np.stack([np.array([0, i], np.uint32) for i in range(draws)])
    chosen = np.asarray(jax.vmap(lambda k: pick_tokens(logits, k[None], np.int32(0), np.float32(0.7), top_k=3, greedy=False)[0])(keys))
    top = np.array([5, 0, 1])
    probs = np.exp(logits[0, top] / 0.7) / np.exp(logits[0, top] / 0.7).sum()
    counts = np.array([(chosen == t).sum() for t in top])
    assert counts.sum() == draws  # nothing outside the top 3
    assert np.all(np.abs(counts / draws - probs) < 4 * np.sqrt(probs * (1 - probs) / draws)), (counts / draws, probs)
    greedy = pick_tokens(logits, keys[:1], np.int32(0), np.float32(0.7), top_k=3, greedy=True)
    assert int(greedy[0]) == 5
    # A row's draw depends on its key and the step only.
    again = pick_tokens(np.repeat(logits, 2, 0), keys[[7, 3]], np.int32(0), np.float32(0.7), top_k=3, greedy=False)
    assert [int(t) for t in again] == [int(chosen[7]), int(chosen[3])]


@pytest.mark.parametrize(
    "change, named",
    [
        ({"model_type": "gemma"}, "model_type 'gemma'"),
        ({"attention_bias": True}, "attention_bias"),
        ({"hidden_act": "gelu"}, "gelu"),
        ({"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 1}, "use_sliding_window"),
    ],
)
def test_what_it_does_not_compute_is_refused_by_name(change, named):
    config = {"model_type": "llama", **SMALL, "num_key_value_heads": 2}
    with pytest.raises(UnsupportedCheckpoint, match=named):
        read_shape({**config, **change})
    # Qwen3's configs carry use_sliding_window with max_window_layers covering every layer: no layer slides.
    assert read_shape({**config, "use_sliding_window": True, "sliding_window": 64, "max_window_layers": 2}).num_layers == 2
    with pytest.raises(UnsupportedCheckpoint, match="yarn"):
        rope_inv_freq({"rope_theta": 1e4, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, 8)


def _check(*args: str, hide_torch: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", JAX_PLATFORMS="cpu")
    prefix = [sys.executable, "-m", "harness.no_torch"] if hide_torch else [sys.executable, "-m"]
    return subprocess.run([*prefix, "trainer.checks.verify_export", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=200)


def test_the_export_check_loads_and_generates_without_torch(tiny_dir: Path, tmp_path: Path):
    from safetensors.torch import load_file, save_file

    good = tiny_dir / "model"
    jax_check = _check("--engine", "jax", str(good), hide_torch=True)
    assert jax_check.returncode == 0, jax_check.stderr[-2000:]
    torch_check = _check("--engine", "transformers", str(good), hide_torch=False)
    assert torch_check.returncode == 0, torch_check.stderr[-2000:]
    jax_out, torch_out = json.loads(jax_check.stdout), json.loads(torch_check.stdout)
    same = ("architecture", "num_parameters", "logits_shape", "finite", "generated")
    assert {k: jax_out[k] for k in same} == {k: torch_out[k] for k in same} and jax_out["generated"]
    # The blocker bites: the torch check cannot run where torch is hidden.
    hidden = _check("--engine", "transformers", str(good), hide_torch=True)
    assert hidden.returncode != 0 and "ModuleNotFoundError" in hidden.stderr and "torch" in hidden.stderr.splitlines()[-1]
    nan = shutil.copytree(good, tmp_path / "nan")
    tensors = load_file(nan / "model.safetensors")
    save_file(
        {k: t.fill_(float("nan")) if "embed_tokens" in k else t for k, t in tensors.items()},
        nan / "model.safetensors",
        metadata={"format": "pt"},
    )
    broken = _check("--engine", "jax", str(nan), hide_torch=True)
    assert broken.returncode == 1 and json.loads(broken.stdout)["finite"] is False, broken.stderr[-2000:]
