"""An offline tiny Qwen3 dense checkpoint (`trainer make-tiny --family qwen3`): Qwen3's real tokenizer and
vocabulary, a randomly initialised 2-layer model of the tiny Llama's dimensions.

The tokenizer is the one the maxtext wheel ships (`assets/tokenizers/qwen3-tokenizer`: Qwen3's tokenizer.json and
tokenizer_config.json with its chat template), copied unchanged, so ids match the hub's Qwen3. The model keeps
what sets Qwen3 apart from Llama at the sizes MaxText's RL recipes use (1.7B, 4B): QK-norm, head_dim given
apart from hidden_size / heads, RoPE theta 5e6 (Qwen3-2507's) without scaling, RMSNorm epsilon 1e-6 and the logits head tied
to the embedding. Its vocabulary is Qwen3's (151936 rows, the tokenizer's 151669 ids padded as the released
checkpoints are), so a 64-wide model is ~10M parameters, almost all embedding: seconds to convert.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

QWEN3_VOCAB_SIZE = 151936
QWEN3_BOS, QWEN3_EOS, QWEN3_PAD = 151643, 151645, 151643  # <|endoftext|>, <|im_end|>, <|endoftext|>
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def qwen3_tokenizer_dir() -> Path:
    import maxtext

    return Path(maxtext.__file__).parent / "assets" / "tokenizers" / "qwen3-tokenizer"


def build_qwen3_tokenizer(out_dir: Path) -> None:
    for name in TOKENIZER_FILES:
        shutil.copyfile(qwen3_tokenizer_dir() / name, out_dir / name)


def build_tiny_qwen3(out_dir: Path, dims: Mapping[str, int], seed: int = 0) -> None:
    """`dims` under MaxText's keys (tiny.TINY_DIMS: the tiny Llama's)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=QWEN3_VOCAB_SIZE,
        hidden_size=dims["base_emb_dim"],
        intermediate_size=dims["base_mlp_dim"],
        num_hidden_layers=dims["base_num_decoder_layers"],
        num_attention_heads=dims["base_num_query_heads"],
        num_key_value_heads=dims["base_num_kv_heads"],
        head_dim=dims["head_dim"],
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        # Qwen3-2507's theta, not qwen3-0.6b's table value (1e6): the job's own override is what sets it in MaxText.
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0},
        tie_word_embeddings=True,
        bos_token_id=QWEN3_BOS,
        eos_token_id=QWEN3_EOS,
        pad_token_id=QWEN3_PAD,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():  # random QK-norm and layer-norm scales, so a conversion that drops or swaps them shows
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    model.save_pretrained(str(out_dir), safe_serialization=True)
