"""docs/settings.md's settings and exit-code tables agree with the code: the generated tables
(service/cli/doc_tables.py) appear in it as generated, and every RLJOB_* variable the repository
reads or sets is listed on the page, which lists nothing that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.adapters.k8s.settings import K8sSettings
from service.cli.doc_tables import env_names, generated_tables, settings_table
from service.config import Settings

ROOT = Path(__file__).resolve().parents[1]
SETTINGS_PAGE = ROOT / "docs" / "settings.md"
SCANNED_DIRS = ("service", "trainer", "scripts", "tests", "k8s", "docker", "examples", "bench", ".ci", "dashboard/src")
TEXT_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".toml", ".js", ".mjs", ".Dockerfile", ".json", ".ini", ".cfg", ""}
# A variable name, not a prefix (RLJOB_K8S_{...}, RLJOB_HEALTH_*): it must not go on with _ or {.
VARIABLE = re.compile(r"RLJOB_[A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_{])")
# Names in the code that are not settings, with why.
NOT_SETTINGS = {
    "RLJOB_SERVICE_PORT": "what Kubernetes would inject for a Service named rljob; the Deployment turns service links off",
    "RLJOB_ARGV_CANARY": "a test's marker value passed through MaxText's argv, never read as configuration",
    "RLJOB_TEST_SURELY_UNSET": "a test's deliberately unset variable (a spec file naming it is refused)",
    "RLJOB_EVAL": "the eval recorder's stdout line prefix (trainer/contract/run/evaluation.py), read by the pipeline, not a variable",
    "RLJOB_GOODPUT": "the goodput recorder's stdout line prefix (trainer/contract/run/goodput.py), read by the pipeline, not a variable",
    "RLJOB_CHECKPOINT": "the checkpoint reporter's stdout line prefix (trainer/contract/run/checkpoint_line.py), not a variable",
    "RLJOB_REWARD_FAILED": "the reward sandbox's stdout line prefix (trainer/contract/spec/reward_sandbox.py), read by the train stage",
    "RLJOB_BENCH_WORK": "the learning bench's scratch directory (bench/learning/learning_folds.py), read by that script only",
    "RLJOB_SEEDS_WORK": "the seeds bench's scratch directory (bench/learning/learning_seeds.py), read by that script only",
    "RLJOB_TPU_JOB_WORK": "the chip job bench's scratch directory on the chip's machine (bench/chip/tpu_job.py), read by that script only",
    "RLJOB_TRACE_STEP": "which step of scripts/tpu_stage.py trace a traced process belongs to (scripts/tpu_staging/trace.py), set there",
    "RLJOB_TEST_MANIFEST_PARSE_PIDS": "where a test records which process parsed each manifest (test_manifest_worker.py)",
    "RLJOB_BENCH_PROBE_OUT": (
        "where the TPU bench's probe writes (bench/chip/tpu_probe/sitecustomize.py), set by bench/chip/tpu_grpo.py only"
    ),
    "RLJOB_OBJECTIVE_PROBE": "the chip correctness bench's objective line prefix (bench/chip/tpu_correctness_step.py), not a variable",
    "RLJOB_BENCH_PROBE_TRACE_STEP": (
        "the step the TPU bench's probe profiles (bench/chip/tpu_probe/sitecustomize.py), set by bench/chip/tpu_grpo.py"
    ),
    "RLJOB_SANDBOX_CHECK_SECRET": "the secret `trainer sandbox-check` hides from its workers (trainer/rewards_sandbox/self_check.py)",
}


def _names_in_code() -> dict[str, str]:
    """Every RLJOB_* name in the repository's files -> one file that has it."""
    found: dict[str, str] = {}
    this_file = Path(__file__).resolve()
    for top in SCANNED_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or path.resolve() == this_file or path.suffix not in TEXT_SUFFIXES:
                continue
            if {"node_modules", "__pycache__", "static"} & set(path.parts):
                continue
            for name in VARIABLE.findall(path.read_text(errors="replace")):
                found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def test_the_generated_tables_are_on_the_page_as_generated() -> None:
    page = SETTINGS_PAGE.read_text()
    for name, table in generated_tables().items():
        block = re.search(rf"<!-- {name} -->\n(.*?)\n<!-- /{name} -->", page, re.DOTALL)
        assert block, f"docs/settings.md has no <!-- {name} --> table"
        assert block.group(1) == table, (
            f"docs/settings.md's {name} table differs from the code; run `.venv/bin/python scripts/render_docs.py`"
        )


def test_every_variable_in_the_code_is_on_the_page_and_nothing_else_is() -> None:
    listed = set(VARIABLE.findall(SETTINGS_PAGE.read_text()))
    in_code = _names_in_code()
    for model in (Settings, K8sSettings):  # their variable names are built, so the text scan cannot see them
        in_code.update({name: model.__module__ for name in env_names(model)})
    missing = {name: where for name, where in in_code.items() if name not in listed and name not in NOT_SETTINGS}
    assert not missing, (
        f"RLJOB_* variables docs/settings.md lacks (name: a file using it): {missing}; "
        "list each there, or in NOT_SETTINGS here with why it is not a setting"
    )
    unknown = listed - set(in_code)
    assert not unknown, f"docs/settings.md lists variables nothing reads or sets: {sorted(unknown)}"
    assert not (listed & set(NOT_SETTINGS)), "a name kept out as not a setting is listed as one"


def test_a_setting_without_a_description_is_refused() -> None:
    class Bare(Settings):
        undocumented_knob: int = 1

    with pytest.raises(ValueError, match="undocumented_knob"):
        settings_table(Bare)
