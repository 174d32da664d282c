"""The test run refuses a venv whose editable install is another checkout (tests/checkout_guard.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.checkout_guard import ROOT, installed_checkout, mismatch


def test_this_venv_runs_this_checkout() -> None:
    assert installed_checkout() == ROOT.resolve()
    assert mismatch(installed_checkout()) is None


def test_another_checkout_or_no_editable_install_is_refused_with_the_fix(tmp_path: Path) -> None:
    other = mismatch(tmp_path / "other-clone", root=ROOT)
    assert other is not None and f"the checkout at {tmp_path / 'other-clone'}" in other and "scripts/bootstrap.sh" in other
    assert "not installed in editable mode" in (mismatch(None) or "")


def test_a_process_started_outside_the_root_imports_this_checkout(tmp_path: Path) -> None:
    # What the emulated pods do: start in their own WORKDIR, import through the venv's install.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", "import service, trainer; print(service.__file__); print(trainer.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert [Path(line).resolve().parents[1] for line in done.stdout.split()] == [ROOT.resolve()] * 2
