"""A Llama GGUF file's weights as Hugging Face Llama tensors, with numpy only (no torch).

The same arithmetic as transformers' GGUF reader (transformers/modeling_gguf_pytorch_utils.py:
load_gguf_checkpoint with return_tensors=True), which builds torch tensors and needs a torch model to name
them: gguf's own dequantisation (gguf.quants.dequantize, float32 out), then llama.cpp's Q/K row permutation
undone (LlamaTensorProcessor._reverse_permute_weights), then the GGUF names put back as HF's. So the result
is bit for bit what that reader gives (tests/trainer/offline/test_gguf_llama.py and test_slow_smollm2.py compare every
tensor), on a
machine whose Python has no torch wheel.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# GGUF tensor name (llama.cpp's gguf/tensor_mapping.py, LLAMA) -> HF LlamaForCausalLM state-dict name.
GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",  # only in untied files: a tied model's head is its embedding
}
BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"blk\.(\d+)\.([a-z_]+)\.weight")


class GgufUnfit(ValueError):
    """The GGUF file is not the Llama checkpoint its config describes; the message names what differs."""


@dataclass(frozen=True)
class LlamaShape:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> LlamaShape:
        return cls(**{name: config[name] for name in cls.__dataclass_fields__})

    def expected(self) -> dict[str, tuple[int, ...]]:
        """Every HF tensor name and its shape (rows, columns as torch's Linear stores them)."""
        head_dim, hidden, inner = self.head_dim, self.hidden_size, self.intermediate_size
        per_block = {
            "input_layernorm": (hidden,),
            "self_attn.q_proj": (self.num_attention_heads * head_dim, hidden),
            "self_attn.k_proj": (self.num_key_value_heads * head_dim, hidden),
            "self_attn.v_proj": (self.num_key_value_heads * head_dim, hidden),
            "self_attn.o_proj": (hidden, self.num_attention_heads * head_dim),
            "post_attention_layernorm": (hidden,),
            "mlp.gate_proj": (inner, hidden),
            "mlp.up_proj": (inner, hidden),
            "mlp.down_proj": (hidden, inner),
        }
        shapes = {"model.embed_tokens.weight": (self.vocab_size, hidden), "model.norm.weight": (hidden,)}
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, hidden)
        for block in range(self.num_hidden_layers):
            shapes.update({f"model.layers.{block}.{name}.weight": shape for name, shape in per_block.items()})
        return shapes


def hf_name(gguf_name: str) -> str | None:
    if gguf_name in GLOBAL_NAMES:
        return GLOBAL_NAMES[gguf_name]
    match = _BLOCK.fullmatch(gguf_name)
    if match is None or match[2] not in BLOCK_NAMES:
        return None
    return f"model.layers.{match[1]}.{BLOCK_NAMES[match[2]]}.weight"


def unpermute_rows(weights: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's convert_hf_to_gguf.py `permute`, which interleaves the two rotary halves of each head's
    rows for its RoPE kernel; the inverse is transformers' `_reverse_permute_weights`, step for step."""
    half = weights.shape[0] // n_head // 2
    return weights.reshape(n_head, half, 2, *weights.shape[1:]).swapaxes(2, 1).reshape(weights.shape)


def llama_tensors(path: Path, shape: LlamaShape) -> dict[str, np.ndarray]:
    """Every HF tensor of the Llama GGUF at `path`, float32, contiguous, checked against `shape`."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    tensors: dict[str, np.ndarray] = {}
    unknown = []
    for tensor in GGUFReader(path).tensors:
        name = hf_name(tensor.name)
        if name is None:
            unknown.append(tensor.name)
            continue
        weights = dequantize(tensor.data, tensor.tensor_type)
        if ".attn_q." in tensor.name:
            weights = unpermute_rows(weights, shape.num_attention_heads)
        elif ".attn_k." in tensor.name:
            weights = unpermute_rows(weights, shape.num_key_value_heads)
        tensors[name] = np.ascontiguousarray(weights, dtype=np.float32)
    expected = shape.expected()
    wrong = {n: (tuple(t.shape), expected.get(n)) for n, t in tensors.items() if tuple(t.shape) != expected.get(n)}
    missing = sorted(set(expected) - set(tensors))
    if unknown or wrong or missing:
        raise GgufUnfit(
            f"{path} does not hold the Llama weights its metadata describes: tensors with no HF name {unknown[:5]}, "
            f"missing {missing[:5]}, (found, expected) shapes {dict(list(wrong.items())[:5])}"
        )
    return tensors


@contextmanager
def gguf_metadata_without_torch() -> Iterator[None]:
    """Let transformers read a GGUF file's config and tokenizer where torch is not installed.

    Its reader refuses outright without torch (`is_gguf_available() and is_torch_available()`), yet only its
    tensor branch (return_tensors=True, not used here) touches torch; config and tokenizer are parsed from the
    GGUF fields by gguf and numpy. So for the metadata read, the refusal is lifted: the tokenizer and config
    are then exactly what transformers makes of the file, not a copy of its conversion code.
    """
    from transformers import modeling_gguf_pytorch_utils as reader

    refusal = reader.is_torch_available
    reader.is_torch_available = lambda: True
    try:
        yield
    finally:
        reader.is_torch_available = refusal
