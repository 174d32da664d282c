"""Run as a subprocess by the round-trip tests: two parity checks on one converted checkpoint, one process.

`python maxtext_parity_check.py HF_DIR MAXTEXT_ITEMS OVERRIDE...` builds MaxText's model (fp32) once and
prints one JSON line with two results:

- `hf_forward`: MaxText's forward vs the Hugging Face model's, the largest absolute logit difference (fp32
  on both sides). For a tied model also the difference after the HF side rounds the embedding to bf16 for
  the output projection, as MaxText 0.2.5 does (layers/embeddings.py:attend_on_embedding).
- `cached_rollout`: the jax rollout engine's KV-cached forward (`CachedLlamaLM`) vs MaxText's own: two
  left-padded prompts fed the way Tunix's sampler does (one prefill, then one token at a time into the
  cache), every position's logits compared with MaxText's full forward of each unpadded sequence.

One process for both because each start pays for importing MaxText, JAX and torch and for building the
model (most of a check's time on CPU); a separate process from pytest because MaxText/JAX state must not
leak into the pytest process.
"""

import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

# MaxText's forward at full fp32 precision, as every parity check here runs it (with each its model, lengths and paths).
FP32_FORWARD = (
    "scan_layers=true",
    "weight_dtype=float32",
    "dtype=float32",
    "matmul_precision=highest",
    "attention=dot_product",
    "skip_jax_distributed_system=true",
    "enable_checkpointing=false",
    "per_device_batch_size=1",
)
# Reading the convert stage's items (written without OCDBT or zarr3).
ITEMS_READ = ("checkpoint_storage_use_ocdbt=false", "checkpoint_storage_use_zarr3=false")
TEXTS = ["Ada has 3 apples and gets 4 more. How many apples does Ada have now?", "Two plus two is"]


def hf_forward(model, mesh, hf_dir: str, ids: list[int]) -> dict:
    import jax.numpy as jnp
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    length = len(ids)
    tokens = jnp.asarray([ids], dtype=jnp.int32)
    with mesh:
        mt_logits = model(
            decoder_input_tokens=tokens,
            decoder_positions=jnp.arange(length, dtype=jnp.int32)[None, :],
            decoder_segment_ids=jnp.ones_like(tokens),
        )
    hf = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    with torch.no_grad():
        out = hf(torch.tensor([ids]), output_hidden_states=True)
    hf_logits = out.logits.numpy()
    mt = np.asarray(mt_logits, dtype=np.float32)
    result = {"max_abs_diff": float(np.max(np.abs(mt - hf_logits))), "logit_scale": float(np.max(np.abs(hf_logits))), "tokens": length}
    if hf.config.tie_word_embeddings:
        table = hf.model.embed_tokens.weight.to(torch.bfloat16).to(torch.float32)
        with torch.no_grad():
            rounded = (out.hidden_states[-1] @ table.T).numpy()
        result["max_abs_diff_bf16_tied_table"] = float(np.max(np.abs(mt - rounded)))
    return result


def cached_rollout(model, mesh, seqs: list[list[int]], pad: int) -> dict:
    import jax.numpy as jnp
    import numpy as np

    from trainer.rollout.cached_llama import build_cached_llama

    cached = build_cached_llama(model)
    longest = max(len(s) for s in seqs)
    prefill = max(1, min(len(s) for s in seqs) // 2)  # prompt part; the rest is fed one token per decode step
    worst, scale, agree = 0.0, 0.0, True
    with mesh:
        reference = []
        for ids in seqs:
            tokens = jnp.asarray([ids], jnp.int32)
            reference.append(
                np.asarray(
                    model(
                        decoder_input_tokens=tokens,
                        decoder_positions=jnp.arange(len(ids), dtype=jnp.int32)[None],
                        decoder_segment_ids=jnp.ones_like(tokens),
                    ),
                    np.float32,
                )[0]
            )
        # Left-pad every prompt to `prefill + pads`; pads are masked and take no position, as in Tunix.
        width = longest
        buf = np.full((len(seqs), width), pad, np.int32)
        positions = np.zeros((len(seqs), width), np.int32)
        for row, ids in enumerate(seqs):
            buf[row, width - len(ids) :] = ids
            positions[row, width - len(ids) :] = np.arange(len(ids))
        real = buf != pad
        for row, ids in enumerate(seqs):  # a real token equal to the pad id must not be masked
            real[row, width - len(ids) :] = True
        cache = cached.init_cache(len(seqs), width + 4, jnp.float32)
        split = width - len(seqs[-1]) + prefill  # the shorter prompt keeps `prefill` real tokens in the prefill
        causal = np.tril(np.ones((split, split), bool)) & real[:, None, :split]
        mask = np.zeros((len(seqs), split, width + 4), bool)
        mask[:, :, :split] = causal
        logits, cache = cached(jnp.asarray(buf[:, :split]), jnp.asarray(positions[:, :split]), cache, jnp.asarray(mask))
        got = [np.asarray(logits, np.float32)]
        for t in range(split, width):
            step_mask = np.zeros((len(seqs), 1, width + 4), bool)
            step_mask[:, 0, : t + 1] = real[:, : t + 1]
            logits, cache = cached(jnp.asarray(buf[:, t : t + 1]), jnp.asarray(positions[:, t : t + 1]), cache, jnp.asarray(step_mask))
            got.append(np.asarray(logits, np.float32))
        got = np.concatenate(got, axis=1)
        for row, ids in enumerate(seqs):
            mine = got[row, width - len(ids) :]
            diff = float(np.max(np.abs(mine - reference[row])))
            worst, scale = max(worst, diff), max(scale, float(np.max(np.abs(reference[row]))))
            agree = agree and bool((mine.argmax(-1) == reference[row].argmax(-1)).all())
    return {"max_abs_diff": worst, "logit_scale": scale, "argmax_agree": agree, "positions": [len(s) for s in seqs]}


def main() -> None:
    hf_dir, items, *overrides = sys.argv[1:]
    from maxtext.configs import pyconfig
    from maxtext.utils import model_creation_utils
    from transformers import AutoTokenizer

    from trainer.stages.maxtext_paths import base_config

    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    seqs = [tokenizer(t)["input_ids"] for t in TEXTS]
    config = pyconfig.initialize(
        [
            "",
            base_config(),
            "model_name=llama3.1-8b",
            f"load_parameters_path={items}",
            *FP32_FORWARD,
            *ITEMS_READ,
            f"max_target_length={max(len(s) for s in seqs)}",
            "max_prefill_predict_length=8",
            "run_name=parity-check",
            f"base_output_directory={os.environ.get('TMPDIR', '/tmp')}/parity-check",
            *overrides,
        ]
    )
    model, mesh = model_creation_utils.from_pretrained(config)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    print(json.dumps({"hf_forward": hf_forward(model, mesh, hf_dir, seqs[0]), "cached_rollout": cached_rollout(model, mesh, seqs, pad)}))


if __name__ == "__main__":
    main()
