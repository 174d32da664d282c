"""The real trainer's tiny CPU job on the embedded service (SQLite, the local launcher, `python -m trainer`): the
spec, the offline environment and the settings the slow service tests share."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.config import Settings
from tests.service.service_helpers import TOKEN_A

REPO = Path(__file__).resolve().parents[2]
TINY_SPEC = REPO / "examples" / "tiny-cpu.yaml"
TINY_WAIT_S = float(os.environ.get("RLJOB_TINY_TIMEOUT_S", "1500"))
AUTH = {"Authorization": f"Bearer {TOKEN_A}"}


def tiny_body(tiny_dir: Path, output: Path) -> dict[str, Any]:
    """examples/tiny-cpu.yaml with its model, data and output where this test put them."""
    text = TINY_SPEC.read_text().replace("${RLJOB_TINY_DIR}", str(tiny_dir)).replace("${RLJOB_OUTPUT}", str(output))
    body: dict[str, Any] = yaml.safe_load(text)
    return body


def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never reach a hub: the job's stages run with the hub libraries offline."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")


def embedded_settings(tmp_path: Path) -> Settings:
    """The embedded default, one team's token, the real trainer as the local launcher's command."""
    return Settings(
        state_dir=tmp_path / "state",
        bootstrap_token=TOKEN_A,
        bootstrap_team="team-a",
        trainer_command=[sys.executable, "-m", "trainer"],
        progress_poll_interval_s=0.5,
    )
