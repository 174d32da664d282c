"""A Llama-family `config.json` (model_type "llama") as MaxText 0.2.5 runs it.

MaxText converts Llama checkpoints only under its `llama3.1-*` names (one weight mapping for all of them) and
runs them with the `llama2` decoder block. Everything that differs between one Llama-family checkpoint and
another is a config value: dimensions, vocabulary, RoPE theta, whether Llama 3.1's RoPE frequency scaling
applies (`rope_use_scale`), RMSNorm epsilon and tied embeddings (`logits_via_embedding`). So any Llama-family
checkpoint is the `llama3.1-8b` architecture with these values, and one whose config asks for something
MaxText does not implement is refused, naming the config field and the reason. Pure.
"""

from __future__ import annotations

from typing import Any

from .hf_config_fields import DecoderSettings, UnsupportedCheckpoint, decoder_shape, norm_epsilon, rope, rope_kind, rope_theta, silu_gated
from .model_shapes import ModelShape

LLAMA_MAXTEXT_PREFIX = "llama3.1-"
# MaxText's LLaMARotaryEmbedding hard-codes Llama 3.1's frequency scaling: a checkpoint with other
# llama3 scaling parameters would silently run with these, so anything else is refused.
MAXTEXT_LLAMA3_ROPE_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def _rope_use_scale(scaling: dict[str, Any] | None, field_name: str) -> bool:
    kind = rope_kind(scaling)
    if kind == "default":
        return False
    if kind != "llama3":
        raise UnsupportedCheckpoint(
            field_name, f"RoPE scaling {kind!r} is not implemented by MaxText's Llama decoder (it has Llama 3.1's llama3 scaling or none)"
        )
    assert scaling is not None
    for key, expected in MAXTEXT_LLAMA3_ROPE_SCALING.items():
        if key in scaling and float(scaling[key]) != float(expected):
            raise UnsupportedCheckpoint(
                f"{field_name}.{key}", f"is {scaling[key]}; MaxText's llama3 RoPE scaling is fixed at {key}={expected}"
            )
    return True


def read_llama_config(hf: dict[str, Any]) -> tuple[ModelShape, DecoderSettings]:
    """A Llama-family `config.json` as MaxText can run it; raises UnsupportedCheckpoint."""
    model_type = hf.get("model_type")
    if model_type != "llama":
        raise UnsupportedCheckpoint(
            "model_type", f"is {model_type!r}; settings are derived for Llama-family checkpoints (model_type 'llama') only"
        )
    silu_gated(hf, "Llama")
    for key in ("attention_bias", "mlp_bias"):
        if hf.get(key):
            raise UnsupportedCheckpoint(key, "is true; MaxText's Llama layers have no biases")
    shape = decoder_shape(hf, qk_norm=False)
    theta, scaling, rope_field = rope(hf)
    theta_int = rope_theta(theta)
    use_scale = _rope_use_scale(scaling, rope_field)
    return shape, DecoderSettings(norm_epsilon=norm_epsilon(hf, 1e-5), rope_theta=theta_int, rope_use_scale=use_scale)
