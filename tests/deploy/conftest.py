"""Fixtures for the deployment checks: render every kustomize overlay once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.pg_server import postgres_url
from tests.deploy.deploy_support import K8S, OVERLAYS, find_kubectl, render


@pytest.fixture(scope="session")
def kubectl() -> str:
    path = find_kubectl()
    if path is None:
        pytest.fail("no kubectl with kustomize v5 found: run scripts/install-system-deps.sh")
    return path


@pytest.fixture(scope="session")
def rendered(kubectl: str) -> dict[str, list[dict]]:
    assert OVERLAYS, "k8s/overlays/ has no overlays"
    return {name: render(kubectl, K8S / "overlays" / name) for name in OVERLAYS}


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL for the gke overlay's service, which refuses SQLite outside dev."""
    with postgres_url() as url:
        yield url
