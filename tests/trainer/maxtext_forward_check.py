"""Run as a subprocess by the round-trip test: MaxText's forward on a converted checkpoint vs HF's.

`python maxtext_forward_check.py HF_DIR MAXTEXT_ITEMS OVERRIDE...` prints one JSON line with the
largest absolute logit difference (fp32 on both sides). For a tied model it also gives the difference
after the HF side rounds the embedding to bf16 for the output projection, as MaxText 0.2.5 does
(layers/embeddings.py:attend_on_embedding). A separate process because MaxText/JAX state must not
leak into the pytest process.
"""

import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main() -> None:
    hf_dir, items, *overrides = sys.argv[1:]
    import jax.numpy as jnp
    import numpy as np
    import torch
    from maxtext.configs import pyconfig
    from maxtext.utils import model_creation_utils
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.stages.maxtext_paths import base_config

    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    ids = tokenizer("Ada has 3 apples and gets 4 more. How many apples does Ada have now?")["input_ids"]
    length = len(ids)
    config = pyconfig.initialize(
        [
            "",
            base_config(),
            "model_name=llama3.1-8b",
            f"load_parameters_path={items}",
            "scan_layers=true",
            "weight_dtype=float32",
            "dtype=float32",
            "matmul_precision=highest",
            "attention=dot_product",
            "skip_jax_distributed_system=true",
            "checkpoint_storage_use_ocdbt=false",
            "checkpoint_storage_use_zarr3=false",
            "enable_checkpointing=false",
            "per_device_batch_size=1",
            f"max_target_length={length}",
            "max_prefill_predict_length=8",
            "run_name=forward-check",
            f"base_output_directory={os.environ.get('TMPDIR', '/tmp')}/forward-check",
            *overrides,
        ]
    )
    model, mesh = model_creation_utils.from_pretrained(config)
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
    result = {"max_abs_diff": float(np.max(np.abs(mt - hf_logits))), "logit_scale": float(np.max(np.abs(hf_logits))),
              "tokens": length}  # fmt: skip
    if hf.config.tie_word_embeddings:
        table = hf.model.embed_tokens.weight.to(torch.bfloat16).to(torch.float32)
        with torch.no_grad():
            rounded = (out.hidden_states[-1] @ table.T).numpy()
        result["max_abs_diff_bf16_tied_table"] = float(np.max(np.abs(mt - rounded)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
