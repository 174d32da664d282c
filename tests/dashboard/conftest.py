"""Fixtures for the dashboard tests: the built assets, the real service app under uvicorn on
loopback (SQLite and the local launcher in a temp dir), and headless Debian Chromium."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-dashboard.sh"


@pytest.fixture(scope="session")
def built_dashboard() -> Path:
    """Build the assets the way bootstrap does (a no-op when sources and lock are unchanged)."""
    result = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        pytest.fail(f"scripts/build-dashboard.sh failed:\n{result.stdout}\n{result.stderr}")
    return REPO / "service" / "dashboard" / "static"


@pytest.fixture
def live_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built_dashboard: Path):
    from harness.live_server import LiveService

    # Settings read RLJOB_* from the environment; the test's own values must be the only ones.
    for key in list(os.environ):
        if key.startswith("RLJOB_"):
            monkeypatch.delenv(key)
    service = LiveService(tmp_path).start()
    try:
        yield service
    finally:
        try:
            service.cancel_active()
        finally:
            service.stop()


# Module scope: the sync Playwright driver keeps an asyncio loop running while open, which would
# break pytest-asyncio tests that run after the dashboard tests in the same session.
@pytest.fixture(scope="module")
def chromium_context():
    from harness.browser import CHROMIUM_ENV, ChromiumMissing, find_chromium, launch_chromium

    try:
        find_chromium()
    except ChromiumMissing as e:
        if os.environ.get(CHROMIUM_ENV):  # a browser was named and is not there: a broken setup, not a skip
            raise
        pytest.skip(str(e))
    with launch_chromium() as context:
        yield context


@pytest.fixture
def page(chromium_context, live_service):
    """A fresh tab (its own sessionStorage); fails the test on any JavaScript error or CSP violation.

    Depends on live_service so the tab, and its open event streams, close before the service stops.
    """
    from harness.browser import PageProblems

    problems = PageProblems()
    tab = chromium_context.new_page()
    problems.watch(tab)
    tab.set_default_timeout(15_000)
    yield tab
    tab.close()
    assert not problems.items, "the page reported problems:\n" + "\n".join(problems.items)
