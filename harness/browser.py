"""Headless Debian Chromium driven by Playwright, as docs/notes prescribe: the system binary via
`executable_path` (Playwright never downloads a browser here) and a fresh profile per run.

Which binary: PLAYWRIGHT_CHROMIUM_EXECUTABLE when set (it must exist: a wrong path is an error, not a
fallback), else the first of chromium, chromium-browser, google-chrome on PATH."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage, Page, ViewportSize

CHROMIUM_ENV = "PLAYWRIGHT_CHROMIUM_EXECUTABLE"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # tests run as root in containers, where Chromium's sandbox cannot start
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",  # no update checks or field trials: loopback traffic only
    "--disable-component-update",
    "--disable-sync",
]
LAPTOP_VIEWPORT: ViewportSize = {"width": 1366, "height": 768}  # the screen the dashboard is laid out for


class ChromiumMissing(RuntimeError):
    pass


def find_chromium() -> Path:
    """The browser to drive, or ChromiumMissing saying where it was looked for and how to get it."""
    chosen = os.environ.get(CHROMIUM_ENV)
    if chosen:
        path = Path(chosen)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ChromiumMissing(f"{CHROMIUM_ENV}={chosen} is not an executable file")
        return path
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    raise ChromiumMissing(
        f"no {', '.join(CHROMIUM_NAMES)} on PATH and {CHROMIUM_ENV} is unset: scripts/install-system-deps.sh installs Debian's chromium"
    )


class PageProblems:
    """JavaScript errors and CSP violations seen by a page; a test fails if any appear."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def watch(self, page: Page) -> None:
        page.on("pageerror", lambda exc: self.items.append(f"uncaught: {exc}"))

        def on_console(msg: ConsoleMessage) -> None:
            text = msg.text
            # Failed requests (401, refused connections, streams cut by a stopping server) are logged
            # by Chromium itself; the tests check what the page shows for them instead.
            if msg.type == "error" and not text.startswith("Failed to load resource"):
                self.items.append(f"console error: {text}")

        page.on("console", on_console)


@contextmanager
def launch_chromium() -> Iterator[object]:
    """Yield a Playwright BrowserContext on the system Chromium with a throw-away profile.

    Playwright insists on owning --user-data-dir, hence a persistent context on a fresh temp dir.
    Each page still starts with its own sessionStorage, so each test signs in afresh.
    """
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="rljob-chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=str(find_chromium()),
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport=LAPTOP_VIEWPORT,
                timeout=60_000,
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
