"""The transformers check for real (torch, transformers, the tiny model): it passes a good export and
fails a broken one, also when started ahead of the export as the pipeline starts it (--wait)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # four checks at once, of up to 300 s each


def _nan_weights(model: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(model / "model.safetensors")
    tensors = {name: t.fill_(float("nan")) if "embed_tokens" in name else t for name, t in tensors.items()}
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})


def _truncated_weights(model: Path) -> None:
    data = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(data[: len(data) // 2])


def test_the_check_passes_a_good_export_and_fails_broken_ones(tiny_dir: Path, tmp_path: Path) -> None:
    exports = {}
    for name, breaks in (("good", None), ("nan", _nan_weights), ("truncated", _truncated_weights)):
        exports[name] = shutil.copytree(tiny_dir / "model", tmp_path / name)
        if breaks:
            breaks(exports[name])
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")

    def start(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "trainer.checks.verify_export", *args],
            cwd=REPO,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    # All started together, as the pipeline starts one: each imports, then waits for its go line. The NaN
    # export is checked in the form `trainer plan` prints (no --wait); four processes in all (each imports
    # torch and transformers, seconds of CPU), every outcome of main() among them.
    waiting = {name: start("--wait", str(exports[name])) for name in ("good", "truncated")}
    no_go = start("--wait", str(exports["good"]))
    plain = start(str(exports["nan"]))
    results = {name: proc.communicate("go\n", timeout=300) + (proc.returncode,) for name, proc in waiting.items()}
    no_go_out, no_go_err = no_go.communicate("", timeout=300)
    plain_out, plain_err = plain.communicate(timeout=300)

    out, err, code = results["good"]
    assert code == 0, err[-2000:]
    assert json.loads(out)["finite"] is True and json.loads(out)["architecture"] == "LlamaForCausalLM"
    assert plain.returncode == 1 and json.loads(plain_out)["finite"] is False, plain_err[-2000:]
    out, err, code = results["truncated"]
    assert code == 1 and not out and "SafetensorError" in err, err[-2000:]
    assert no_go.returncode == 2 and not no_go_out and "nothing was checked" in no_go_err
