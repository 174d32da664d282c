"""Nothing the deployment refers to is missing: every environment variable the code reads is set by a
manifest or Dockerfile or documented in docs/deploy-gke.md; every command and module that a Dockerfile
or manifest names exists; every probe path is a route; the Kubernetes API is called from the adapter only
(whose verbs test_deploy_rbac.py checks against the Role)."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from harness.podrun.pods.images import DOCKERFILES, parse_dockerfile
from harness.podrun.pods.plan import StartError, resolve_executable
from tests.deploy.deploy_support import OVERLAYS, ROOT, one
from tests.deploy.env_scan import direct_env_reads, settings_env_names
from tests.deploy.k8s_api_scan import scan_package

DOC = (ROOT / "docs" / "deploy-gke.md").read_text()
VENV = Path(sys.prefix)


def _code_reads() -> dict[str, str]:
    reads = {**settings_env_names(ROOT / "service"), **direct_env_reads(ROOT / "service")}
    reads.update(direct_env_reads(ROOT / "trainer"))
    return reads


def _set_by_deployment(rendered) -> set[str]:
    from harness.podrun.manifests import settings, spec
    from service.adapters.k8s.render import render_manifests

    names: set[str] = set()
    for objs in rendered.values():
        for cm in (o for o in objs if o["kind"] == "ConfigMap"):
            names |= set(cm.get("data", {}))
        names |= {e["name"] for e in one(objs, "Deployment", "rljob-service")["spec"]["template"]["spec"]["containers"][0]["env"]}
    job = render_manifests(spec("v6e-8", 8), "rl-000000000001", settings())[1]
    names |= {e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    for path in DOCKERFILES.values():
        names |= set(parse_dockerfile(path.read_text(), path).env)
    return names


def _documented() -> set[str]:
    return {n for n in re.findall(r"`([A-Z][A-Z0-9_]+)`", DOC) if not n.endswith("_")}


def test_every_environment_variable_the_code_reads_is_set_or_documented(rendered):
    reads = _code_reads()
    assert {"RLJOB_DATABASE_URL", "RLJOB_K8S_IMAGE", "HF_TOKEN", "RLJOB_WORK_DIR"} <= set(reads)  # the scan sees them
    missing = sorted(set(reads) - _set_by_deployment(rendered) - _documented())
    assert not missing, (
        "read by the code but neither set in k8s/ or docker/ nor listed in docs/deploy-gke.md "
        "(section Settings):\n" + "\n".join(f"  {n} ({reads[n]})" for n in missing)
    )


def test_the_guide_lists_only_variables_the_code_reads(rendered):
    known = set(_code_reads()) | _set_by_deployment(rendered)
    listed = {n for n in _documented() if n.startswith(("RLJOB_", "HF_"))}
    assert listed - known == set(), f"docs/deploy-gke.md names settings nothing reads: {sorted(listed - known)}"


def test_the_env_scan_finds_reads_of_every_shape(tmp_path):
    (tmp_path / "m.py").write_text(
        "import os\nNAME = 'FROM_CONSTANT'\n"
        "a = os.environ['SUBSCRIPT']\nb = os.environ.get('GET')\nc = os.getenv('GETENV')\nd = os.environ.get(NAME)\n"
        "os.environ['WRITTEN'] = '1'\nos.environ.setdefault('DEFAULTED', '1')\n"
        "def f(x=typer.Option(envvar='OPTION')): ...\n"
    )
    assert set(direct_env_reads(tmp_path)) == {"SUBSCRIPT", "GET", "GETENV", "FROM_CONSTANT", "OPTION"}


def _image_binds(name: str) -> tuple[dict[str, str], list[tuple[Path, str]]]:
    image = parse_dockerfile(DOCKERFILES[name].read_text(), DOCKERFILES[name])
    return image.env, [(VENV, image.env["VIRTUAL_ENV"])]


def _python_module_runs(module: str) -> bool:
    spec = importlib.util.find_spec(module)
    return spec is not None and (spec.submodule_search_locations is None or importlib.util.find_spec(f"{module}.__main__") is not None)


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_every_command_and_module_a_dockerfile_names_exists(name):
    image = parse_dockerfile(DOCKERFILES[name].read_text(), DOCKERFILES[name])
    env, binds = _image_binds(name)
    argv = [*image.entrypoint, *image.cmd]
    resolve_executable(argv[0], env["PATH"], binds)  # raises StartError, as the runtime would fail
    if argv[1:3] == ["-m", argv[2]] and argv[0] == "python":
        assert _python_module_runs(argv[2]), f"{name}: python -m {argv[2]} has nothing to run"
    for target in (a for a in argv if re.fullmatch(r"[\w.]+:\w+", a)):  # uvicorn's module:factory
        module, attr = target.split(":")
        assert callable(getattr(importlib.import_module(module), attr)), f"{name}: {target} is not callable"
    text = DOCKERFILES[name].read_text().replace("\\\n", " ")
    for imports in re.findall(r'python -c "import ([\w., ]+)"', text):  # the build's smoke checks
        for module in (m.strip() for m in imports.split(",")):
            assert importlib.util.find_spec(module) is not None, f"{name}: imports {module}, which is not installed"
    for command in re.findall(r"&& (install_tpu_\w+)", text):
        resolve_executable(command, env["PATH"], binds)


def test_a_missing_command_is_caught_by_the_same_check():
    env, binds = _image_binds("service")
    with pytest.raises(StartError, match="executable file not found"):
        resolve_executable("uvicorn-typo", env["PATH"], binds)


def test_the_trainer_command_the_launcher_renders_exists_and_parses():
    from service.adapters.k8s.pod_template import trainer_command
    from trainer.cli import _parser

    argv = trainer_command("rl-000000000001")
    env, binds = _image_binds("trainer")
    resolve_executable(argv[0], env["PATH"], binds)
    assert argv[1] == "-m" and _python_module_runs(argv[2])
    args = _parser().parse_args(argv[3:])
    assert (args.command, args.spec, args.job_id) == ("run", "/etc/rljob/spec.json", "rl-000000000001")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_probe_path_is_a_route_of_the_service(rendered, overlay, tmp_path):
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.config import Settings

    # Not started (no lifespan): a route that exists answers (200, or 503 while not ready), a missing one 404.
    client = TestClient(create_app(Settings(_env_file=None, environment="dev", state_dir=tmp_path)))
    container = one(rendered[overlay], "Deployment", "rljob-service")["spec"]["template"]["spec"]["containers"][0]
    paths = [container[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")]
    healthcheck = re.search(r"http://127\.0\.0\.1:8000(/\w+)", DOCKERFILES["service"].read_text())
    assert healthcheck is not None
    for path in [*paths, healthcheck.group(1)]:
        assert client.get(path).status_code in (200, 503), path
    assert client.get("/healthzz").status_code == 404


def test_only_the_kubernetes_adapter_calls_the_api():
    everywhere = scan_package(ROOT / "service").rules()
    adapter = scan_package(ROOT / "service" / "adapters" / "k8s").rules()
    assert adapter and everywhere == adapter, f"Kubernetes API calls outside service/adapters/k8s: {everywhere - adapter}"
