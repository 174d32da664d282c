"""MaxText settings are derived from a gs:// checkpoint's config.json too, read through the GCS adapter."""

from __future__ import annotations

import json

import pytest

from tests.trainer.conftest import TINY_HF_CONFIG
from trainer.contract import JobSpec
from trainer.sources import UnsupportedCheckpoint, resolve_model


def _spec(bucket: str) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "gcs-model",
            "model": {"source": f"gs://{bucket}/models/tiny"},
            "output": f"gs://{bucket}/runs",
            "hardware": {"accelerator": "cpu", "chips_per_vm": 1, "rollout_engine": "jax"},
        }
    )


def test_settings_come_from_the_buckets_config_json(emulator, gcs, bucket):
    gcs.write_bytes(f"gs://{bucket}/models/tiny/config.json", json.dumps(TINY_HF_CONFIG).encode())
    model = resolve_model(_spec(bucket))
    assert model.source == "config.json" and model.register_hf_config
    assert model.overrides["base_emb_dim"] == "64" and model.overrides["rope_use_scale"] == "true"


def test_a_gs_checkpoint_without_config_json_is_refused_naming_it(emulator, gcs, bucket):
    gcs.write_bytes(f"gs://{bucket}/models/tiny/model.safetensors", b"weights")
    with pytest.raises(UnsupportedCheckpoint) as info:
        resolve_model(_spec(bucket))
    assert info.value.field == "model.source" and f"gs://{bucket}/models/tiny/config.json does not exist" in info.value.reason
