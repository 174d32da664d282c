"""MaxText settings for a Hugging Face checkpoint, derived from the checkpoint's own `config.json`.

MaxText 0.2.5 converts Llama checkpoints only under its `llama3.1-*` names (one weight mapping for
all of them) and runs them with the `llama2` decoder block. Everything that differs between one
Llama-family checkpoint and another is a config value: dimensions, vocabulary, RoPE theta, whether
Llama 3.1's RoPE frequency scaling applies (`rope_use_scale`), RMSNorm epsilon and tied embeddings
(`logits_via_embedding`). So any Llama-family checkpoint is the `llama3.1-8b` architecture with the
values below, and a checkpoint whose config asks for something MaxText does not implement is refused
here, before any stage runs, naming the config field and the reason.

The checkpoint is read once into a `ModelShape` (model_shapes.py) plus the few values that are not shape
(`LlamaSettings`); `MaxTextModel` renders MaxText's command-line overrides from those typed values.
Pure: a dict in, settings or `UnsupportedCheckpoint` out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .model_shapes import LLAMA_MAXTEXT_BASE, ModelShape, shape_from_dims

LLAMA_MAXTEXT_PREFIX = "llama3.1-"
# MaxText's LLaMARotaryEmbedding hard-codes Llama 3.1's frequency scaling: a checkpoint with other
# llama3 scaling parameters would silently run with these, so anything else is refused.
MAXTEXT_LLAMA3_ROPE_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


class UnsupportedCheckpoint(ValueError):
    """The checkpoint cannot be represented in MaxText; `field` names where the problem is."""

    def __init__(self, field: str, reason: str):
        self.field, self.reason = field, reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True)
class LlamaSettings:
    """What a Llama-family config.json tells MaxText beside the model's shape."""

    norm_epsilon: float  # rms_norm_eps
    rope_theta: int
    rope_use_scale: bool  # Llama 3.1's llama3 RoPE frequency scaling (MaxText's only one)


@dataclass(frozen=True)
class MaxTextModel:
    """What every stage tells MaxText about the model."""

    name: str
    # The dimensions MaxText's table for `name` is overridden with (config.json or model.dims); None: the
    # checkpoint is the one that table describes. Set, the stages put the checkpoint's own config.json into
    # that table before MaxText reads it.
    shape: ModelShape | None = None
    # Set when derived from config.json: the vocabulary, tied embeddings, norm epsilon and RoPE are passed too.
    # With model.dims alone they stay MaxText's for `name` (the shape's vocab_size is that table's).
    llama: LlamaSettings | None = None
    source: str = "maxtext"  # where the settings came from: config.json, dims or maxtext (its table)

    @property
    def register_hf_config(self) -> bool:
        return self.shape is not None

    @property
    def overrides(self) -> dict[str, str]:
        """MaxText key -> command-line value."""
        if self.shape is None:
            return {}
        overrides = {key: str(value) for key, value in self.shape.maxtext_dims().items()}
        if self.llama is None:
            return overrides
        tied = self.shape.tied_embeddings
        overrides |= {
            "vocab_size": str(self.shape.vocab_size),
            "normalization_layer_epsilon": _float_arg(self.llama.norm_epsilon),
            "rope_max_timescale": str(self.llama.rope_theta),
            "rope_use_scale": _bool_arg(self.llama.rope_use_scale),
            "logits_via_embedding": _bool_arg(tied),
        }
        if tied:
            # MaxText divides tied logits by sqrt(emb_dim) by default (Gemma's convention); Llama does not.
            overrides["normalize_embedding_logits"] = "false"
        return overrides

    def args(self) -> list[str]:
        overrides = self.overrides
        if not overrides:
            return []
        return ["override_model_config=true", *(f"{k}={v}" for k, v in overrides.items())]


def _bool_arg(value: bool) -> str:
    return str(value).lower()


def _float_arg(value: float) -> str:
    # OmegaConf (MaxText's loader) reads "1e-05" as a string: always write a decimal point.
    text = repr(float(value))
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _rope(hf: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling) from either transformers 5's `rope_parameters` or the older two fields."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        return float(params["rope_theta"]), scaling
    return float(hf.get("rope_theta", 10000.0)), hf.get("rope_scaling")


def _rope_use_scale(scaling: dict[str, Any] | None, field_name: str) -> bool:
    if not scaling:
        return False
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind == "default":
        return False
    if kind != "llama3":
        raise UnsupportedCheckpoint(
            field_name, f"RoPE scaling {kind!r} is not implemented by MaxText's Llama decoder (it has Llama 3.1's llama3 scaling or none)"
        )
    for key, expected in MAXTEXT_LLAMA3_ROPE_SCALING.items():
        if key in scaling and float(scaling[key]) != float(expected):
            raise UnsupportedCheckpoint(
                f"{field_name}.{key}", f"is {scaling[key]}; MaxText's llama3 RoPE scaling is fixed at {key}={expected}"
            )
    return True


