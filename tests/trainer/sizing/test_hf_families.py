"""Qwen3 dense config.json -> MaxText settings, and the refusal of every family MaxText converts that rljob does not run."""

from __future__ import annotations

import pytest

from trainer.sizing.hf_families import MAXTEXT_ONLY, SUPPORTED
from trainer.sizing.hf_model import UnsupportedCheckpoint, read_qwen3_config, resolve_maxtext_model
from trainer.sizing.job_shape import model_shape
from trainer.sizing.model_shapes import MAXTEXT_MODELS

# The real config.json of Qwen/Qwen3-0.6B (transformers 4 style), and Qwen3-8B's differences.
QWEN3_06B = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
QWEN3_8B = {**QWEN3_06B, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32}
QWEN3_8B |= {"max_window_layers": 36, "tie_word_embeddings": False}


def test_qwen3_06b_runs_as_maxtexts_qwen3_block_with_its_own_values():
    model = resolve_maxtext_model(None, None, QWEN3_06B)
    assert model.name == "qwen3-0.6b" and model.register_hf_config and model.source == "config.json"
    assert model.overrides == {
        "base_emb_dim": "1024",
        "base_num_query_heads": "16",
        "base_num_kv_heads": "8",
        "base_num_decoder_layers": "28",
        "base_mlp_dim": "3072",
        "head_dim": "128",  # given apart from hidden_size / heads (1024 / 16 = 64)
        "vocab_size": "151936",
        "normalization_layer_epsilon": "1.0e-06",
        "rope_max_timescale": "1000000",
        "logits_via_embedding": "true",
        "normalize_embedding_logits": "false",
    }  # no rope_use_scale: that switch is MaxText's llama3.1 rotary embedding's, which qwen3 does not use
    untied = resolve_maxtext_model("qwen3-8b", None, QWEN3_8B)
    assert untied.name == "qwen3-8b" and untied.overrides["logits_via_embedding"] == "false"
    assert "normalize_embedding_logits" not in untied.overrides


def test_transformers_5_fields_and_defaults_are_read_as_transformers_reads_them():
    v5 = {k: v for k, v in QWEN3_06B.items() if k not in ("rope_theta", "rope_scaling", "head_dim", "rms_norm_eps")}
    v5["rope_parameters"] = {"rope_theta": 5000000.0, "rope_type": "default"}
    v5["layer_types"] = ["full_attention"] * 28
    shape, settings = read_qwen3_config(v5)
    assert settings.rope_theta == 5_000_000 and settings.rope_use_scale is None
    assert shape.head_dim == 128 and settings.norm_epsilon == 1e-6  # Qwen3Config's defaults, not hidden / heads


def test_the_values_match_maxtexts_own_qwen3_tables_and_the_fit_estimates_shape():
    """What rljob derives from each Qwen3 dense config MaxText ships (hf_model_configs.py) is what MaxText's own
    yml for that name says, and what the fit estimate's table holds."""
    import yaml
    from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS

    from trainer.stages.maxtext_paths import base_config

    models = base_config().rsplit("/", 1)[0] + "/models"
    names = [name for name, config in HF_MODEL_CONFIGS.items() if getattr(config, "model_type", None) == "qwen3"]
    assert "qwen3-0.6b" in names and len(names) >= 6
    for name in names:
        overrides = resolve_maxtext_model(None, None, HF_MODEL_CONFIGS[name].to_dict()).overrides
        with open(f"{models}/{name}.yml") as f:
            table = yaml.safe_load(f)
        for key in ("base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "base_num_decoder_layers", "base_mlp_dim", "head_dim"):
            assert overrides[key] == str(table[key]), (name, key)
        assert overrides["vocab_size"] == str(table["vocab_size"]), name
        assert float(overrides["normalization_layer_epsilon"]) == table["normalization_layer_epsilon"], name
        if name != "qwen3-4b-thinking-2507":  # MaxText's HF config for it is qwen3-4b's (theta 1e6); its yml and the
            # released config.json say 5e6. rljob reads the checkpoint's own config.json, so it gets 5e6.
            assert int(overrides["rope_max_timescale"]) == table["rope_max_timescale"], name
        assert overrides["logits_via_embedding"] == str(table["logits_via_embedding"]).lower(), name
        assert table["decoder_block"] == "qwen3" and table["use_qk_norm"] is True
        shape = model_shape(None, None, HF_MODEL_CONFIGS[name].to_dict())
        assert shape is not None and shape.maxtext_dims() == MAXTEXT_MODELS[name].maxtext_dims(), name
        assert (shape.tied_embeddings, shape.qk_norm, shape.vocab_size) == (
            MAXTEXT_MODELS[name].tied_embeddings,
            True,
            MAXTEXT_MODELS[name].vocab_size,
        ), name


@pytest.mark.parametrize("tied", [True, False])
def test_the_parameter_count_is_transformers_own(tied):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    hf = {**QWEN3_06B, "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 3, "num_attention_heads": 6}
    hf |= {"num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000, "tie_word_embeddings": tied}
    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(**hf))
    shape, _ = read_qwen3_config(hf)
    assert shape.parameters == sum(p.numel() for p in model.parameters())  # QK-norm included, a tied head once


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"attention_bias": True}, "attention_bias", "no biases"),
        ({"hidden_act": "gelu"}, "hidden_act", "SiLU"),
        ({"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20}, "use_sliding_window", "globally"),
        ({"layer_types": ["full_attention", "sliding_attention"]}, "layer_types", "sliding_attention"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, "rope_scaling", "'yarn'"),
        ({"rope_parameters": {"rope_theta": 1e6, "rope_type": "linear", "factor": 2.0}}, "rope_parameters", "'linear'"),
        ({"attention_dropout": 0.1}, "attention_dropout", "without dropout"),
        ({"head_dim": 127}, "head_dim", "odd"),
        ({"num_key_value_heads": 5}, "num_key_value_heads", "must divide"),
        ({"rope_theta": 0.5}, "rope_theta", "integer > 1"),
    ],
)
def test_what_maxtexts_qwen3_block_cannot_run_is_refused_naming_the_field(change, field, reason):
    with pytest.raises(UnsupportedCheckpoint) as info:
        read_qwen3_config({**QWEN3_06B, **change})
    assert info.value.field == field and reason in info.value.reason


