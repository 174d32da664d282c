"""bench/result_meta.py's `uncommitted_changes` on a throwaway git repository (issue 53 section 4: an untracked
module under the measured paths used to read as "no uncommitted changes")."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.result_meta import uncommitted_changes


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "bench" / "results").mkdir(parents=True)
    (repo / "service").mkdir()
    (repo / "service" / "app.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text("__pycache__/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return repo


def test_a_clean_checkout_has_no_uncommitted_changes(tmp_path):
    assert uncommitted_changes(_repo(tmp_path)) is False


def test_an_untracked_module_under_the_measured_code_counts(tmp_path):
    repo = _repo(tmp_path)
    (repo / "bench" / "new_bench.py").write_text("y = 2\n")
    assert uncommitted_changes(repo) is True


def test_an_edited_file_counts(tmp_path):
    repo = _repo(tmp_path)
    (repo / "service" / "app.py").write_text("x = 2\n")
    assert uncommitted_changes(repo) is True


def test_ignored_files_result_files_and_files_elsewhere_do_not(tmp_path):
    repo = _repo(tmp_path)
    (repo / "service" / "__pycache__").mkdir()
    (repo / "service" / "__pycache__" / "app.cpython-312.pyc").write_bytes(b"\0")
    (repo / "bench" / "results" / "some_bench.json").write_text("{}\n")
    (repo / "notes.md").write_text("not measured code\n")
    assert uncommitted_changes(repo) is False
