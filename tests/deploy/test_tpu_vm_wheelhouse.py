"""scripts/tpu_vm_wheelhouse.py and the install.sh it ships, run for real on CPU (docs/tpu-vm.md).

The shipped scripts build a wheelhouse and install it offline into a fresh virtualenv, then the trainer's CLI runs
from there. The build resolves for the TPU VM's target (CPython 3.12, manylinux up to glibc 2.35) under
constraints.txt, exactly as for the full set; what differs is the set and the source. The full set (rljob[trainer]
and jax[tpu]: torch, libtpu, ...) is gigabytes from PyPI, built by hand (docs/tpu-vm.md gives the run and its
figures); here the set is rljob itself (its service dependencies), maxtext and jax with jaxlib, and the source is
`--find-links` over wheels packed from this venv's installs (harness/venv_wheels.py), since the suite downloads
nothing. Every HTTP request the scripts' pip makes, as an index or through a proxy, lands on a recording server:
the offline install must make none.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.venv_wheels import wheels_of
from tests.deploy.deploy_support import ROOT

BUILD = ROOT / "scripts" / "tpu_vm_wheelhouse.py"
INSTALLER = ROOT / "scripts" / "tpu-vm-install.sh"
SPEC = ROOT / "examples" / "tiny-tpu-vm.yaml"
# The suite's set: what rljob's wheel needs, MaxText (no dependencies of its own) and JAX on CPU.
SUITE_SET = ("rljob", "maxtext", "jax")
BASE_PYTHON = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"


@dataclass
class Recorder:
    """A loopback HTTP server that answers 404 to everything and keeps each request's line."""

    url: str
    seen: list[str]


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            seen.append(f"{self.command} {self.path}")
            self.send_error(404)

        do_GET = do_HEAD = do_CONNECT = _refuse

        def log_message(self, format: str, *args: object) -> None:  # the test reads `seen`, not stderr
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Recorder(f"http://127.0.0.1:{server.server_address[1]}", seen)
    server.shutdown()