def test_sliding_window_off_or_past_the_last_layer_is_global_attention():
    # transformers makes no layer sliding unless use_sliding_window, and then only from max_window_layers on.
    read_qwen3_config({**QWEN3_06B, "sliding_window": 4096})
    read_qwen3_config({**QWEN3_06B, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 28})


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("llama3.1-8b", "not a Qwen3 dense model"),
        ("qwen3-30b-a3b", "not a Qwen3 dense model"),
        ("qwen3-1.7b", "no shape table in MaxText 0.2.5's to_huggingface"),  # its export would fail
    ],
)
def test_a_qwen3_checkpoint_runs_only_under_a_name_maxtext_can_convert_both_ways(name, reason):
    with pytest.raises(UnsupportedCheckpoint) as info:
        resolve_maxtext_model(name, None, QWEN3_06B)
    assert info.value.field == "model.name" and reason in info.value.reason


@pytest.mark.parametrize(
    ("model_type", "label", "missing"),
    [
        ("gemma2", "Gemma 2", "soft-capping"),
        ("gemma3_text", "Gemma 3", "sliding-window"),
        ("gpt_oss", "gpt-oss", "mixture-of-experts"),
        ("qwen3_moe", "Qwen3 MoE", "mixture-of-experts"),
        ("qwen2", "Qwen2.5", "biases"),
    ],
)
def test_families_maxtext_converts_but_rljob_does_not_run_are_refused_saying_what_is_missing(model_type, label, missing):
    with pytest.raises(UnsupportedCheckpoint) as info:
        resolve_maxtext_model(None, None, {**QWEN3_06B, "model_type": model_type})
    assert info.value.field == "model_type"
    assert f"({label}): MaxText 0.2.5 converts it" in info.value.reason and missing in info.value.reason
    assert "Qwen3 dense (model_type 'qwen3')" in info.value.reason


@pytest.mark.parametrize(("name", "label"), [("gemma2-2b", "Gemma 2"), ("gpt-oss-20b", "gpt-oss"), ("qwen3-235b-a22b", "Qwen3 MoE")])
def test_a_maxtext_name_of_such_a_family_is_refused_without_a_config(name, label):
    with pytest.raises(UnsupportedCheckpoint) as info:
        resolve_maxtext_model(name, None, None)
    assert info.value.field == "model.name" and f"is a {label} model" in info.value.reason
    assert resolve_maxtext_model("qwen3-4b", None, None).args() == []  # MaxText's own table for a Qwen3 dense name


def test_every_family_maxtext_converts_is_run_or_refused_with_a_reason():
    """A MaxText upgrade that adds a family fails here until it is run or refused with what is missing."""
    from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS

    def model_type(config):
        return config.get("model_type") if isinstance(config, dict) else getattr(config, "model_type", None)

    types = {model_type(config) for config in HF_MODEL_CONFIGS.values()}
    assert {"llama", "qwen3", "gemma3", "gpt_oss", "qwen3_moe"} <= types
    assert types - set(SUPPORTED) - set(MAXTEXT_ONLY) == set()
