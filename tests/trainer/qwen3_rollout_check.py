"""Run as a subprocess: the jax rollout engine on a tiny random Qwen3 against MaxText's own qwen3 forward.

`python qwen3_rollout_check.py` builds MaxText's qwen3 model in-process (qwen3-0.6b's table shrunk to two
layers, fp32, tied embeddings as the small Qwen3 sizes have) with random weights, the QK-norm and layer norm
scales drawn away from MaxText's all-ones init (so a norm applied to the wrong tensor, or not at all, shows).
Then the engine (`CachedLlamaLM`) generates greedily from two left-padded prompts of different lengths, one
prefill and then one token per decode step into its KV cache, and MaxText's forward runs over each whole
sequence (prompt and generated tokens). Prints one JSON line: the largest logit difference over every prefill
and decode position, the logit scale, and whether MaxText's argmax at each position is the token the engine
chose (greedy decoding token for token).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: its sibling helpers

from maxtext_parity_check import FP32_FORWARD

os.environ.setdefault("JAX_PLATFORMS", "cpu")

PROMPTS = [[5, 17, 200, 3, 99, 41, 7, 120, 64, 8, 250, 31], [77, 2, 180, 45, 0, 9]]  # 0 is also the pad id
NEW_TOKENS = 8
VOCAB = 256
OUT_GAIN = 8.0


def build():
    import jax
    from flax import nnx
    from maxtext.configs import pyconfig
    from maxtext.utils import model_creation_utils

    from trainer.stages.maxtext_paths import base_config

    longest = max(len(p) for p in PROMPTS) + NEW_TOKENS
    config = pyconfig.initialize(
        [
            "",
            base_config(),
            "model_name=qwen3-0.6b",
            "override_model_config=true",
            "base_emb_dim=64",
            "base_num_query_heads=4",
            "base_num_kv_heads=2",
            "base_mlp_dim=96",
            "base_num_decoder_layers=2",
            "head_dim=16",
            f"vocab_size={VOCAB}",
            *FP32_FORWARD,
            f"max_target_length={longest}",
            "max_prefill_predict_length=8",
            "run_name=qwen3-rollout-check",
            f"base_output_directory={os.environ.get('TMPDIR', '/tmp')}/qwen3-rollout-check",
        ]
    )
    model, mesh = model_creation_utils.from_pretrained(config)
    params = nnx.state(model, nnx.Param)
    leaves, tree = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(params))
    keys = jax.random.split(jax.random.key(7), len(leaves))
    drawn = [_draw(jax.tree_util.keystr(path), value, key) for (path, value), key in zip(leaves, keys, strict=True)]
    nnx.replace_by_pure_dict(params, jax.tree_util.tree_unflatten(tree, drawn))
    nnx.update(model, params)
    return model, mesh


def _draw(path: str, value, key):
    """Norm scales around 1 instead of all ones; the layers' output projections larger than MaxText's init,
    so the residual stream is not dominated by the token's own embedding (a tied random model otherwise
    greedily repeats its last input token, whatever its attention computes)."""
    import jax

    if "norm" in path:
        return value * (1.0 + 0.5 * jax.random.normal(key, value.shape, value.dtype))
    if "'out'" in path or "'wo'" in path:
        return value * OUT_GAIN
    return value


def main() -> None:
    import jax.numpy as jnp
    import numpy as np

    from trainer.rollout import few_rows_matmul
    from trainer.rollout.cached_llama import build_cached_llama

    kernel_calls: list[int] = []
    native = few_rows_matmul.kernel

    def counted(*args, **kwargs):
        kernel_calls.append(1)
        return native(*args, **kwargs)

    few_rows_matmul.kernel = counted  # the engine's decode steps run eagerly here: one call per product

    model, mesh = build()
    cached = build_cached_llama(model)
    pad, rows, width = 0, len(PROMPTS), max(len(p) for p in PROMPTS)
    size = width + NEW_TOKENS
    buf = np.full((rows, width), pad, np.int32)
    positions = np.zeros((rows, width), np.int32)
    real = np.ones((rows, size), bool)  # which cache slots hold a real token (left padding is masked)
    for row, ids in enumerate(PROMPTS):
        buf[row, width - len(ids) :] = ids
        positions[row, width - len(ids) :] = np.arange(len(ids))
        real[row, : width - len(ids)] = False
    with mesh:
        cache = cached.init_cache(rows, size, jnp.float32)
        mask = np.zeros((rows, width, size), bool)
        mask[:, :, :width] = np.tril(np.ones((width, width), bool)) & real[:, None, :width]
        logits, cache = cached(jnp.asarray(buf), jnp.asarray(positions), cache, jnp.asarray(mask))
        got = [np.asarray(logits, np.float32)]
        generated = np.zeros((rows, 0), np.int32)
        for step in range(NEW_TOKENS):
            token = got[-1][:, -1].argmax(-1).astype(np.int32)[:, None]
            generated = np.concatenate([generated, token], axis=1)
            if step == NEW_TOKENS - 1:
                break
            step_mask = real[:, None, :].copy()
            step_mask[:, :, width + step + 1 :] = False
            pos = np.array([[len(p) + step] for p in PROMPTS], np.int32)
            before = len(kernel_calls)
            logits, cache = cached(jnp.asarray(token), jnp.asarray(pos), cache, jnp.asarray(step_mask))
            got.append(np.asarray(logits, np.float32))
            decode_kernel_calls = len(kernel_calls) - before
        mine_all = np.concatenate(got, axis=1)  # [rows, width + NEW_TOKENS - 1, vocab]
        worst, scale, agree = 0.0, 0.0, True
        for row, ids in enumerate(PROMPTS):
            seq = list(ids) + generated[row].tolist()
            tokens = jnp.asarray([seq], jnp.int32)
            reference = np.asarray(
                model(
                    decoder_input_tokens=tokens,
                    decoder_positions=jnp.arange(len(seq), dtype=jnp.int32)[None],
                    decoder_segment_ids=jnp.ones_like(tokens),
                ),
                np.float32,
            )[0, :-1]  # the last token's logits were not needed: nothing is generated after it
            mine = mine_all[row, width - len(ids) :]
            worst = max(worst, float(np.max(np.abs(mine - reference))))
            scale = max(scale, float(np.max(np.abs(reference))))
            # Greedy token for token: MaxText's argmax after each prefix is the token the engine generated.
            agree = agree and bool((reference[len(ids) - 1 :].argmax(-1) == generated[row]).all())
            agree = agree and bool((mine.argmax(-1) == reference.argmax(-1)).all())
    print(
        json.dumps(
            {
                "max_abs_diff": worst,
                "logit_scale": scale,
                "argmax_agree": agree,
                "generated": generated.tolist(),
                "family": cached.shape.family,
                "layers": cached.shape.num_layers,
                "decode_kernel_calls": decode_kernel_calls,
                "tied": cached.shape.tied,
            }
        )
    )


if __name__ == "__main__":
    main()
