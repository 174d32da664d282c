"""The config.json fields every supported family reads alike (dimensions, RoPE theta, RMSNorm epsilon), the
refusal they raise, and what a config says beside the model's shape (`DecoderSettings`).

One reader per family (llama_config.py, qwen3_config.py) checks what is particular to it and calls these.
Pure: dicts in, values or `UnsupportedCheckpoint` out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .model_shapes import ModelShape


class UnsupportedCheckpoint(ValueError):
    """The checkpoint cannot be represented in MaxText; `field` names where the problem is."""

    def __init__(self, field: str, reason: str):
        self.field, self.reason = field, reason
        super().__init__(f"{field}: {reason}")

    def spec_problem(self) -> tuple[str, str]:
        """(field, reason) for a spec problem report: config.json fields are reported under model.source."""
        if self.field.startswith("model."):
            return self.field, self.reason
        return "model.source", f"config.json {self.field} {self.reason}"


@dataclass(frozen=True)
class DecoderSettings:
    """What a config.json tells MaxText beside the model's shape."""

    norm_epsilon: float  # rms_norm_eps
    rope_theta: int
    # Llama 3.1's llama3 RoPE frequency scaling (MaxText's llama3.1 rotary embedding, its only scaling); None for
    # a family whose decoder has no such switch (Qwen3's plain rotary embedding).
    rope_use_scale: bool | None = None


def positive_int(hf: dict[str, Any], key: str) -> int:
    value = hf.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UnsupportedCheckpoint(key, f"must be a positive integer, got {value!r}")
    return value


def rope(hf: dict[str, Any]) -> tuple[float, dict[str, Any] | None, str]:
    """(theta, scaling, the field scaling came from) from transformers 5's `rope_parameters` or the older two fields."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        return float(params["rope_theta"]), scaling, "rope_parameters"
    return float(hf.get("rope_theta", 10000.0)), hf.get("rope_scaling"), "rope_scaling"


def rope_kind(scaling: dict[str, Any] | None) -> str:
    if not scaling:
        return "default"
    return str(scaling.get("rope_type") or scaling.get("type") or "default")


def rope_theta(theta: float) -> int:
    if not math.isfinite(theta) or theta <= 1 or theta != int(theta):
        raise UnsupportedCheckpoint("rope_theta", f"{theta} must be an integer > 1 (MaxText's rope_max_timescale)")
    return int(theta)


def norm_epsilon(hf: dict[str, Any], default: float) -> float:
    eps = hf.get("rms_norm_eps", default)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps < 1:
        raise UnsupportedCheckpoint("rms_norm_eps", f"{eps!r} must be between 0 and 1")
    return float(eps)


def silu_gated(hf: dict[str, Any], family: str) -> None:
    if (act := hf.get("hidden_act", "silu")) != "silu":
        raise UnsupportedCheckpoint("hidden_act", f"is {act!r}; MaxText's {family} MLP is SiLU-gated")


def decoder_shape(hf: dict[str, Any], *, qk_norm: bool, default_head_dim: int | None = None) -> ModelShape:
    """The dimensions, vocabulary and tied embeddings of a dense decoder's config.json. Without `head_dim` it is
    `default_head_dim` where the family's transformers config has one (Qwen3: 128), else hidden / heads (Llama)."""
    hidden = positive_int(hf, "hidden_size")
    heads = positive_int(hf, "num_attention_heads")
    kv_heads = hf.get("num_key_value_heads") or heads
    if not isinstance(kv_heads, int) or kv_heads <= 0 or heads % kv_heads:
        raise UnsupportedCheckpoint("num_key_value_heads", f"{kv_heads!r} must divide num_attention_heads={heads}")
    head_dim = hf.get("head_dim") or default_head_dim or hidden // heads
    if not hf.get("head_dim") and not default_head_dim and hidden % heads:
        raise UnsupportedCheckpoint("hidden_size", f"{hidden} is not a multiple of num_attention_heads={heads}")
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim <= 0:
        raise UnsupportedCheckpoint("head_dim", f"must be a positive integer, got {head_dim!r}")
    if head_dim % 2:
        raise UnsupportedCheckpoint("head_dim", f"{head_dim} is odd; rotary embeddings need an even head_dim")
    return ModelShape(
        hidden,
        heads,
        kv_heads,
        positive_int(hf, "num_hidden_layers"),
        positive_int(hf, "intermediate_size"),
        head_dim,
        positive_int(hf, "vocab_size"),
        tied_embeddings=bool(hf.get("tie_word_embeddings", False)),
        qk_norm=qk_norm,
        source="config.json",
    )
