"""harness/runtime_emulation.py's --uid from root, where the checkout and its venv sit under a directory other users
cannot enter.

A fresh clone in root's home (mode 0700) gave 3 failures and 17 errors in the reward sandbox's runtime tests: the
dropped user could not exec the checkout's venv. Here a venv sits under a 0700 directory, as such a checkout's would,
while the interpreter's installation sits under another (pyenv under /root on these machines)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534


def test_the_dropped_user_runs_a_venv_under_a_closed_directory(tmp_path):
    closed = tmp_path / "home"
    checkout = closed / "rljob"
    venv = checkout / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (purelib / "shared.pth").write_text(sysconfig.get_path("purelib") + "\n")  # this venv's packages, read through
    closed.chmod(0o700)
    python = str(venv / "bin" / "python")
    command = [python, "-m", "harness.runtime_emulation", "--runtime", "runtime-default"]
    command += ["--uid", str(NOBODY)] if os.getuid() == 0 else []  # only root can drop; others run as themselves
    command += ["--", python, "-c", "import os, sys; print(os.getuid(), sys.prefix)"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    expected_uid = NOBODY if os.getuid() == 0 else os.getuid()
    assert done.stdout.split() == [str(expected_uid), str(venv)]
