"""The shape of the model a job trains (dimensions, vocabulary, tied embeddings), for the fit check.

Where it comes from, first found wins, in the order the trainer itself trusts them (hf_model.py): the
checkpoint's own `config.json` when it is a local directory this process can read; else `model.dims`
(the vocabulary then from the named model, or MaxText's Llama base); else MaxText's model table for
`model.name` (values copied from MaxText 0.2.5's `configs/models/<name>.yml`). A hub id or gs:// source
is not fetched at submit: its named model or dims stand in, as when `trainer plan` runs offline.

Pure but for `read_local_model_config`, which reads one small JSON file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.contract.locations import local_path, location_kind

from .hf_model import LLAMA_MAXTEXT_BASE, UnsupportedCheckpoint, llama_overrides

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KB; anything larger is not one


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
    source: str = "maxtext"  # where the shape came from, shown with the estimate

    @property
    def parameters(self) -> int:
        """Parameters of MaxText's Llama decoder (`llama2` block): no biases, SiLU-gated MLP."""
        e, q, kv, hd = self.emb_dim, self.num_query_heads, self.num_kv_heads, self.head_dim
        attention = e * q * hd + 2 * e * kv * hd + q * hd * e  # query, key, value, out
        mlp = 3 * e * self.mlp_dim  # wi_0, wi_1, wo
        norms = 2 * e
        embeddings = self.vocab_size * e * (1 if self.tied_embeddings else 2)  # token embedding (+ logits head)
        return self.num_layers * (attention + mlp + norms) + embeddings + e  # + the final norm


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


def read_local_model_config(source: str) -> dict[str, Any] | None:
    """`<source>/config.json` when `source` is a local directory holding a readable one, else None."""
    if location_kind(source) != "local":
        return None
    path = Path(local_path(source)) / "config.json"
    try:
        if not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # unreadable here: the named model or dims stand in; the trainer reads it again
    return data if isinstance(data, dict) else None


def model_shape(
    name: str | None, dims: dict[str, int] | None, hf_config: dict[str, Any] | None
) -> ModelShape | None:
    """The shape of a spec's model, or None when nothing says it (an unknown name, no dims, no config)."""
    if hf_config is not None and hf_config.get("model_type") == "llama":
        try:
            o = llama_overrides(hf_config)
        except UnsupportedCheckpoint:
            o = None  # the trainer refuses it with the reason; the estimate falls back to dims or the name
        if o is not None:
            return ModelShape(
                int(o["base_emb_dim"]), int(o["base_num_query_heads"]), int(o["base_num_kv_heads"]),
                int(o["base_num_decoder_layers"]), int(o["base_mlp_dim"]), int(o["head_dim"]),
                int(o["vocab_size"]), tied_embeddings=o["logits_via_embedding"] == "true", source="config.json",
            )  # fmt: skip
    named = MAXTEXT_MODELS.get(name or LLAMA_MAXTEXT_BASE) if dims or name else None
    if dims:
        vocab = (named or MAXTEXT_MODELS[LLAMA_MAXTEXT_BASE]).vocab_size
        return ModelShape(
            dims["base_emb_dim"], dims["base_num_query_heads"], dims["base_num_kv_heads"],
            dims["base_num_decoder_layers"], dims["base_mlp_dim"], dims["head_dim"], vocab, source="model.dims",
        )  # fmt: skip
    return named
