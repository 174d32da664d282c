"""On the chip's machine: unpack the carried chunks, install the wheels into a Python 3.12 virtualenv, check it.

Standard library only and nothing newer than Python 3.11: the machine's own python3 (3.11, with its JAX 0.10.2 on
PYTHONPATH) runs this. What install makes:
- a virtualenv of the machine's Python 3.12 (`--without-pip`; the staged pip wheel runs as a zip) holding every
  staged wheel, installed with no index and no dependency resolution (the set is the whole closure). A virtualenv,
  not a --target folder on PYTHONPATH: the trainer starts every stage and reward worker with sys.executable, and the
  reward sandbox starts its workers `python -I`, which ignores PYTHONPATH but reads the venv's site-packages;
- a .pth in it naming a link to the checkout, re-pointed by the environment file at each call (each call lays the
  working tree down afresh);
- the environment file: the venv first on PATH (`python` is 3.12), the machine's PYTHONPATH dropped (it points at
  its 3.11 JAX, whose compiled modules a 3.12 cannot load), TPU_LIBRARY_PATH at the machine's own libtpu.so (JAX
  0.11.1 ran the chip with it; the libtpu wheel jax pins is not staged), and no hub.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from .layout import MANIFEST, StageError, carry_of, chip_paths, chunks_missing, load_manifest, parts_of_chunk, sha256_file

REPO = Path(__file__).resolve().parents[2]
VENV_MARKER = ".rljob-stage"  # a venv install made, so a later install may replace it
# What the next step needs to know about this machine and nobody has read yet.
PROBES = (
    "ls -la /dev /dev/vfio /dev/accel* 2>&1 | head -50",
    "env | grep -i tpu",
    "df -h /tmp",
    "nproc",
    "ulimit -a",
)
PROBE_TIMEOUT_S = 30


def say(message: str) -> None:
    print(f"tpu_stage: {message}", flush=True)


def _copy_verified(src: Path, dst: Path, part: dict[str, Any]) -> None:
    """src to dst, hashed as it is written; a copy that differs from the manifest is removed and refused."""
    tmp = dst.with_name(dst.name + ".landing")
    digest = hashlib.sha256()
    with src.open("rb") as fin, tmp.open("wb") as fout:
        while block := fin.read(4 * 1024 * 1024):
            digest.update(block)
            fout.write(block)
    if digest.hexdigest() != part["sha256"]:
        tmp.unlink()
        raise StageError(
            f"{src}: its sha256 is {digest.hexdigest()}, the manifest says {part['sha256']}: the part changed after the build; "
            f"build again, or carry {src.parent.name} again"
        )
    tmp.replace(dst)


def unpack(chunk_dir: Path) -> int:
    """Copy one carried chunk's parts into the stage folder, each checked against its sha256; again is harmless."""
    chunk_dir = chunk_dir.resolve()
    manifest = load_manifest(chunk_dir / MANIFEST)
    chunk = chunk_dir.name
    if chunk not in {c["name"] for c in manifest["chunks"]}:
        raise StageError(f"{chunk_dir} is not one of this build's chunks ({', '.join(c['name'] for c in manifest['chunks'])})")
    stage = Path(chip_paths(manifest).stage)
    stage.mkdir(parents=True, exist_ok=True)
    staged_manifest = stage / MANIFEST
    if staged_manifest.exists():
        if load_manifest(staged_manifest)["build_id"] != manifest["build_id"]:
            raise StageError(f"{stage} holds chunks of another build: remove it (rm -rf {stage}) and unpack this build's chunks")
    else:
        shutil.copyfile(chunk_dir / MANIFEST, staged_manifest)
    landed = already = 0
    for part in parts_of_chunk(manifest, chunk):
        src, dst = chunk_dir / part["name"], stage / part["name"]
        if not src.is_file():
            raise StageError(f"{src} is missing from the carried chunk: carry {carry_of(manifest, chunk)} whole")
        if dst.is_file() and dst.stat().st_size == part["size"] and sha256_file(dst) == part["sha256"]:
            already += 1
            continue
        _copy_verified(src, dst, part)
        landed += 1
    say(f"{chunk}: {landed} part(s) landed in {stage}, {already} already there")
    missing = chunks_missing(manifest, stage)
    if missing:
        carries = ", ".join(carry_of(manifest, c) for c in missing)
        say(f"still missing {len(missing)} of {len(manifest['chunks'])} chunks: {' '.join(missing)} (carry {carries})")
    else:
        say(f"all {len(manifest['chunks'])} chunks are here; next: python3 scripts/tpu_stage.py install --stage {stage}")
    return 0


