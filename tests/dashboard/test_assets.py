"""The dashboard's built assets and how the service serves them (no browser needed)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.dashboard import STATIC_DIR, mount_dashboard

from .conftest import BUILD_SCRIPT, REPO

pytestmark = pytest.mark.usefixtures("built_dashboard")


def _client(**kwargs) -> TestClient:
    app = FastAPI()
    mount_dashboard(app, **kwargs)
    return TestClient(app)


def test_index_is_served_with_a_strict_content_security_policy() -> None:
    client = _client()
    assert client.get("/", follow_redirects=False).headers["location"] == "/ui/"
    page = client.get("/ui/")
    assert page.status_code == 200
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-cache"
    asset = re.search(r'src="(assets/[^"]+\.js)"', page.text).group(1)
    js = client.get(f"/ui/{asset}")
    assert js.status_code == 200
    assert "immutable" in js.headers["cache-control"]


def test_bundle_loads_nothing_from_the_internet() -> None:
    # The CSP would block it anyway; this catches it at build time with a readable message.
    for path in STATIC_DIR.rglob("*"):
        if path.suffix in {".js", ".css", ".html"}:
            text = path.read_text()
            urls = set(re.findall(r"""(?:src|href|url)\s*[=(]\s*["']?(https?://[^"')\s]+)""", text))
            assert not urls, f"{path.name} loads {urls}"


def test_build_records_the_lock_file_it_was_built_from() -> None:
    info = json.loads((STATIC_DIR / "build-info.json").read_text())
    lock = (REPO / "dashboard" / "package-lock.json").read_bytes()
    assert info["lock_sha256"] == hashlib.sha256(lock).hexdigest()


def test_missing_assets_explain_how_to_build_them(tmp_path: Path) -> None:
    client = _client(static_dir=tmp_path)
    page = client.get("/ui/")
    assert page.status_code == 503
    assert "scripts/build-dashboard.sh" in page.text


def test_mounting_twice_is_harmless() -> None:
    app = FastAPI()
    mount_dashboard(app)
    mount_dashboard(app)
    assert TestClient(app).get("/ui/").status_code == 200


def test_the_build_is_skipped_when_nothing_changed() -> None:
    before = (STATIC_DIR / "index.html").stat().st_mtime_ns
    subprocess.run([str(BUILD_SCRIPT)], check=True, capture_output=True, timeout=120)
    assert (STATIC_DIR / "index.html").stat().st_mtime_ns == before
