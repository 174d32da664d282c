"""A trainer that finishes is not failed because its log cannot be written: the local launcher's runner
(service/adapters/local/job_runner.py) copies the trainer's output into the log, and a log on a full
disk (here /dev/full, which fails every write with ENOSPC) costs log lines, not the exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from service.adapters.local import job_runner

# Writes plenty, then exits 0; writing that output straight to a full disk fails its flush (exit 120).
TRAINER = "import sys\nfor i in range(2000):\n    print('step', i, 'x' * 200)\nsys.exit(0)\n"


def _run(tmp_path: Path, log: str) -> tuple[int, dict[str, object]]:
    exit_file = tmp_path / "exit.json"
    with open(log, "wb") as out:
        done = subprocess.run(
            [
                sys.executable,
                job_runner.__file__,
                "--job-id",
                "rl-fulllogfull0",
                "--exit-file",
                str(exit_file),
                "--",
                sys.executable,
                "-c",
                TRAINER,
            ],
            input=job_runner.START_LINE,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=60,
        )
    return done.returncode, json.loads(exit_file.read_text())


def test_a_full_log_disk_loses_lines_not_the_trainers_exit_code(tmp_path: Path) -> None:
    returncode, recorded = _run(tmp_path, "/dev/full")
    assert returncode == 0 and recorded["exit_code"] == 0


def test_the_log_still_gets_every_line_when_it_can_be_written(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    returncode, recorded = _run(tmp_path, str(log))
    lines = log.read_text().splitlines()
    assert returncode == 0 and recorded["exit_code"] == 0
    assert len(lines) == 2000 and lines[0].startswith("step 0 ") and lines[-1].startswith("step 1999 ")


def test_without_the_runner_the_same_trainer_fails_on_a_full_disk() -> None:
    # The control: the trainer writing to the full disk itself exits with an error.
    with open("/dev/full", "wb") as out:
        done = subprocess.run([sys.executable, "-c", TRAINER], stdout=out, stderr=subprocess.STDOUT, timeout=60)
    assert done.returncode != 0


# The disk fills while the trainer runs. The runner's state directory is a 256 KiB tmpfs of its own (a user and a
# mount namespace, as the emulated kubelet's containers get: harness/podrun/pods/ns_exec.py), and the trainer writes
# into it until ENOSPC before it exits. The helper prints the runner's status and the exit file as the service
# would read it (the tmpfs goes with the namespace).
IN_A_SMALL_TMPFS = """
import ctypes, json, os, subprocess, sys
state, runner, trainer, reservable = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "yes"
uid, gid = os.getuid(), os.getgid()
os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNS)
for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
    with open(f"/proc/self/{name}", "w") as f:
        f.write(text)
libc = ctypes.CDLL(None, use_errno=True)
assert libc.mount(None, b"/", None, ctypes.c_ulong(0x4000 | (1 << 18)), None) == 0, ctypes.get_errno()  # private
assert libc.mount(b"tmpfs", state.encode(), b"tmpfs", ctypes.c_ulong(0), b"size=256k") == 0, ctypes.get_errno()
exit_file = os.path.join(state, "exit.json")
if not reservable:  # the reservation's name taken by a directory: as if the disk were full at the start
    os.mkdir(exit_file + ".reserved")
done = subprocess.run([sys.executable, runner, "--job-id", "rl-fulldiskexit", "--exit-file", exit_file, "--",
                       sys.executable, "-c", trainer], input=b"start\\n", capture_output=True, timeout=60)
recorded = open(exit_file).read() if os.path.exists(exit_file) else None
print(json.dumps({"returncode": done.returncode, "stderr": done.stderr.decode(), "recorded": recorded,
                  "left": sorted(os.listdir(state))}))
"""

FILLS_THE_DISK = """
import os, sys
try:
    with open(os.path.join({state!r}, "checkpoint"), "wb") as f:
        while True:
            f.write(b"x" * 4096)
            f.flush()
except OSError as e:
    print("the disk is full:", e, flush=True)
sys.exit({code})
"""


def _run_on_a_filling_disk(tmp_path: Path, code: int, *, reservable: bool = True) -> dict:
    state = tmp_path / "state"
    state.mkdir()
    trainer = FILLS_THE_DISK.format(state=str(state), code=code)
    done = subprocess.run(
        [sys.executable, "-c", IN_A_SMALL_TMPFS, str(state), job_runner.__file__, trainer, "yes" if reservable else "no"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("code", [0, 3])
def test_a_disk_that_fills_during_the_run_still_gets_the_exit_code(tmp_path: Path, code: int) -> None:
    """Before the reservation, the runner's exit-file write failed with ENOSPC, it died with a traceback (exit 1)
    and the job of a trainer that had finished cleanly ended FAILED (or GONE, the service restarted meanwhile)."""
    run = _run_on_a_filling_disk(tmp_path, code)
    assert run["returncode"] == code, run["stderr"]
    assert run["recorded"] is not None and json.loads(run["recorded"])["exit_code"] == code  # a restarted service's read
    assert run["left"] == ["checkpoint", "exit.json"] and "Traceback" not in run["stderr"]


def test_the_filled_disk_refuses_a_new_file(tmp_path: Path) -> None:
    """The control for the setting: once the trainer has filled it, a new exit file cannot be written there
    (what the runner did before the reservation)."""
    run = _run_on_a_filling_disk(tmp_path, 0, reservable=False)
    assert "cannot record the exit code" in run["stderr"] and "No space left on device" in run["stderr"]
    assert run["recorded"] is None
    # ... and the runner still exits with the trainer's code, which a launcher still watching it takes.
    assert run["returncode"] == 0 and "Traceback" not in run["stderr"]
