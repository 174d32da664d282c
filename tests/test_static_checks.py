"""ruff and mypy, with the rules in pyproject.toml, as part of the suite (so `scripts/test.sh` and CI run them).

Each check also runs once on a planted mistake, so a broken configuration (no files found, every rule off)
cannot pass quietly.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LINTED = ["service", "trainer", "harness", "tests", "bench", "scripts"]


def _run(*argv: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    result = _run(BIN / "ruff", "check", "--no-cache", *LINTED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_as_ruff_formats_it():
    # One formatter, at the line length above; an aligned table may opt out with `# fmt: off` / `# fmt: on`.
    result = _run(BIN / "ruff", "format", "--check", "--no-cache", *LINTED)
    assert result.returncode == 0, "run `ruff format` on:\n" + result.stdout + result.stderr


def test_the_format_check_sees_a_misformatted_file(tmp_path):
    planted = tmp_path / "service" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("x = {  'a':1 }\n")
    result = _run(BIN / "ruff", "format", "--check", "--no-cache", "--config", ROOT / "pyproject.toml", planted, cwd=tmp_path)
    assert result.returncode == 1 and "planted.py" in result.stdout, result.stdout + result.stderr


def test_mypy_finds_nothing():
    result = _run(BIN / "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "source, rule",
    [
        ("import os\n", "F401"),
        ("def f():\n    try:\n        pass\n    except Exception:\n        pass\n", "BLE001"),
        ("import yaml\nyaml.load('a')\n", "TID251"),
        ("from ..x import y\n", "TID252"),
    ],
)
def test_ruff_rules_are_on(tmp_path, source, rule):
    planted = tmp_path / "service" / "pkg" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(source)
    result = _run(BIN / "ruff", "check", "--no-cache", "--config", ROOT / "pyproject.toml", planted, cwd=tmp_path)
    assert result.returncode == 1 and rule in result.stdout, result.stdout + result.stderr


def test_mypy_strict_where_configured(tmp_path):
    # An unannotated function in the domain is an error there (strict), and a type error anywhere is one.
    domain = tmp_path / "service" / "domain"
    domain.mkdir(parents=True)
    for pkg in (tmp_path / "service", domain):
        (pkg / "__init__.py").write_text("")
    (domain / "planted.py").write_text("def f(x):\n    return x\n")
    result = _run(BIN / "mypy", "--config-file", ROOT / "pyproject.toml", "service", cwd=tmp_path)
    assert result.returncode == 1 and "no-untyped-def" in result.stdout, result.stdout + result.stderr
