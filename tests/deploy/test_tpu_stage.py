"""scripts/tpu_stage.py: rljob staged for the lent TPU machine in carriable chunks, run here as the chip would run it.

The build fetches from a local wheel source (harness/venv_wheels.py packs the venv's installs; every index and proxy
points at a closed port, so a download attempt fails the build) with a chunk budget small enough that the pip wheel
is split; the printed plan's unpack commands run exactly as printed, from the repository root, in shuffled order,
under this machine's python3 (the chip's is 3.11); a tmp folder stands in for the chip's /tmp. The install is the
real one: a virtualenv of this interpreter's Python (3.12, as on the chip), the staged pip wheel run as a zip.
The trace hook runs in a throwaway virtualenv over a small program, torch left out of its site folder.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.venv_wheels import wheels_of
from scripts.tpu_staging.build import working_tree_bytes
from scripts.tpu_staging.layout import MANIFEST, sha256_file
from scripts.tpu_staging.trace import trace_venv
from scripts.tpu_staging.trace_collect import DistributionIndex, RunDistributions, distributions_of, keep, read_records
from tests.deploy.deploy_support import ROOT

STAGE = ROOT / "scripts" / "tpu_stage.py"
SET = ("mdurl", "markdown-it-py", "pip")  # pip: the installer the chip runs as a zip
CHUNK_MIB = "0.25"  # below the pip wheel's ~2 MB: it travels in parts
CLOSED = "http://127.0.0.1:9"
PLAN_CALL = re.compile(r"^call (\d+) of (\d+)\n  carry: (.*)\n  command: (.*)$", re.M)


def pins() -> dict[str, str]:
    lines = (line.split("#", 1)[0].strip() for line in (ROOT / "constraints.txt").read_text().splitlines())
    return {name.lower(): version for name, _, version in (line.partition("==") for line in lines if line)}


@pytest.fixture
def out_dir() -> Iterator[Path]:
    """A build folder where the plan's carry paths must be: ignored, inside the checkout; removed afterwards."""
    out = ROOT / ".tpu-stage" / f"test-{uuid.uuid4().hex[:8]}"
    yield out
    shutil.rmtree(out, ignore_errors=True)


