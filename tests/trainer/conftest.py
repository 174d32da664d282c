"""Shared fixtures for the trainer tests; the slow ones share one tiny model (tests/conftest.py), one conversion
cache and one restarted run."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from trainer.runner import StageCommand

REPO = Path(__file__).resolve().parents[2]
CACHE_ENV = "RLJOB_CONVERSION_CACHE"
TINY_EXAMPLE = REPO / "examples" / "tiny-cpu.yaml"
TUTORIAL_EXAMPLE = REPO / "examples" / "tutorial-llama31-8b-v6e8.yaml"


@pytest.fixture(scope="module")
def maxtext_loader() -> Iterator[Callable[[StageCommand], BaseModel]]:
    """MaxText's own config loader (pyconfig.initialize_pydantic, what train_rl, to_maxtext and to_huggingface call) on
    a stage's command: our `--rljob_*` flags and the `--` arguments argparse or absl read are left out, as the real
    entry points leave them out. Importing MaxText takes ~15 s."""
    from maxtext.configs import pyconfig, types  # slow: JAX and MaxText's whole config module

    from trainer.contract.run.shim_config import pop_shim_config

    def load(command: StageCommand) -> BaseModel:
        _, args = pop_shim_config(list(command.args))
        config_args = [a for a in args if not a.startswith("--")]
        config_class = types.RLConfig if command.module.startswith("trainer.maxtext_entry.train_rl") else None
        extra = {"config_class": config_class} if config_class else {}
        # argv[0] is the program; argv[1] the YAML config, as `python -m <module> <yml> key=value ...` gives it.
        return pyconfig.initialize_pydantic(["", *config_args], **extra)

    yield load


# The tiny model's config.json as transformers 5 writes it (trainer/offline/tiny.py builds the real one).
TINY_HF_CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "head_dim": 16,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "rope_parameters": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_theta": 500000.0,
        "rope_type": "llama3",
    },
}


def write_spec(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="session")
def shared_cache(tiny_output: Path) -> dict[str, str]:
    """Env for `trainer run`: the conversion cache of the worker's shared output (tests/conftest.py), so runs
    whose output is elsewhere take the checkpoint converted once for all of them."""
    return {CACHE_ENV: str(tiny_output / "_cache" / "maxtext")}


@pytest.fixture
def tiny_spec_dict(tmp_path, monkeypatch) -> dict:
    """The tiny example's fields with its ${VARS} pointing at (fake, existing) files under tmp_path."""
    tiny = tmp_path / "tiny"
    for rel in ("model/config.json", "data/train.jsonl", "data/test.parquet", "length_reward.py"):
        (tiny / rel).parent.mkdir(parents=True, exist_ok=True)
        (tiny / rel).write_text(json.dumps(TINY_HF_CONFIG) if rel.endswith("config.json") else "{}")
    monkeypatch.setenv("RLJOB_TINY_DIR", str(tiny))
    monkeypatch.setenv("RLJOB_OUTPUT", str(tmp_path / "runs"))
    text = os.path.expandvars(TINY_EXAMPLE.read_text())
    return yaml.safe_load(text)
