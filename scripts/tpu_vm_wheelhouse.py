#!/usr/bin/env python3
"""Build a wheelhouse for one TPU VM: rljob's wheel and its pinned trainer + TPU stack, installable with no index.

Run it on any x86-64 machine that reaches the wheels' source (PyPI by default), with a Python 3.11+ that has pip:
the wheels are chosen for the TPU VM (CPython 3.12, manylinux x86-64 up to the VM's glibc), not for the machine
that builds. A pin the index has no wheel for is built into one here first; when it has compiled code (the
default set's pycosat) this Python must be the VM's, 3.12, and the build says so otherwise. Copy the directory to
the VM and run its install.sh there (docs/tpu-vm.md).

    scripts/tpu_vm_wheelhouse.py --out /tmp/rljob-wheelhouse                # rljob[trainer] + jax[tpu], from PyPI
    scripts/tpu_vm_wheelhouse.py --out DIR --find-links WHEELS rljob jax    # another set, from local wheels only

What it writes into --out:
  wheels/            one wheel per project: rljob's (built from this checkout) and what the requirements resolve to
                     under constraints.txt (`pip download --only-binary=:all: --platform ... --python-version ...`)
  requirements.lock  every wheel as `name==version --hash=sha256:...`; install.sh installs it with --require-hashes
  manifest.json      the requirements, the target, the source, and each wheel's name, version, sha256 and size
  install.sh         scripts/tpu-vm-install.sh: a fresh virtualenv from wheels/ with --no-index, then checks
  tiny-tpu-vm.yaml   examples/tiny-tpu-vm.yaml, the first job to run there

Every wheel but rljob's must be at its constraints.txt pin: a project the pins do not name would float to whatever
the source holds that day, so the build stops and names it. MaxText comes in as plain `maxtext` (no extras, as
scripts/bootstrap.sh installs it): `maxtext[tpu-post-train]` pins torch's +cpu build, which only PyTorch's own index
has, and vLLM from GitHub, so the vllm rollout engine is not in the wheelhouse (the trainer image has it).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
INSTALLER = ROOT / "scripts" / "tpu-vm-install.sh"
EXAMPLE = ROOT / "examples" / "tiny-tpu-vm.yaml"
# What rljob's wheel is built from: the trainer Dockerfile's set plus the service (the wheel's packages).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "service", "trainer")
DEFAULT_REQUIREMENTS = ("rljob[trainer]", "jax[tpu]")
# Ubuntu 22.04's glibc: Google's tpu-ubuntu2204-base image is 22.04, and the v2-alpha runtimes are taken to be (not
# read here). A wheel built for a newer glibc would not load there; --glibc for another VM.
DEFAULT_GLIBC = "2.35"
# From manylinux_2_17 (manylinux2014) down, wheels also carry the legacy aliases listed after the 2_N tags.
OLDEST_GLIBC_MINOR = 17
WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


class BuildError(RuntimeError):
    pass


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path = CONSTRAINTS) -> dict[str, str]:
    pins = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonical(name.split("[")[0])] = version.strip()
    return pins


def platforms(glibc: str) -> list[str]:
    """pip matches --platform tags exactly, so every manylinux tag a glibc of this version loads is listed."""
    major, minor = (int(part) for part in glibc.split("."))
    if major != 2 or minor < OLDEST_GLIBC_MINOR:
        raise BuildError(f"--glibc {glibc}: expected 2.N with N >= {OLDEST_GLIBC_MINOR}")
    tags = [f"manylinux_2_{n}_x86_64" for n in range(minor, OLDEST_GLIBC_MINOR - 1, -1)]
    return [*tags, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


def pip_env() -> dict[str, str]:
    """Only the sources on the command line: no PIP_* variable or pip.conf of this machine (a machine-wide
    constraint or find-links would change the set), also in the build environment pip starts for rljob's wheel."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=pip_env())


def source_args(args: argparse.Namespace) -> list[str]:
    if args.find_links:
        return ["--no-index", *(f"--find-links={Path(d).resolve()}" for d in args.find_links)]
    extra = [f"--extra-index-url={url}" for url in args.extra_index_url]
    return [f"--index-url={args.index_url}", *extra]


def build_rljob_wheel(dest: Path, sources: list[str], scratch: Path) -> Path:
    """rljob's wheel from a copy of the files it is made of, so the build leaves nothing in the checkout."""
    src = scratch / "src"
    src.mkdir()
    for name in WHEEL_SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    pip("wheel", "--isolated", "--no-deps", "--disable-pip-version-check", f"--wheel-dir={dest}", *sources, str(src))
    (wheel,) = dest.glob("rljob-*.whl")
    return wheel


