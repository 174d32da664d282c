"""Which files are the jax rollout engine, and whether they changed since a commit.

The engine is trainer/rollout/jax_rollout.py and every sibling module it imports, directly or through
another (`from .name import ...` or `from . import name`): cached_llama.py, stop_token.py, few_rows_matmul.py,
rollout_keys.py and whatever a later change adds; with each module, the native source it compiles,
native/<module>.cc, where there is one. Before issue 54 the engine lived in trainer/maxtext_entry/; at a commit of
that time its files are read from there.
bench/rollout/rollout_speed.py copies these files to measure the engine at a commit, and
tests/bench/rollout/test_rollout_speed_fresh.py fails when they differ from the commit the published figures
(bench/results/rollout_speed.json) were measured at.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "trainer/rollout"
FORMER_PACKAGE = "trainer/maxtext_entry"  # the engine's folder until issue 54 moved it
_SIBLING_IMPORT = re.compile(r"^\s*from \.(\w+) import|^\s*from \. import (\w+)", re.MULTILINE)


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)


def read_at(commit: str | None) -> Callable[[str], str | None]:
    """A reader of a repository path's text at `commit` (None: the working tree); None where it does not exist."""

    def read(rel: str) -> str | None:
        if commit is None:
            path = REPO / rel
            return path.read_text() if path.is_file() else None
        shown = _git("show", f"{commit}:{rel}")
        return shown.stdout if shown.returncode == 0 else None

    return read


def package_at(commit: str | None = None) -> str:
    """The engine's folder at `commit` (None: the working tree)."""
    read = read_at(commit)
    return next((p for p in (PACKAGE, FORMER_PACKAGE) if read(f"{p}/jax_rollout.py") is not None), PACKAGE)


def engine_files(commit: str | None = None) -> list[str]:
    """The engine's modules at `commit` (None: the working tree), the entry first."""
    read = read_at(commit)
    package = package_at(commit)
    entry = f"{package}/jax_rollout.py"
    found, todo = [entry], [entry]
    while todo:
        rel = todo.pop()
        text = read(rel)
        if text is None:
            raise FileNotFoundError(f"{rel} is missing at {commit or 'the working tree'}")
        for name in (a or b for a, b in _SIBLING_IMPORT.findall(text)):
            sibling = f"{package}/{name}.py"
            if sibling not in found and read(sibling) is not None:
                found.append(sibling)
                todo.append(sibling)
    native = [f"{package}/native/{Path(rel).stem}.cc" for rel in found]
    return found + [rel for rel in native if read(rel) is not None]


def changed_since(commit: str, until: str | None = None) -> list[str]:
    """The engine's files (as of either side) that differ between `commit` and `until` (None: the working tree).
    Raises when git cannot resolve `commit` (a clone without that history cannot vouch for the figures)."""
    resolved = _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if resolved.returncode != 0:
        raise LookupError(f"git cannot find commit {commit} in {REPO}: {resolved.stderr.strip() or 'unknown revision'}")
    files = sorted(set(engine_files(commit)) | set(engine_files(until)))
    diff = _git("diff", "--name-only", commit, *([until] if until else []), "--", *files)
    if diff.returncode != 0:
        raise RuntimeError(f"git diff failed: {diff.stderr.strip()}")
    return [line for line in diff.stdout.splitlines() if line]