def _positive_int(hf: dict[str, Any], key: str) -> int:
    value = hf.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UnsupportedCheckpoint(key, f"must be a positive integer, got {value!r}")
    return value


def read_llama_config(hf: dict[str, Any]) -> tuple[ModelShape, LlamaSettings]:
    """A Llama-family `config.json` as MaxText can run it; raises UnsupportedCheckpoint."""
    model_type = hf.get("model_type")
    if model_type != "llama":
        raise UnsupportedCheckpoint(
            "model_type", f"is {model_type!r}; settings are derived for Llama-family checkpoints (model_type 'llama') only"
        )
    if (act := hf.get("hidden_act", "silu")) != "silu":
        raise UnsupportedCheckpoint("hidden_act", f"is {act!r}; MaxText's Llama MLP is SiLU-gated")
    for key in ("attention_bias", "mlp_bias"):
        if hf.get(key):
            raise UnsupportedCheckpoint(key, "is true; MaxText's Llama layers have no biases")
    hidden = _positive_int(hf, "hidden_size")
    heads = _positive_int(hf, "num_attention_heads")
    kv_heads = hf.get("num_key_value_heads") or heads
    if not isinstance(kv_heads, int) or kv_heads <= 0 or heads % kv_heads:
        raise UnsupportedCheckpoint("num_key_value_heads", f"{kv_heads!r} must divide num_attention_heads={heads}")
    head_dim = hf.get("head_dim") or hidden // heads
    if not hf.get("head_dim") and hidden % heads:
        raise UnsupportedCheckpoint("hidden_size", f"{hidden} is not a multiple of num_attention_heads={heads}")
    if head_dim % 2:
        raise UnsupportedCheckpoint("head_dim", f"{head_dim} is odd; rotary embeddings need an even head_dim")
    theta, scaling = _rope(hf)
    if not math.isfinite(theta) or theta <= 1 or theta != int(theta):
        raise UnsupportedCheckpoint("rope_theta", f"{theta} must be an integer > 1 (MaxText's rope_max_timescale)")
    rope_field = "rope_parameters" if isinstance(hf.get("rope_parameters"), dict) else "rope_scaling"
    use_scale = _rope_use_scale(scaling, rope_field)
    eps = hf.get("rms_norm_eps", 1e-5)
    if not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise UnsupportedCheckpoint("rms_norm_eps", f"{eps!r} must be between 0 and 1")
    shape = ModelShape(
        hidden,
        heads,
        kv_heads,
        _positive_int(hf, "num_hidden_layers"),
        _positive_int(hf, "intermediate_size"),
        int(head_dim),
        _positive_int(hf, "vocab_size"),
        tied_embeddings=bool(hf.get("tie_word_embeddings", False)),
        source="config.json",
    )
    return shape, LlamaSettings(norm_epsilon=float(eps), rope_theta=int(theta), rope_use_scale=use_scale)


def resolve_maxtext_model(name: str | None, dims: dict[str, int] | None, hf: dict[str, Any] | None) -> MaxTextModel:
    """The MaxText model for a spec's `model.name`/`model.dims` and the checkpoint's config (None:
    unreadable, e.g. a hub id while planning offline). `dims` override the derived dimensions."""
    if hf is None or (hf.get("model_type") != "llama" and name and not name.startswith(LLAMA_MAXTEXT_PREFIX)):
        # Not derivable: MaxText's own table for the named model, narrowed by explicit dims.
        if not name:
            raise UnsupportedCheckpoint(
                "model.name", "is needed when the checkpoint's config.json cannot be read or is not a Llama-family config"
            )
        if not dims:
            return MaxTextModel(name=name)
        return MaxTextModel(name=name, shape=shape_from_dims(name, dims), source="dims")
    if name and not name.startswith(LLAMA_MAXTEXT_PREFIX):
        raise UnsupportedCheckpoint(
            "model.name",
            f"{name!r} is not a Llama model, but the checkpoint is; MaxText "
            f"converts Llama checkpoints as {LLAMA_MAXTEXT_PREFIX}* (or omit it)",
        )
    shape, llama = read_llama_config(hf)
    derived = shape.maxtext_dims()
    for key, value in (dims or {}).items():
        if derived[key] != value:
            raise UnsupportedCheckpoint(
                f"model.dims.{key}", f"is {value} but the checkpoint's config.json says {derived[key]}; the weights would not fit"
            )
    return MaxTextModel(name=name or LLAMA_MAXTEXT_BASE, shape=shape, llama=llama, source="config.json")
