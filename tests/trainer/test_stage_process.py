"""A stage's process dies with the trainer, even a SIGKILLed one, and nothing starts a child with
preexec_fn (unsafe in a process with threads, as the trainer and the service are)."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]

# A trainer that runs one stage (a module that writes its pid, then sleeps) with a thread running.
TRAINER = """
import sys, threading
from pathlib import Path
from trainer.runner import StageCommand, run_stage_command

threading.Thread(target=threading.Event().wait, daemon=True).start()
run_stage_command(StageCommand(module="linger", args=(), env={"PYTHONPATH": sys.argv[1]}), Path(sys.argv[2]))
"""


def _wait_for(condition, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_stage_dies_with_a_sigkilled_trainer(tmp_path: Path) -> None:
    modules = tmp_path / "mods"
    modules.mkdir()
    pid_file = tmp_path / "stage.pid"
    (modules / "linger.py").write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n")
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(modules), str(tmp_path / "stage.log")], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    try:
        assert _wait_for(lambda: pid_file.exists() and pid_file.read_text()), "the stage never started"
        stage = int(pid_file.read_text())
        assert psutil.Process(stage).ppid() == trainer.pid and "linger" in psutil.Process(stage).cmdline()
        trainer.kill()
        trainer.wait(timeout=10)
        assert _wait_for(lambda: not _alive(stage), timeout_s=10), "the stage outlived its SIGKILLed trainer"
    finally:
        trainer.kill()
        if pid_file.exists() and pid_file.read_text() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_no_child_is_started_with_preexec_fn() -> None:
    found = []
    for path in sorted([*REPO.joinpath("trainer").rglob("*.py"), *REPO.joinpath("service").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "preexec_fn":
                found.append(f"{path.relative_to(REPO)}:{node.value.lineno}")
    assert found == []
