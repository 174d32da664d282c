"""The published rollout-speed figures are the engine's as it is: bench/results/rollout_speed.json names the commit
it was measured at, and the engine's files (bench/rollout/rollout_engine_files.py) must not differ from that commit.
After an engine change, rerun the bench on a quiet machine and render bench/rollout/README.md (the message says how)."""

from __future__ import annotations

import json

import pytest

from bench.rollout import render_rollout_speed, rollout_engine_files

RERUN = (
    "flock /tmp/rljob-bench.lock .venv/bin/python bench/rollout/rollout_speed.py --engines shipped,current,hf --repeats 5 "
    "&& .venv/bin/python bench/rollout/render_rollout_speed.py"
)


def test_the_engine_is_unchanged_since_the_commit_the_figures_were_measured_at() -> None:
    machine = json.loads(render_rollout_speed.RESULT_FILE.read_text())["machine"]
    changed = rollout_engine_files.changed_since(machine["commit"])
    assert not changed, (
        f"bench/results/rollout_speed.json was measured at {machine['commit'][:10]}; since then {', '.join(changed)} "
        f"changed, so its figures are not this engine's. On a quiet machine: {RERUN}"
    )
    assert not machine["engine_files_modified"], "the figures were measured with uncommitted engine changes"


def test_the_engine_is_its_entry_and_the_sibling_modules_it_imports() -> None:
    # 0681505 (the figures before issue 39): two modules; stop_token.py joined with 7c9013d's sentinel pad.
    assert rollout_engine_files.engine_files("0681505") == ["trainer/maxtext_entry/jax_rollout.py", "trainer/maxtext_entry/cached_llama.py"]
    assert "trainer/maxtext_entry/stop_token.py" in rollout_engine_files.engine_files("7c9013d")
    # A module's native source (native/<module>.cc) is the engine too: a kernel change is an engine change; and a module
    # imported as `from . import name` (rollout_keys.py, each rollout's sampling key) as much as `from .name import`.
    here = rollout_engine_files.engine_files()
    assert {"trainer/rollout/few_rows_matmul.py", "trainer/rollout/native/few_rows_matmul.cc", "trainer/rollout/rollout_keys.py"} <= set(
        here
    ), here
    # Issue 54 moved the engine from trainer/maxtext_entry/ to trainer/rollout/: a commit before it is read from there.
    assert rollout_engine_files.engine_files("ddb90f0")[0] == "trainer/maxtext_entry/jax_rollout.py"


@pytest.mark.parametrize(
    ("since", "until", "changed"),
    [
        ("ab75732", "ba9dcfd", []),  # a settings change: the engine untouched
        ("ba9dcfd", "7753171", ["trainer/maxtext_entry/cached_llama.py"]),  # Qwen3 in the engine
        ("0681505", "7c9013d", ["trainer/maxtext_entry/jax_rollout.py", "trainer/maxtext_entry/stop_token.py"]),  # a new module
    ],
)
def test_a_change_to_any_engine_file_is_found(since: str, until: str, changed: list[str]) -> None:
    assert rollout_engine_files.changed_since(since, until) == changed


def test_a_commit_git_cannot_find_is_an_error_not_a_pass() -> None:
    with pytest.raises(LookupError, match="cannot find commit"):
        rollout_engine_files.changed_since("0" * 40)