def join_files(manifest: dict[str, Any], stage: Path) -> list[Path]:
    """Every staged file whole in the stage folder, its sha256 checked; the split ones joined from their parts."""
    missing = chunks_missing(manifest, stage)
    if missing:
        lines = "\n".join(f'  {c}: carry ["{carry_of(manifest, c)}"]' for c in missing)
        raise StageError(
            f"{len(missing)} of {len(manifest['chunks'])} chunks are not in {stage} (a machine that went cold lost them all):\n"
            f"{lines}\nunpack each, in one warm run of calls, then install again"
        )
    files = []
    for f in manifest["files"]:
        whole = stage / f["file"]
        if len(f["parts"]) > 1 and not (whole.is_file() and sha256_file(whole) == f["sha256"]):
            joining = whole.with_name(whole.name + ".joining")
            with joining.open("wb") as out:
                for part in f["parts"]:
                    with (stage / part["name"]).open("rb") as src:
                        shutil.copyfileobj(src, out, 4 * 1024 * 1024)
            joining.replace(whole)
        if sha256_file(whole) != f["sha256"]:
            raise StageError(f"{whole}: the joined file's sha256 differs from the manifest's: remove {stage} and unpack again")
        files.append(whole)
    return files


def _python_version(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_python(want: str, given: str | None) -> str:
    """The wheels' Python (binary wheels are built for one minor version): --python or $PYTHON, else python3.X on
    PATH, a python3 that is 3.X, or pyenv's (its shims answer only where a version is selected)."""
    if given:
        if _python_version(given) != want:
            raise StageError(f"{given} is not Python {want}, which the wheels are built for")
        return given
    roots = [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        roots.insert(0, subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip())
    candidates = [shutil.which(f"python{want}"), shutil.which("python3")]
    for root in filter(None, roots):
        versions = sorted(Path(root, "versions").glob(f"{want}.*/bin/python{want}"), reverse=True)
        candidates.extend(str(v) for v in versions)
    for candidate in filter(None, candidates):
        if _python_version(candidate) == want:
            return candidate
    looked = ", ".join(dict.fromkeys(c for c in candidates if c)) or "nothing found"
    raise StageError(f"no Python {want} here (looked at python{want}, python3 and pyenv's: {looked}); pass --python or PYTHON")


def find_libtpu() -> str | None:
    """This machine's own libtpu.so: TPU_LIBRARY_PATH if set, else the libtpu package this python3 (the machine's
    3.11, its PYTHONPATH) finds, else one under a PYTHONPATH folder."""
    given = os.environ.get("TPU_LIBRARY_PATH")
    if given and Path(given).is_file():
        return given
    spec = importlib.util.find_spec("libtpu")
    folders = list(spec.submodule_search_locations or []) if spec else []
    folders += [str(Path(p) / "libtpu") for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for folder in folders:
        found = sorted(Path(folder).glob("libtpu*.so"))
        if found:
            return str(found[0])
    return None


def _pip_env() -> dict[str, str]:
    """No PIP_* setting or pip.conf of this machine: only the staged wheels."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def _probe(python: str) -> None:
    """Facts about this machine for the next step, printed: devices, TPU variables, disk, cores, limits."""
    for command in (*PROBES, f"{python} -V; readlink -f {python}; {python} -m pip --version 2>&1 | head -1"):
        print(f"== {command}", flush=True)
        try:
            subprocess.run(["bash", "-c", command], timeout=PROBE_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            print(f"(probe failed: {e})", flush=True)


def write_env_file(path: Path, venv: Path, repo_link: str, libtpu: str | None) -> None:
    tpu = f"export TPU_LIBRARY_PATH={libtpu}" if libtpu else "# no libtpu.so was found at install: JAX will not see the TPU"
    path.write_text(
        f"""# Written by scripts/tpu_stage.py install on {time.strftime("%Y-%m-%d %H:%M:%S")}: source it from the checkout's root.
# The checkout the call runs in, through the link the venv's rljob-repo.pth names:
if [ -d trainer ] && [ -d service ]; then ln -sfn "$PWD" {repo_link}; fi
export PATH="{venv}/bin:$PATH"
# The machine's PYTHONPATH names its own Python 3.11 JAX; Python 3.12 must not see it.
unset PYTHONPATH
{tpu}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
"""
    )


def install(stage: Path, python: str | None) -> int:
    started = time.monotonic()
    manifest = load_manifest(stage / MANIFEST)
    paths = chip_paths(manifest)
    files = join_files(manifest, stage)
    py = find_python(manifest["python_version"], python or os.environ.get("PYTHON"))
    _probe(py)
    libc, have = platform.libc_ver()
    need = tuple(int(x) for x in manifest["glibc"].split("."))
    if libc == "glibc" and tuple(int(x) for x in have.split(".")[:2]) < need:
        raise StageError(f"this machine's glibc is {have}; the wheels need {manifest['glibc']}: build with --glibc {have}")
    venv = Path(paths.venv)
    if venv.exists():
        if not (venv / VENV_MARKER).exists():
            raise StageError(f"{venv} exists and is not one install made: remove it or build with another --chip-tmp")
        shutil.rmtree(venv)
    subprocess.run([py, "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / VENV_MARKER).write_text(f"{manifest['build_id']}\n")
    venv_python = str(venv / "bin" / "python")
    installer = stage / manifest["installer"]
    wheels = [str(f) for f in files if f.name.endswith(".whl")]
    pip = [venv_python, str(installer / "pip"), "install", "--isolated", "--no-index", "--no-deps", "--no-compile"]
    pip += ["--no-cache-dir", "--disable-pip-version-check", "--quiet", *wheels]
    say(f"installing {len(wheels)} wheels into {venv} with {py} (pip from {installer.name})")
    subprocess.run(pip, check=True, env=_pip_env())
    site = subprocess.run([venv_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True)
    Path(site.stdout.strip(), "rljob-repo.pth").write_text(f"{paths.repo_link}\n")
    Path(paths.repo_link).unlink(missing_ok=True)
    Path(paths.repo_link).symlink_to(REPO)
    libtpu = find_libtpu()
    write_env_file(Path(paths.env_file), venv, paths.repo_link, libtpu)
    say(f"TPU_LIBRARY_PATH: {libtpu or 'none found (JAX would look for the libtpu wheel, which is not staged)'}")
    say(f"installed {len(wheels)} wheels in {time.monotonic() - started:.0f} s; before each run: . {paths.env_file}")
    return 0


CHECK_SCRIPT = """
import importlib, importlib.metadata as md, sys
print("python", sys.version.split()[0], sys.executable)
for name in ("jax", "jaxlib", "maxtext", "google-tunix", "flax", "transformers", "numpy"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "not installed")
failed = []
for module in ("maxtext", "trainer.cli", "service.cli.main", "jax"):
    try:
        importlib.import_module(module)
    except Exception as e:
        failed.append(f"{module} ({type(e).__name__}: {e})")
if failed:
    sys.exit("check: cannot import " + "; ".join(failed))
import jax, trainer
print("trainer from", trainer.__file__)
devices = jax.devices()
print("jax devices:", devices)
if sys.argv[1] == "1" and devices[0].platform != "tpu":
    sys.exit("check: --expect-tpu, but JAX sees no TPU (one process at a time can hold it; TPU_LIBRARY_PATH in the env file)")
"""


def check(stage: Path, expect_tpu: bool) -> int:
    """Through the environment file, as a run would: the versions, the imports, the trainer's CLI, JAX's devices."""
    env_file = chip_paths(load_manifest(stage / MANIFEST)).env_file
    if not Path(env_file).is_file():
        raise StageError(f"{env_file} is missing: run install first")
    script = f"set -e\n. {env_file}\npython - {int(expect_tpu)} <<'CHECK'\n{CHECK_SCRIPT}\nCHECK\n"
    script += "python -m trainer --help > /dev/null && echo 'check: python -m trainer --help works'"
    result = subprocess.run(["bash", "-c", script], cwd=REPO, check=False)
    if result.returncode != 0:
        raise StageError(f"the check failed (exit {result.returncode}): see above")
    return 0