def wheel_facts(path: Path) -> dict[str, Any]:
    match = WHEEL_NAME.match(path.name)
    if not match:
        raise BuildError(f"{path.name} is not a wheel file name")
    return {
        "file": path.name,
        "name": canonical(match["name"]),
        "version": match["version"],
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "size": path.stat().st_size,
    }


def check_pins(wheels: list[dict[str, Any]], pins: dict[str, str]) -> None:
    seen: dict[str, str] = {}
    problems = []
    for w in wheels:
        name, version = w["name"], w["version"]
        if name in seen:
            problems.append(f"{name}: two wheels ({seen[name]}, {w['file']})")
        seen[name] = w["file"]
        # A local label (torch's +cpu from PyTorch's index) still satisfies the pin, as for pip's `==`.
        if name != "rljob" and pins.get(name) != version.split("+", 1)[0]:
            problems.append(f"{name}=={version} (constraints.txt pins {pins.get(name, 'nothing')})")
    if problems:
        raise BuildError("the wheelhouse is not the pinned set:\n  " + "\n  ".join(problems))


def sdists_in_resolution(requirements: list[str], sources: list[str], scratch: Path, *extra: str) -> list[tuple[str, str]]:
    """(name, version) of each pinned project the requirements resolve to only as a source archive.

    pip resolves for the target only over wheels, and a few pins have none on PyPI (reasoning-gym's cellpylib, zss
    and the C extension pycosat; tensorflow-datasets' promise: uv built them for the CPU venv). Resolving on this
    machine first, metadata only (`pip install --dry-run --report`), says which. extra: more pip options
    (`--no-deps` for a set that is already the whole closure)."""
    report = scratch / "resolution.json"
    pip("install", "--isolated", "--disable-pip-version-check", "--quiet", "--dry-run", "--ignore-installed", f"--report={report}",
        f"--constraint={CONSTRAINTS}", *extra, *sources, *requirements)  # fmt: skip
    items = json.loads(report.read_text())["install"]
    return [(i["metadata"]["name"], i["metadata"]["version"]) for i in items if not i["download_info"]["url"].endswith(".whl")]


def wheels_from_sdists(sdists: list[tuple[str, str]], sources: list[str], dest: Path, python_version: str) -> list[Path]:
    """Wheels built here for the sdist-only pins. A pure one serves any target; one with compiled code is built for
    this Python and this machine's glibc, so it serves the target only when this Python is the target's."""
    for name, version in sdists:
        pip("wheel", "--isolated", "--disable-pip-version-check", "--no-deps", f"--no-binary={name}", f"--wheel-dir={dest}",
            *sources, f"{name}=={version}")  # fmt: skip
    built = sorted(dest.glob("*.whl"))
    cp = f"cp{python_version.replace('.', '')}"
    wrong = [p.name for p in built if not p.name.endswith("-none-any.whl") and f"-{cp}-" not in p.name]
    if wrong:
        raise BuildError(f"{', '.join(wrong)}: the index has no wheel and this Python is not {python_version}: run with that Python")
    return built


def glibc_needed(wheel: Path) -> str | None:
    """The newest glibc symbol version the wheel's shared objects ask for (as auditwheel reads them), if any."""
    with zipfile.ZipFile(wheel) as archive:
        found = [int(m) for n in archive.namelist() if n.endswith(".so") for m in re.findall(rb"GLIBC_2\.(\d+)", archive.read(n))]
    return f"2.{max(found)}" if found else None


def check_built_for(built: list[Path], glibc: str) -> list[dict[str, Any]]:
    """What each wheel built here needs of the VM's glibc; a newer one than --glibc stops the build."""
    facts = [{"file": p.name, "glibc": glibc_needed(p)} for p in built]
    minor = int(glibc.split(".")[1])
    newer = [f"{f['file']} needs glibc {f['glibc']}" for f in facts if f["glibc"] and int(f["glibc"].split(".")[1]) > minor]
    if newer:
        raise BuildError(f"{'; '.join(newer)}, newer than the VM's {glibc}: build on a machine with an older glibc")
    return facts


