"""The shape of a model (dimensions, vocabulary, tied embeddings): the one description both the fit estimate
(fit.py) and the MaxText settings every stage passes (hf_model.py renders them from it) read.

Also MaxText's own model table for the Llama-architecture and Qwen3 dense names (values copied from MaxText
0.2.5's `configs/models/<name>.yml`), which stands in when a job gives no readable config.json. Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The MaxText name every Llama-family checkpoint is converted and run under (hf_model.py says why).
LLAMA_MAXTEXT_BASE = "llama3.1-8b"
# MaxText's key for each dimension (`model.dims` in a spec uses the same keys), in MaxText's order.
MAXTEXT_DIM_KEYS = {
    "base_emb_dim": "emb_dim",
    "base_num_query_heads": "num_query_heads",
    "base_num_kv_heads": "num_kv_heads",
    "base_num_decoder_layers": "num_layers",
    "base_mlp_dim": "mlp_dim",
    "head_dim": "head_dim",
}


@dataclass(frozen=True)
class ModelShape:
    emb_dim: int
    num_query_heads: int
    num_kv_heads: int
    num_layers: int
    mlp_dim: int
    head_dim: int
    vocab_size: int
    tied_embeddings: bool = False
    qk_norm: bool = False  # Qwen3: an RMSNorm over each query and key head (head_dim weights each)
    source: str = "maxtext"  # where the shape came from, shown with the estimate

    @property
    def parameters(self) -> int:
        """Parameters of MaxText's dense decoders (`llama2` and `qwen3` blocks): no biases, SiLU-gated MLP."""
        e, q, kv, hd = self.emb_dim, self.num_query_heads, self.num_kv_heads, self.head_dim
        attention = e * q * hd + 2 * e * kv * hd + q * hd * e  # query, key, value, out
        mlp = 3 * e * self.mlp_dim  # wi_0, wi_1, wo
        norms = 2 * e + (2 * hd if self.qk_norm else 0)
        embeddings = self.vocab_size * e * (1 if self.tied_embeddings else 2)  # token embedding (+ logits head)
        return self.num_layers * (attention + mlp + norms) + embeddings + e  # + the final norm

    def maxtext_dims(self) -> dict[str, int]:
        """The six dimensions under MaxText's keys."""
        return {key: getattr(self, attr) for key, attr in MAXTEXT_DIM_KEYS.items()}


def _shape(e: int, q: int, kv: int, layers: int, mlp: int, vocab: int, name: str) -> ModelShape:
    return ModelShape(e, q, kv, layers, mlp, head_dim=128, vocab_size=vocab, source=f"maxtext {name}")


# MaxText 0.2.5 configs/models/*.yml for the Llama-architecture names (decoder_block llama2/mistral).
MAXTEXT_MODELS: dict[str, ModelShape] = {
    name: _shape(*dims, name=name)
    for name, dims in {
        "llama2-7b": (4096, 32, 32, 32, 11008, 32000),
        "llama2-13b": (5120, 40, 40, 40, 13824, 32000),
        "llama2-70b": (8192, 64, 8, 80, 28672, 32000),
        "llama3-8b": (4096, 32, 8, 32, 14336, 128256),
        "llama3-70b": (8192, 64, 8, 80, 28672, 128256),
        "llama3-405b": (16384, 128, 8, 126, 53248, 128256),
        "llama3.1-8b": (4096, 32, 8, 32, 14336, 128256),
        "llama3.1-70b": (8192, 64, 8, 80, 28672, 128256),
        "llama3.1-405b": (16384, 128, 8, 126, 53248, 128256),
        "llama3.3-70b": (8192, 64, 8, 80, 28672, 128256),
        "mistral-7b": (4096, 32, 8, 32, 14336, 32000),
    }.items()
}
# MaxText 0.2.5's Qwen3 dense names (decoder_block qwen3): head_dim 128, vocabulary 151936, QK-norm; the three
# smallest tie the logits head to the embedding (logits_via_embedding in their yml).
QWEN3_VOCAB = 151936
MAXTEXT_MODELS |= {
    name: ModelShape(e, q, kv, layers, mlp, 128, QWEN3_VOCAB, tied_embeddings=e <= 2560, qk_norm=True, source=f"maxtext {name}")
    for name, (e, q, kv, layers, mlp) in {
        "qwen3-0.6b": (1024, 16, 8, 28, 3072),
        "qwen3-1.7b": (2048, 16, 8, 28, 6144),
        "qwen3-1.7b-base": (2048, 16, 8, 28, 6144),
        "qwen3-4b": (2560, 32, 8, 36, 9728),
        "qwen3-4b-base": (2560, 32, 8, 36, 9728),
        "qwen3-4b-thinking-2507": (2560, 32, 8, 36, 9728),
        "qwen3-8b": (4096, 32, 8, 36, 12288),
        "qwen3-8b-base": (4096, 32, 8, 36, 12288),
        "qwen3-14b": (5120, 40, 8, 40, 17408),
        "qwen3-14b-base": (5120, 40, 8, 40, 17408),
        "qwen3-32b": (5120, 64, 8, 64, 25600),
    }.items()
}


def shape_from_dims(name: str | None, dims: Mapping[str, int]) -> ModelShape:
    """A spec's `model.dims` (MaxText's keys) as a shape; the vocabulary, tied embeddings and QK-norm, which dims
    do not give, are MaxText's for the named model, or its Llama base's when the name is not in the table."""
    named = MAXTEXT_MODELS.get(name or LLAMA_MAXTEXT_BASE, MAXTEXT_MODELS[LLAMA_MAXTEXT_BASE])
    return ModelShape(
        dims["base_emb_dim"],
        dims["base_num_query_heads"],
        dims["base_num_kv_heads"],
        dims["base_num_decoder_layers"],
        dims["base_mlp_dim"],
        dims["head_dim"],
        named.vocab_size,
        tied_embeddings=named.tied_embeddings,
        qk_norm=named.qk_norm,
        source="model.dims",
    )
