"""MaxText settings derived from a checkpoint's config.json: the values, the base model, the refusals."""

from __future__ import annotations

import json

import pytest

from trainer.contract import JobSpec
from trainer.sizing.hf_model import UnsupportedCheckpoint, read_llama_config, resolve_maxtext_model
from trainer.sizing.job_shape import model_shape

# transformers 5 writes RoPE as rope_parameters; these are the real shapes of each model's config.json.
SMOLLM2_135M = {
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "num_hidden_layers": 30,
    "head_dim": 64,
    "vocab_size": 49152,
    "rms_norm_eps": 9.999999747378752e-06,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
}
LLAMA_32_1B = {  # transformers 4 style: rope_theta and rope_scaling side by side
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 16,
    "head_dim": 64,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": True,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}
LLAMA_31_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}


def test_smollm2_is_a_llama31_base_without_rope_scaling_and_with_tied_logits():
    model = resolve_maxtext_model(None, None, SMOLLM2_135M)
    assert model.name == "llama3.1-8b" and model.register_hf_config and model.source == "config.json"
    assert model.overrides == {
        "base_emb_dim": "576",
        "base_num_query_heads": "9",
        "base_num_kv_heads": "3",
        "base_num_decoder_layers": "30",
        "base_mlp_dim": "1536",
        "head_dim": "64",
        "vocab_size": "49152",
        "normalization_layer_epsilon": "9.999999747378752e-06",
        "rope_max_timescale": "100000",
        "rope_use_scale": "false",
        "logits_via_embedding": "true",
        "normalize_embedding_logits": "false",
    }
    assert model.args()[0] == "override_model_config=true"


def test_llama31_8b_keeps_maxtexts_rope_scaling_and_untied_head():
    overrides = resolve_maxtext_model(None, None, LLAMA_31_8B).overrides
    assert overrides["rope_use_scale"] == "true" and overrides["logits_via_embedding"] == "false"
    assert overrides["head_dim"] == "128"  # hidden / heads when config.json has no head_dim
    assert "normalize_embedding_logits" not in overrides


def test_epsilon_is_written_so_omegaconf_reads_a_float():
    model = resolve_maxtext_model(None, None, {**LLAMA_31_8B, "rms_norm_eps": 1e-6})
    assert model.overrides["normalization_layer_epsilon"] == "1.0e-06"


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"model_type": "mistral"}, "model_type", "Llama-family"),
        ({"mlp_bias": True}, "mlp_bias", "no biases"),
        ({"rms_norm_eps": 0}, "rms_norm_eps", "between 0 and 1"),
        ({"rope_theta": 1.5}, "rope_theta", "integer > 1"),
        ({"hidden_act": "gelu"}, "hidden_act", "SiLU"),
        ({"attention_bias": True}, "attention_bias", "no biases"),
        ({"num_key_value_heads": 5}, "num_key_value_heads", "must divide"),
        ({"head_dim": 63}, "head_dim", "odd"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling", "'yarn' is not implemented"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling", "'linear' is not implemented"),
        ({"num_hidden_layers": 0}, "num_hidden_layers", "positive integer"),
    ],
)
def test_what_maxtext_cannot_represent_is_refused_naming_the_field(change, field, reason):
    with pytest.raises(UnsupportedCheckpoint) as info:
        read_llama_config({**LLAMA_31_8B, **change})
    assert info.value.field == field and reason in info.value.reason


def test_llama3_scaling_other_than_maxtexts_fixed_factors_is_refused():
    # Llama 3.2 uses factor 32; MaxText's LLaMARotaryEmbedding hard-codes 8 and would run it wrong.
    with pytest.raises(UnsupportedCheckpoint) as info:
        read_llama_config(LLAMA_32_1B)
    assert info.value.field == "rope_scaling.factor" and "fixed at factor=8.0" in info.value.reason


def test_explicit_dims_must_agree_with_the_checkpoint_and_stand_in_where_it_is_unreadable():
    dims = {
        "base_emb_dim": 576,
        "base_num_query_heads": 9,
        "base_num_kv_heads": 3,
        "base_num_decoder_layers": 30,
        "base_mlp_dim": 1536,
        "head_dim": 64,
    }
    assert resolve_maxtext_model(None, dims, SMOLLM2_135M).overrides["base_emb_dim"] == "576"
    with pytest.raises(UnsupportedCheckpoint) as info:
        resolve_maxtext_model(None, {**dims, "base_emb_dim": 512}, SMOLLM2_135M)
    assert info.value.field == "model.dims.base_emb_dim" and "576" in info.value.reason
    offline = resolve_maxtext_model("llama3.1-8b", dims, None)  # a hub id while planning offline
    assert offline.source == "dims" and offline.register_hf_config and offline.overrides["head_dim"] == "64"


def test_a_hub_model_without_readable_config_uses_maxtexts_table_for_its_name():
    model = resolve_maxtext_model("llama3.1-8b", None, None)
    assert model.args() == [] and not model.register_hf_config and model.source == "maxtext"
    with pytest.raises(UnsupportedCheckpoint) as info:
        resolve_maxtext_model(None, None, None)
    assert info.value.field == "model.name"


def test_a_llama_checkpoint_under_a_non_llama_name_is_refused():
    with pytest.raises(UnsupportedCheckpoint) as info:
        resolve_maxtext_model("qwen3-0.6b", None, SMOLLM2_135M)
    assert info.value.field == "model.name" and "not a Llama model" in info.value.reason


def test_the_trainer_refuses_an_unsupported_checkpoint_before_any_stage(tmp_path, capfd):
    from trainer.cli import main

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**LLAMA_31_8B, "rope_scaling": {"rope_type": "yarn"}}))
    spec = tmp_path / "spec.json"
    spec.write_text(
        JobSpec.model_validate(
            {
                "name": "yarn",
                "model": {"source": str(model)},
                "output": str(tmp_path / "runs"),
                "hardware": {"accelerator": "cpu", "chips_per_vm": 1, "rollout_engine": "jax"},
            }
        ).model_dump_json()
    )
    assert main(["run", "--spec", str(spec), "--job-id", "rl-yarn00000001"]) == 65
    err = capfd.readouterr().err
    assert "model.source: config.json rope_scaling RoPE scaling 'yarn' is not implemented" in err
    assert not (tmp_path / "runs" / "rl-yarn00000001" / "events.jsonl").exists()  # no stage, no event


def test_the_maxtext_settings_are_rendered_from_the_shape_the_fit_estimate_reads():
    model = resolve_maxtext_model(None, None, SMOLLM2_135M)
    assert model.shape == model_shape(None, None, SMOLLM2_135M)  # one description of the model, two readers
    assert model.shape is not None and model.shape.tied_embeddings and model.shape.vocab_size == 49152
