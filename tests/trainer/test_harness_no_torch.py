"""harness/no_torch.py: a module run under it sees no torch, the way a machine without the wheel shows it, and the
same probe run plainly sees the torch this venv has (so the blocker, not the venv, is what hides it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from harness import no_torch
from tests.trainer.conftest import REPO

PROBE = textwrap.dedent(
    """
    import importlib.util, json, sys

    def outcome(statement):
        try:
            exec(statement, {})
        except ImportError as e:
            return type(e).__name__
        return "imported"

    seen = {
        "import torch": outcome("import torch"),
        "import torch.nn": outcome("import torch.nn"),
        "from torch import nn": outcome("from torch import nn"),
        "find_spec": importlib.util.find_spec("torch") is not None,
        "argv": sys.argv[1:],
    }
    if "torch" in sys.modules and sys.modules["torch"] is None:
        del sys.modules["torch"]  # what a test-isolation helper might do: the finder still refuses
        seen["after del sys.modules"] = outcome("import torch")
    print(json.dumps(seen))
    """
)


def _run(argv: list[str], tmp_path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "torch_probe.py").write_text(PROBE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_a_module_run_under_no_torch_cannot_import_torch_and_probes_find_none(tmp_path):
    done = _run(no_torch.command("torch_probe", "--out", "x"), tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {
        "import torch": "ModuleNotFoundError",
        "import torch.nn": "ModuleNotFoundError",
        "from torch import nn": "ModuleNotFoundError",
        "find_spec": False,  # libraries' availability probes answer "absent", as without the wheel
        "argv": ["--out", "x"],
        "after del sys.modules": "ModuleNotFoundError",
    }


def test_the_same_probe_run_plainly_sees_torch(tmp_path):
    done = _run([sys.executable, "-m", "torch_probe"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen["import torch"] == "imported" and seen["find_spec"] is True, seen


def test_transformers_under_no_torch_takes_its_torch_free_path(tmp_path):
    probe = "from transformers.utils import is_torch_available; print(is_torch_available())"
    (tmp_path / "transformers_probe.py").write_text(probe)
    done = _run(no_torch.command("transformers_probe"), tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_hiding_torch_after_it_was_imported_is_refused(tmp_path):
    code = "import torch\nfrom harness.no_torch import hide_torch\nhide_torch()"
    done = _run([sys.executable, "-c", code], tmp_path)
    assert done.returncode != 0 and "torch is already imported" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("argv", [[], ["-c", "print(1)"]], ids=["no-module", "an-option"])
def test_no_torch_without_a_module_says_how_to_use_it(tmp_path, argv):
    done = _run([sys.executable, "-m", "harness.no_torch", *argv], tmp_path)
    assert done.returncode == 1 and "usage: python -m harness.no_torch MODULE" in done.stderr
    assert "Traceback" not in done.stderr
