"""Which browser the dashboard tests drive: PLAYWRIGHT_CHROMIUM_EXECUTABLE, else chromium on PATH."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.browser import CHROMIUM_ENV, ChromiumMissing, find_chromium


def _executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_named_executable_wins_and_a_wrong_name_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = _executable(tmp_path / "my-chrome")
    monkeypatch.setenv(CHROMIUM_ENV, str(chosen))
    assert find_chromium() == chosen
    monkeypatch.setenv(CHROMIUM_ENV, str(tmp_path / "absent"))
    with pytest.raises(ChromiumMissing, match=f"{CHROMIUM_ENV}=.*absent is not an executable file"):
        find_chromium()


def test_otherwise_the_first_chromium_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHROMIUM_ENV, raising=False)
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    _executable(second / "chromium")
    _executable(first / "chromium-browser")
    monkeypatch.setenv("PATH", f"{first}:{second}")
    assert find_chromium() == second / "chromium"  # by name order, not PATH order: Debian's name first
    monkeypatch.setenv("PATH", str(first))
    assert find_chromium() == first / "chromium-browser"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ChromiumMissing, match="on PATH and PLAYWRIGHT_CHROMIUM_EXECUTABLE is unset"):
        find_chromium()