@pytest.fixture
def offline_env(recorder: Recorder) -> dict[str, str]:
    """Any index or proxy pip might reach for is the recorder (a pip without --isolated reads PIP_INDEX_URL)."""
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    env.update({name: recorder.url for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")})
    env.update(PIP_INDEX_URL=f"{recorder.url}/simple", PIP_EXTRA_INDEX_URL=f"{recorder.url}/extra", PYTHON=str(BASE_PYTHON))
    return env


def offline_run(cmd: list[str], env: dict[str, str], recorder: Recorder, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run cmd; the first request the recorder sees stops it and fails the test (pip would otherwise retry the
    unreachable index for minutes before it gave up or went on with the wheelhouse)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True, start_new_session=True)
        deadline = time.monotonic() + timeout
        while process.poll() is None and not recorder.seen and time.monotonic() < deadline:
            time.sleep(0.2)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            if not recorder.seen:
                pytest.fail(f"{cmd[0]} ran past {timeout} s")
        if recorder.seen:
            pytest.fail(f"{Path(cmd[1] if cmd[0] == sys.executable else cmd[0]).name} reached for an index: {recorder.seen[:5]}")
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, process.returncode, out.read(), err.read())


def pins() -> dict[str, str]:
    lines = (line.split("#", 1)[0].strip() for line in (ROOT / "constraints.txt").read_text().splitlines())
    return {name.lower(): version for name, _, version in (line.partition("==") for line in lines if line)}


def check_wheelhouse(wheelhouse: Path) -> None:
    """The pinned closure, each wheel at the hash the manifest and the lock give, and the files the VM needs."""
    manifest = json.loads((wheelhouse / "manifest.json").read_text())
    files = sorted(p.name for p in (wheelhouse / "wheels").glob("*.whl"))
    assert sorted(w["file"] for w in manifest["wheels"]) == files
    names = {w["name"] for w in manifest["wheels"]}
    assert {"rljob", "maxtext", "jax", "jaxlib", "numpy", "pydantic", "fastapi"} <= names and "setuptools" not in names
    pinned = pins()
    for w in manifest["wheels"]:
        assert hashlib.sha256((wheelhouse / "wheels" / w["file"]).read_bytes()).hexdigest() == w["sha256"]
        assert w["name"] == "rljob" or pinned[w["name"]] == w["version"], w
    lock = (wheelhouse / "requirements.lock").read_text().splitlines()
    assert sorted(lock) == sorted(f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}" for w in manifest["wheels"])
    assert manifest["python_version"] == "3.12" and "manylinux_2_35_x86_64" in manifest["platforms"]
    assert (wheelhouse / "install.sh").read_bytes() == INSTALLER.read_bytes() and os.access(wheelhouse / "install.sh", os.X_OK)
    assert (wheelhouse / SPEC.name).read_bytes() == SPEC.read_bytes()


def test_the_wheelhouse_installs_offline_and_the_trainer_plans_from_the_fresh_venv(
    tmp_path: Path, tiny_dir: Path, recorder: Recorder, offline_env: dict[str, str]
) -> None:
    """One test for the whole path: the build and the install are its cost, and pytest-xdist gives each test to
    whichever worker is free, so tests sharing them through a fixture could pay for them twice."""
    local = tmp_path / "local-wheels"
    wheels_of([*SUITE_SET, "setuptools"], local, leave_out=["rljob"])  # setuptools: rljob's build backend
    wheelhouse = tmp_path / "wh"
    build = [sys.executable, str(BUILD), "--out", str(wheelhouse), "--find-links", str(local), *SUITE_SET]
    result = offline_run(build, offline_env, recorder, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    check_wheelhouse(wheelhouse)

    venv = tmp_path / "vm" / "venv"
    env = dict(offline_env, RLJOB_TINY_DIR=str(tiny_dir), RLJOB_OUTPUT="/tmp/rljob-runs")
    spec = str(wheelhouse / SPEC.name)
    result = offline_run([str(wheelhouse / "install.sh"), "--venv", str(venv), "--spec", spec], env, recorder, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "No broken requirements found." in result.stdout and "install.sh: jax 0.11.1 sees 1 cpu device(s)" in result.stdout
    # The trainer and MaxText are the venv's wheels, not this checkout (the plans ran from outside it).
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert (site / "trainer" / "cli.py").exists() and f"{site}/maxtext/configs/post_train/rl.yml" in result.stdout
    plan_cmd = [str(venv / "bin" / "python"), "-m", "trainer", "plan", "--json", "--spec", spec]
    plan = json.loads(
        subprocess.run(plan_cmd, env=dict(env, HF_HUB_OFFLINE="1"), cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    )
    train = next(s["command"] for s in plan["stages"] if s["stage"] == "train")
    assert f"{site}/maxtext/configs/post_train/rl.yml" in train and "chips_per_vm=8" in train and "hardware=cpu" not in train

    check = [str(wheelhouse / "install.sh"), "--venv", str(venv), "--check", "--expect-tpu"]
    result = subprocess.run(check, env=offline_env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "--expect-tpu, but JAX found no TPU" in result.stderr

    # The copy to the VM is checked: pip compares every wheel with the hash the build locked.
    copy = tmp_path / "copied"
    shutil.copytree(wheelhouse, copy, copy_function=os.link)
    (victim,) = (copy / "wheels").glob("mdurl-*.whl")
    data = victim.read_bytes()
    victim.unlink()  # a hard link: the built wheel stays as it was
    victim.write_bytes(data)
    with zipfile.ZipFile(victim, "a") as archive:
        archive.writestr("mdurl/planted.py", "print('not what was built')\n")
    result = offline_run([str(copy / "install.sh"), "--venv", str(tmp_path / "venv2")], offline_env, recorder, timeout=300)
    assert result.returncode != 0 and "DO NOT MATCH THE HASHES" in result.stderr


def test_a_project_constraints_txt_does_not_pin_stops_the_build(tmp_path: Path, recorder: Recorder, offline_env: dict[str, str]) -> None:
    local = tmp_path / "local-wheels"
    wheels_of(["setuptools"], local)
    with zipfile.ZipFile(local / "unpinned_pkg-1.0-py3-none-any.whl", "w") as archive:
        info = "unpinned_pkg-1.0.dist-info"
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: unpinned-pkg\nVersion: 1.0\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    cmd = [sys.executable, str(BUILD), "--out", str(tmp_path / "wh"), "--find-links", str(local), "unpinned-pkg"]
    result = offline_run(cmd, offline_env, recorder, timeout=300)
    assert result.returncode == 1 and "unpinned-pkg==1.0 (constraints.txt pins nothing)" in result.stderr


def test_every_vm_the_tpu_example_names_is_a_valid_hardware_block(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The example's comment lists accelerator and chips_per_vm pairs for the other VMs; each one validates."""
    from trainer.contract.spec.file import load_spec_file

    text = SPEC.read_text()
    pairs = re.findall(r"(v\d+e-\d+) (\d+)\b", text)
    assert len(pairs) == 5, pairs
    monkeypatch.setenv("RLJOB_TINY_DIR", str(tmp_path))
    monkeypatch.setenv("RLJOB_OUTPUT", str(tmp_path))
    for accelerator, chips in pairs:
        variant = tmp_path / f"{accelerator}.yaml"
        variant.write_text(
            text.replace("accelerator: v6e-8\n  chips_per_vm: 8\n", f"accelerator: {accelerator}\n  chips_per_vm: {chips}\n")
        )
        assert load_spec_file(variant).hardware.accelerator == accelerator