def download_for_target(
    requirements: list[str],
    sources: list[str],
    dest: Path,
    scratch: Path,
    *,
    python_version: str,
    glibc: str,
    local: list[str] | None = None,
    no_deps: bool = False,
) -> tuple[list[str], list[dict[str, Any]]]:
    """Wheels of the requirements for the target (CPython python_version, manylinux up to glibc) into dest, under
    constraints.txt: what the index has as a wheel is downloaded, a pin it has only as an sdist is built here first.
    local: more --find-links options tried before the sources; no_deps: the requirements are the whole set.
    Returns the platform tags asked for and what each wheel built here needs of glibc."""
    built_dir = scratch / "built"
    built_dir.mkdir()
    local = [*(local or []), f"--find-links={built_dir}"]
    deps = ["--no-deps"] if no_deps else []
    sdists = sdists_in_resolution(requirements, [*local, *sources], scratch, *deps)
    built = wheels_from_sdists(sdists, sources, built_dir, python_version)
    built_here = check_built_for(built, glibc)
    target_platforms = platforms(glibc)
    if any(p.name.endswith("-linux_x86_64.whl") for p in built):
        target_platforms.append("linux_x86_64")  # the tag of a wheel built here (PyPI takes none)
    target = ["--only-binary=:all:", f"--python-version={python_version}", "--implementation=cp"]
    target += [f"--abi=cp{python_version.replace('.', '')}", *(f"--platform={p}" for p in target_platforms)]
    pip("download", "--isolated", "--disable-pip-version-check", f"--dest={dest}", *deps, *target, f"--constraint={CONSTRAINTS}",
        *local, *sources, *requirements)  # fmt: skip
    return target_platforms, built_here


def build(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    out = Path(args.out).resolve()
    if out.exists() and any(out.iterdir()):
        raise BuildError(f"{out} is not empty: a wheelhouse is built into a new directory")
    wheels_dir = out / "wheels"
    wheels_dir.mkdir(parents=True)
    sources = source_args(args)
    with tempfile.TemporaryDirectory(prefix="rljob-wheelhouse-") as tmp:
        scratch = Path(tmp)
        rljob_wheel = build_rljob_wheel(scratch / "rljob", sources, scratch)
        version = wheel_facts(rljob_wheel)["version"]
        # rljob itself comes from its fresh wheel at this version, never from an index.
        requirements = [re.sub(r"^rljob(\[[^\]]*\])?$", rf"rljob\g<1>=={version}", r) for r in args.requirements]
        local = [f"--find-links={rljob_wheel.parent}"]
        target_platforms, built_here = download_for_target(
            requirements, sources, wheels_dir, scratch, python_version=args.python_version, glibc=args.glibc, local=local
        )
    wheels = sorted((wheel_facts(p) for p in wheels_dir.glob("*.whl")), key=lambda w: w["name"])
    check_pins(wheels, read_pins())
    lock = [f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}" for w in wheels]
    (out / "requirements.lock").write_text("\n".join(lock) + "\n")
    shutil.copy2(INSTALLER, out / "install.sh")
    shutil.copy2(EXAMPLE, out / EXAMPLE.name)
    manifest = {
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "rljob_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or None,
        "requirements": requirements,
        "python_version": args.python_version,
        "glibc": args.glibc,
        "platforms": target_platforms,
        "source": sources,
        "pip": importlib.metadata.version("pip"),
        # Built from sdists on this machine; one with compiled code for its Python, needing at most that glibc.
        "built_here": built_here,
        "build_host": {"python": platform.python_version(), "libc": " ".join(platform.libc_ver())},
        "wheels": wheels,
        "total_bytes": sum(w["size"] for w in wheels),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """Where wheels come from (source_args reads them): an index, or local folders only."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--index-url", default="https://pypi.org/simple", help="the package index (default: %(default)s)")
    source.add_argument("--find-links", action="append", default=[], metavar="DIR", help="take wheels only from DIR (repeatable); no index")
    parser.add_argument("--extra-index-url", action="append", default=[], metavar="URL", help="another index beside --index-url")


def check_source_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.find_links and args.extra_index_url:
        parser.error("--extra-index-url goes with an index, not with --find-links")


def main(argv: list[str]) -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="scripts/tpu_vm_wheelhouse.py", description=__doc__, formatter_class=formatter)
    parser.add_argument("requirements", nargs="*", default=list(DEFAULT_REQUIREMENTS), help="what to install (default: %(default)s)")
    parser.add_argument("--out", required=True, help="the wheelhouse directory to create (must be new or empty)")
    parser.add_argument("--python-version", default="3.12", help="the TPU VM's Python, major.minor (default: %(default)s)")
    parser.add_argument("--glibc", default=DEFAULT_GLIBC, help="the TPU VM's glibc (default: %(default)s, Ubuntu 22.04)")
    add_source_arguments(parser)
    args = parser.parse_args(argv)
    check_source_arguments(parser, args)
    try:
        manifest = build(args)
    except (BuildError, subprocess.CalledProcessError) as e:
        print(f"tpu_vm_wheelhouse: {e}", file=sys.stderr)
        return 1
    size, seconds = manifest["total_bytes"] / 1e9, manifest["build_seconds"]
    print(f"tpu_vm_wheelhouse: {len(manifest['wheels'])} wheels, {size:.2f} GB, in {seconds} s -> {Path(args.out).resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
