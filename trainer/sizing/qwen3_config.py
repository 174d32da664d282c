"""A Qwen3 dense `config.json` (model_type "qwen3") as MaxText 0.2.5 runs it.

MaxText runs every Qwen3 dense size with one decoder block (`qwen3`: QK-norm, a plain rotary embedding, a
SiLU-gated MLP, no biases; models/qwen3.py) and converts them with one weight mapping
(checkpoint_conversion/utils/param_mapping.py: QWEN_MAXTEXT_TO_HF_PARAM_MAPPING and its hooks). What differs
between sizes is config values: dimensions, head_dim, vocabulary, RoPE theta (`rope_max_timescale`), RMSNorm
epsilon and tied embeddings (`logits_via_embedding`). So any Qwen3 dense checkpoint is the `qwen3-0.6b`
architecture with its own values: that name because it is in every table the conversions read (HF_IDS,
PARAM_MAPPING, HOOK_FNS, HF_SHAPE), where `qwen3-1.7b` and the `-base` names lack an HF_SHAPE entry and cannot
be exported under their own names.

Refused, naming the field: attention or MLP biases (the qwen3 block has none), sliding-window layers (it
attends globally in every layer), RoPE scaling (rljob passes the plain rotary embedding; YaRN's and linear
scaling's parameters are not mapped), attention dropout, an activation other than SiLU. `max_position_embeddings`
is not passed: the plain rotary embedding has no length limit, and the job's max_target_length bounds a run.
Pure.
"""

from __future__ import annotations

from typing import Any

from .hf_config_fields import DecoderSettings, UnsupportedCheckpoint, decoder_shape, norm_epsilon, rope, rope_kind, rope_theta, silu_gated
from .model_shapes import ModelShape

QWEN3_MAXTEXT_BASE = "qwen3-0.6b"
# MaxText 0.2.5's Qwen3 dense names that both conversions know (checkpoint_conversion/utils/hf_shape.py lists
# these; param_mapping.py and hf_model_configs.py list them and more).
QWEN3_EXPORTABLE_NAMES = ("qwen3-0.6b", "qwen3-4b", "qwen3-4b-thinking-2507", "qwen3-8b", "qwen3-14b", "qwen3-32b")
QWEN3_UNEXPORTABLE_NAMES = ("qwen3-1.7b", "qwen3-1.7b-base", "qwen3-4b-base", "qwen3-8b-base", "qwen3-14b-base")
# transformers 5's Qwen3Config defaults for fields a config.json may leave out.
QWEN3_DEFAULT_HEAD_DIM = 128
QWEN3_DEFAULT_RMS_NORM_EPS = 1e-6


def _global_attention_only(hf: dict[str, Any], layers: int) -> None:
    layer_types = hf.get("layer_types")
    if layer_types is not None:
        other = sorted({str(t) for t in layer_types} - {"full_attention"}) if isinstance(layer_types, list) else [repr(layer_types)]
        if other:
            raise UnsupportedCheckpoint("layer_types", f"has {', '.join(other)}; MaxText's qwen3 decoder attends globally in every layer")
        return
    # transformers makes layers from max_window_layers on sliding when use_sliding_window sets a sliding_window.
    if hf.get("use_sliding_window") and hf.get("sliding_window") is not None and int(hf.get("max_window_layers", layers)) < layers:
        raise UnsupportedCheckpoint(
            "use_sliding_window", "is true; MaxText's qwen3 decoder attends globally in every layer (no sliding window)"
        )


def read_qwen3_config(hf: dict[str, Any]) -> tuple[ModelShape, DecoderSettings]:
    """A Qwen3 dense `config.json` as MaxText can run it; raises UnsupportedCheckpoint."""
    model_type = hf.get("model_type")
    if model_type != "qwen3":
        raise UnsupportedCheckpoint("model_type", f"is {model_type!r}; this reader is for Qwen3 dense checkpoints (model_type 'qwen3')")
    silu_gated(hf, "Qwen3")
    for key in ("attention_bias", "mlp_bias"):
        if hf.get(key):
            raise UnsupportedCheckpoint(key, "is true; MaxText's qwen3 decoder has no biases")
    dropout = hf.get("attention_dropout", 0.0)
    if not isinstance(dropout, (int, float)) or dropout != 0:
        raise UnsupportedCheckpoint("attention_dropout", f"is {dropout!r}; MaxText runs Qwen3 without dropout (enable_dropout false)")
    shape = decoder_shape(hf, qk_norm=True, default_head_dim=QWEN3_DEFAULT_HEAD_DIM)
    _global_attention_only(hf, shape.num_layers)
    theta, scaling, rope_field = rope(hf)
    theta_int = rope_theta(theta)
    if (kind := rope_kind(scaling)) != "default":
        raise UnsupportedCheckpoint(
            rope_field,
            f"RoPE scaling {kind!r} is not mapped to MaxText's qwen3 decoder (rljob runs its plain rotary embedding, "
            "the one Qwen3's released checkpoints use)",
        )
    return shape, DecoderSettings(norm_epsilon=norm_epsilon(hf, QWEN3_DEFAULT_RMS_NORM_EPS), rope_theta=theta_int)
