"""MaxText settings for a Hugging Face checkpoint, derived from the checkpoint's own `config.json`.

Each family rljob runs (hf_families.py: Llama-family and Qwen3 dense) converts under one MaxText name with one
weight mapping, so a checkpoint is that name's architecture with the values its config.json gives:
dimensions, vocabulary, RoPE, RMSNorm epsilon and tied embeddings (llama_config.py and qwen3_config.py say
what each family reads, and refuse what MaxText does not implement, naming the config field and the reason).

The checkpoint is read once into a `ModelShape` (model_shapes.py) plus the few values that are not shape
(`DecoderSettings`); `MaxTextModel` renders MaxText's command-line overrides from those typed values.
Pure: a dict in, settings or `UnsupportedCheckpoint` out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .hf_config_fields import DecoderSettings, UnsupportedCheckpoint
from .hf_families import family_of_config, name_problem
from .llama_config import LLAMA_MAXTEXT_PREFIX, MAXTEXT_LLAMA3_ROPE_SCALING, read_llama_config
from .model_shapes import ModelShape, shape_from_dims
from .qwen3_config import read_qwen3_config

__all__ = [
    "LLAMA_MAXTEXT_PREFIX",
    "MAXTEXT_LLAMA3_ROPE_SCALING",
    "DecoderSettings",
    "MaxTextModel",
    "UnsupportedCheckpoint",
    "read_llama_config",
    "read_qwen3_config",
    "resolve_maxtext_model",
]


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
    settings: DecoderSettings | None = None
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
        if self.settings is None:
            return overrides
        tied = self.shape.tied_embeddings
        overrides |= {
            "vocab_size": str(self.shape.vocab_size),
            "normalization_layer_epsilon": _float_arg(self.settings.norm_epsilon),
            "rope_max_timescale": str(self.settings.rope_theta),
        }
        if self.settings.rope_use_scale is not None:
            overrides["rope_use_scale"] = _bool_arg(self.settings.rope_use_scale)
        overrides["logits_via_embedding"] = _bool_arg(tied)
        if tied:
            # MaxText divides tied logits by sqrt(emb_dim) by default (Gemma's convention); Llama and Qwen3 do not.
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


def resolve_maxtext_model(name: str | None, dims: dict[str, int] | None, hf: dict[str, Any] | None) -> MaxTextModel:
    """The MaxText model for a spec's `model.name`/`model.dims` and the checkpoint's config (None:
    unreadable, e.g. a hub id while planning offline). `dims` override the derived dimensions."""
    if hf is None:
        # Not derivable: MaxText's own table for the named model, narrowed by explicit dims.
        if not name:
            raise UnsupportedCheckpoint("model.name", "is needed when the checkpoint's config.json cannot be read")
        if problem := name_problem(name):
            raise UnsupportedCheckpoint("model.name", problem)
        if not dims:
            return MaxTextModel(name=name)
        return MaxTextModel(name=name, shape=shape_from_dims(name, dims), source="dims")
    family = family_of_config(hf)
    if name and (problem := family.name_problem(name)):
        raise UnsupportedCheckpoint("model.name", problem)
    shape, settings = family.read(hf)
    derived = shape.maxtext_dims()
    for key, value in (dims or {}).items():
        if derived[key] != value:
            raise UnsupportedCheckpoint(
                f"model.dims.{key}", f"is {value} but the checkpoint's config.json says {derived[key]}; the weights would not fit"
            )
    return MaxTextModel(name=name or family.base, shape=shape, settings=settings, source="config.json")
