"""Shared fixtures for the trainer tests; the slow ones share one tiny model and one restarted run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TINY_EXAMPLE = REPO / "examples" / "tiny-cpu.yaml"
TUTORIAL_EXAMPLE = REPO / "examples" / "tutorial-llama31-8b-v6e8.yaml"


def write_spec(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def tiny_spec_dict(tmp_path, monkeypatch) -> dict:
    """The tiny example's fields with its ${VARS} pointing at (fake, existing) files under tmp_path."""
    tiny = tmp_path / "tiny"
    for rel in ("model/config.json", "data/train.jsonl", "data/test.parquet", "length_reward.py"):
        (tiny / rel).parent.mkdir(parents=True, exist_ok=True)
        (tiny / rel).write_text("{}")
    monkeypatch.setenv("RLJOB_TINY_DIR", str(tiny))
    monkeypatch.setenv("RLJOB_OUTPUT", str(tmp_path / "runs"))
    text = os.path.expandvars(TINY_EXAMPLE.read_text())
    return yaml.safe_load(text)