def offline_env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k.lower() != "no_proxy"}
    env.update({name: CLOSED for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")})
    return {**env, "PIP_INDEX_URL": f"{CLOSED}/simple", **more}


def shell(command: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(1200)  # its commands each run in seconds; the bounds are for a stuck pip
def test_a_build_travels_in_chunks_and_installs_from_the_printed_calls(tmp_path: Path, out_dir: Path) -> None:
    local = tmp_path / "local-wheels"
    wheels_of(list(SET), local)
    requirements = tmp_path / "host_requirements.txt"
    pinned = pins()
    requirements.write_text("".join(f"{name}=={pinned[name]}  # test\n" for name in SET))
    chip = tmp_path / "chip-tmp"
    build = [sys.executable, str(STAGE), "build", "--out", str(out_dir), "--requirements", str(requirements)]
    build += ["--find-links", str(local), "--chunk-mib", CHUNK_MIB, "--chip-tmp", str(chip)]
    env = offline_env()
    built = subprocess.run(build, env=env, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]

    manifest = json.loads((out_dir / MANIFEST).read_text())
    budget = int(float(CHUNK_MIB) * 1024 * 1024)
    (pip,) = (f for f in manifest["files"] if f["name"] == "pip")
    assert len(pip["parts"]) > 1 and all(p["size"] <= budget for f in manifest["files"] for p in f["parts"])
    for f in manifest["files"]:  # the parts, in order, are the wheel
        joined = b"".join((out_dir / p["chunk"] / p["name"]).read_bytes() for p in f["parts"])
        assert len(joined) == f["size"] and f["sha256"] == sha256_file(out_dir / "wheels" / f["file"])
    for chunk in manifest["chunks"]:
        assert (out_dir / chunk["name"] / MANIFEST).read_text() == (out_dir / MANIFEST).read_text()
        assert sum(p.stat().st_size for p in (out_dir / chunk["name"]).iterdir() if p.name != MANIFEST) <= budget

    calls = PLAN_CALL.findall(built.stdout)
    assert calls and len(calls) == len(manifest["chunks"]) + 1 == int(calls[0][1])
    assert (out_dir / "PLAN.txt").read_text() in built.stdout
    unpacks = [(json.loads(carry), command) for _, _, carry, command in calls[:-1]]
    relative = out_dir.relative_to(ROOT).as_posix()
    assert [carry for carry, _ in unpacks] == [[f"{relative}/{c['name']}"] for c in manifest["chunks"]]
    assert json.loads(calls[-1][2]) == []
    install, check = calls[-1][3].split(" && ")

    # A part changed in transit is refused by its hash, and nothing of it lands.
    victim = pip["parts"][0]
    bad = out_dir / "corrupt" / victim["chunk"]
    shutil.copytree(out_dir / victim["chunk"], bad)
    data = bytearray((bad / victim["name"]).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad / victim["name"]).write_bytes(bytes(data))
    refused = shell(f"python3 scripts/tpu_stage.py unpack {bad.relative_to(ROOT)}", env)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"{victim['name']}: its sha256 is" in refused.stderr and victim["sha256"] in refused.stderr
    stage = chip / "rljob-stage"
    assert not (stage / victim["name"]).exists()

    # Every printed unpack, exactly as printed, in shuffled order; the last chunk held back for now.
    random.Random(7).shuffle(unpacks)
    held_carry, held = unpacks.pop()
    for _, command in unpacks:
        done = shell(command, env)
        assert done.returncode == 0, done.stdout + done.stderr
    assert f"still missing 1 of {len(manifest['chunks'])} chunks: {held_carry[0].rsplit('/', 1)[1]}" in done.stdout
    early = shell(install, offline_env(PYTHON=sys.executable))
    assert early.returncode == 1 and f'carry ["{held_carry[0]}"]' in early.stderr and "Traceback" not in early.stderr
    for command in (held, held):  # again: harmless
        done = shell(command, env)
        assert done.returncode == 0, done.stdout + done.stderr
    assert "0 part(s) landed" in done.stdout and "all" in done.stdout

    installed = shell(install, offline_env(PYTHON=sys.executable))
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    assert "== df -h /tmp" in installed.stdout and "== ulimit -a" in installed.stdout
    # Through the environment file, from outside the checkout: the venv's Python, the staged wheels, this checkout,
    # and nothing of the machine's PYTHONPATH (there: its Python 3.11 JAX; here a decoy that fails any import).
    decoy = tmp_path / "machine-pythonpath"
    decoy.mkdir()
    (decoy / "mdurl.py").write_text("raise ImportError('the machine PYTHONPATH was read')\n")
    probe = "import sys, markdown_it, mdurl, trainer; print(sys.executable); print(trainer.__file__); print(markdown_it.__file__)"
    ran = shell(f". {chip}/rljob-env.sh && python -c '{probe}'", offline_env(PYTHONPATH=str(decoy)), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    executable, trainer_file, markdown_file = ran.stdout.split()
    assert executable == f"{chip}/rljob-venv/bin/python" and Path(trainer_file).resolve() == ROOT / "trainer" / "__init__.py"
    assert markdown_file.startswith(f"{chip}/rljob-venv/lib/")
    # The check reads the same file and says what a venv without the trainer's stack lacks.
    checked = shell(check, env)
    assert checked.returncode == 1 and "cannot import maxtext" in checked.stdout + checked.stderr


def test_a_chunk_that_cannot_travel_with_the_tree_is_refused(tmp_path: Path, out_dir: Path) -> None:
    base = [sys.executable, str(STAGE), "build", "--requirements", str(tmp_path / "none.txt"), "--find-links", str(tmp_path)]
    too_big = subprocess.run([*base, "--out", str(out_dir), "--chunk-mib", "63"], capture_output=True, text=True, timeout=120)
    assert too_big.returncode == 1 and "exceed the 64 MiB a device call carries: lower --chunk-mib below" in too_big.stderr
    outside = subprocess.run([*base, "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert outside.returncode == 1 and "is outside the checkout" in outside.stderr


def test_the_tree_is_measured_by_what_its_files_occupy_not_by_their_bytes(tmp_path: Path) -> None:
    # The device refused a call whose files' bytes fit its limit: a tree of many small files weighs more than its bytes.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for i in range(100):
        (tmp_path / f"f{i}.txt").write_text("x")
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "big").write_bytes(b"0" * 100_000)
    measured = working_tree_bytes(tmp_path)
    assert measured >= 101 * (4096 + 512)  # 100 one-byte files and .gitignore, each a block and a header
    assert measured < 101 * (4096 + 512) + 100_000  # what git ignores does not travel


def test_the_trace_hook_records_every_process_and_hides_torch(tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    python = trace_venv(tmp_path / "venv", records, hide_torch=True)
    program = (
        "import importlib.metadata, importlib.util, subprocess, sys, mdurl, google.protobuf\n"
        "assert importlib.util.find_spec('yaml')  # looked for, never loaded: not recorded\n"
        "subprocess.run([sys.executable, '-I', '-c', 'import markdown_it'], env={}, check=True)\n"
        "try:\n    import torch\nexcept ModuleNotFoundError:\n"
        "    try:\n        importlib.metadata.version('torch')\n    except importlib.metadata.PackageNotFoundError:\n"
        "        print('torch hidden')  # as where it is not installed: its metadata gone too\n"
    )
    done = subprocess.run([str(python), "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "torch hidden" in done.stdout, done.stderr
    processes = read_records(records)
    assert len(processes) == 2  # the -I child with an empty environment too
    run = distributions_of(processes, DistributionIndex(["trainer", "service"]))
    # google.protobuf is protobuf's, though google-cloud-storage and others share the top-level name.
    assert set(run.used_by) == {"mdurl", "protobuf", "markdown-it-py"}
    assert run.asked_by["mdurl"] == {"local", "markdown-it-py"}


def test_torch_and_what_only_torch_asks_for_are_left_out() -> None:
    with_torch = RunDistributions(
        used_by={d: {"export check"} for d in ("torch", "sympy", "jinja2", "numpy", "filelock", "regex")},
        asked_by={"torch": {"transformers"}, "sympy": {"torch"}, "jinja2": {"transformers", "torch"}, "filelock": {"torch"}},
    )
    without_torch = RunDistributions(used_by={"numpy": {"train"}, "filelock": {"train"}})
    kept = keep(with_torch, without_torch, {"torch", "sympy", "jinja2", "filelock"})
    assert set(kept) == {"numpy", "filelock", "jinja2", "regex"}
    assert kept["numpy"] == "export check, train" and kept["jinja2"].startswith("only with torch importable")
