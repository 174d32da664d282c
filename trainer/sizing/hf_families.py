"""Which checkpoint families rljob runs, under which MaxText names, and what each family MaxText supports but rljob
does not is missing (the refusal names it).

A family is known by its config.json `model_type`, or, where no config.json can be read (a hub id while
planning offline), by the MaxText `model.name` a spec gives. rljob runs two: Llama-family (llama_config.py)
and Qwen3 dense (qwen3_config.py). MaxText 0.2.5 converts more (checkpoint_conversion/utils/hf_model_configs.py);
each of those is refused here, before anything runs, saying what rljob lacks for it. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .hf_config_fields import DecoderSettings, UnsupportedCheckpoint
from .llama_config import LLAMA_MAXTEXT_PREFIX, read_llama_config
from .model_shapes import LLAMA_MAXTEXT_BASE, MAXTEXT_MODELS, ModelShape
from .qwen3_config import QWEN3_EXPORTABLE_NAMES, QWEN3_MAXTEXT_BASE, QWEN3_UNEXPORTABLE_NAMES, read_qwen3_config


@dataclass(frozen=True)
class Family:
    model_type: str
    label: str
    base: str  # the MaxText name a checkpoint of the family runs under when the spec names none
    read: Callable[[dict[str, Any]], tuple[ModelShape, DecoderSettings]]

    def name_problem(self, name: str) -> str | None:
        """Why a checkpoint of this family cannot run under the MaxText name `name`, or None."""
        if self.model_type == "llama":
            if name.startswith(LLAMA_MAXTEXT_PREFIX):
                return None
            return (
                f"{name!r} is not a Llama model, but the checkpoint is; MaxText converts Llama checkpoints as "
                f"{LLAMA_MAXTEXT_PREFIX}* (or omit it)"
            )
        if name in QWEN3_EXPORTABLE_NAMES:
            return None
        if name in QWEN3_UNEXPORTABLE_NAMES:
            return _unexportable(name)
        return f"{name!r} is not a Qwen3 dense model, but the checkpoint is; use one of {', '.join(QWEN3_EXPORTABLE_NAMES)} (or omit it)"


SUPPORTED: dict[str, Family] = {
    "llama": Family("llama", "Llama-family", LLAMA_MAXTEXT_BASE, read_llama_config),
    "qwen3": Family("qwen3", "Qwen3 dense", QWEN3_MAXTEXT_BASE, read_qwen3_config),
}
SUPPORTED_TEXT = "Llama-family (model_type 'llama') and Qwen3 dense (model_type 'qwen3') checkpoints"

_MOE = "mixture-of-experts layers (router and experts) in the fit estimate and the CPU rollout engine, and their config.json fields"
_GEMMA = (
    "Gemma's decoder in the CPU rollout engine (local sliding-window layers, logit soft-capping, scaled embeddings), "
    "its config.json fields and its parameters in the fit estimate"
)
_MULTIMODAL = "a vision or audio tower: rljob trains text-only decoders"


@dataclass(frozen=True)
class Unsupported:
    label: str
    missing: str
    name_prefixes: tuple[str, ...]  # MaxText model names of the family


# Every model_type MaxText 0.2.5 converts (tests/trainer/sizing/test_hf_families.py checks this table against
# HF_MODEL_CONFIGS), and HF model types of the same families MaxText's table spells otherwise.
MAXTEXT_ONLY: dict[str, Unsupported] = {
    "gemma": Unsupported("Gemma", _GEMMA, ("gemma-", "gemma1")),
    "gemma2": Unsupported("Gemma 2", _GEMMA, ("gemma2-",)),
    "gemma3": Unsupported("Gemma 3", _GEMMA, ("gemma3-",)),
    "gemma3_text": Unsupported("Gemma 3", _GEMMA, ()),
    "gemma4": Unsupported("Gemma 4", _GEMMA, ("gemma4-",)),
    "gpt_oss": Unsupported("gpt-oss", f"{_MOE}, and its sliding-window layers and attention sinks", ("gpt-oss-",)),
    "qwen3_moe": Unsupported(
        "Qwen3 MoE", f"{_MOE} (num_experts, moe_intermediate_size, ...)", ("qwen3-30b-", "qwen3-235b-", "qwen3-480b-")
    ),
    "qwen3_next": Unsupported("Qwen3-Next", f"{_MOE}, and its gated delta-net (linear attention) layers", ("qwen3-next-",)),
    "qwen3_5_moe": Unsupported("Qwen3.5 MoE", f"{_MOE}, and its gated delta-net (linear attention) layers", ("qwen3.5-",)),
    "qwen3_omni_moe": Unsupported("Qwen3-Omni", f"{_MULTIMODAL}; and {_MOE}", ("qwen3-omni-",)),
    "qwen3_vl": Unsupported("Qwen3-VL", _MULTIMODAL, ("qwen3-vl-",)),
    "qwen3_vl_moe": Unsupported("Qwen3-VL MoE", f"{_MULTIMODAL}; and {_MOE}", ()),
    "weaver_omni": Unsupported("Weaver", _MULTIMODAL, ("weaver-",)),
    "qwen2": Unsupported("Qwen2.5", "query/key/value biases in the CPU rollout engine, and its config.json fields", ("qwen2.5-", "qwen2-")),
    "mistral": Unsupported("Mistral", "its config.json fields (sliding window) and MaxText's mistral block in the CPU rollout engine", ()),
    "mixtral": Unsupported("Mixtral", _MOE, ("mixtral-",)),
    "llama4": Unsupported("Llama 4", f"{_MOE}, chunked attention and its vision tower", ("llama4-",)),
    "olmo3": Unsupported(
        "OLMo 3", "its decoder (post-norms, QK-norm over all heads, sliding-window layers) in the CPU rollout engine", ("olmo3-",)
    ),
    "deepseek_v2": Unsupported("DeepSeek-V2", f"{_MOE}, and multi-head latent attention", ("deepseek2-",)),
    "deepseek_v3": Unsupported("DeepSeek-V3", f"{_MOE}, and multi-head latent attention", ("deepseek3-",)),
    "deepseek_v32": Unsupported("DeepSeek-V3.2", f"{_MOE}, and sparse multi-head latent attention", ("deepseek3.2-",)),
    "deepseek_v4": Unsupported("DeepSeek-V4", f"{_MOE}, and its compressed attention", ("deepseek4-",)),
}


def _unexportable(name: str) -> str:
    return (
        f"{name!r} has no shape table in MaxText 0.2.5's to_huggingface (checkpoint_conversion/utils/hf_shape.py), so its "
        f"export would fail; omit model.name (a Qwen3 checkpoint runs as {QWEN3_MAXTEXT_BASE} with its own config.json values) "
        f"or use one of {', '.join(QWEN3_EXPORTABLE_NAMES)}"
    )


def family_of_config(hf: dict[str, Any]) -> Family:
    """The family of a config.json; UnsupportedCheckpoint('model_type', ...) naming what rljob lacks for it."""
    model_type = hf.get("model_type")
    family = SUPPORTED.get(model_type) if isinstance(model_type, str) else None
    if family is not None:
        return family
    other = MAXTEXT_ONLY.get(model_type) if isinstance(model_type, str) else None
    if other is not None:
        raise UnsupportedCheckpoint(
            "model_type",
            f"is {model_type!r} ({other.label}): MaxText 0.2.5 converts it, but rljob runs {SUPPORTED_TEXT} only; "
            f"missing for {other.label}: {other.missing}",
        )
    raise UnsupportedCheckpoint("model_type", f"is {model_type!r}; rljob runs {SUPPORTED_TEXT} only")


def name_problem(name: str) -> str | None:
    """Why the MaxText name `name` cannot be run without a readable config.json, or None."""
    if name in QWEN3_UNEXPORTABLE_NAMES:
        return _unexportable(name)
    if name in MAXTEXT_MODELS:
        return None
    for other in MAXTEXT_ONLY.values():
        if other.name_prefixes and name.startswith(other.name_prefixes):
            return (
                f"{name!r} is a {other.label} model: MaxText 0.2.5 runs it, but rljob runs {SUPPORTED_TEXT} only; "
                f"missing for {other.label}: {other.missing}"
            )
    return f"{name!r} is not a MaxText model rljob runs; rljob runs {SUPPORTED_TEXT} only (names: {', '.join(MAXTEXT_MODELS)})"


def read_checkpoint_config(hf: dict[str, Any]) -> tuple[ModelShape, DecoderSettings]:
    """The shape and settings of a supported family's config.json; raises UnsupportedCheckpoint."""
    return family_of_config(hf).read(hf)
