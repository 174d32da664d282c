"""Hooks for every test run: the skip policy (tests/skip_policy.py, allow-list tests/allowed_skips.toml),
the check that the venv runs this checkout's code (tests/checkout_guard.py), the slow tests' lanes, and
the one tiny model every slow test of a worker shares."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import checkout_guard, skip_policy

REPO = Path(__file__).resolve().parents[1]

# The slow tests (MaxText on CPU, minutes each) run in two lanes. scripts/test.sh runs pytest-xdist with two
# workers and `--dist loadgroup`: each lane is an xdist group, so all of a lane's tests run in one worker
# process, in this order, first; the fast tests fill in around them on both workers. A lane shares what its
# worker builds once (the tiny model below, the trainer tests' conversion cache) and the runs its modules'
# fixtures keep, and the run is the same every time: which slow tests share a process never depends on timing.
# Balanced by the durations scripts/test.sh prints (docs/testing.md has the figures); a new slow file must be
# given a lane here, or the run stops and says so.
SLOW_LANES: dict[str, str] = {
    # The service's paths with the real trainer (emulated cluster, local launcher, GCS) and SmolLM2.
    "tests/k8s/test_e2e_tiny_cpu.py": "slow-lane-1",
    "tests/service/test_tiny_job_integration.py": "slow-lane-1",
    "tests/storage/test_pipeline_gcs.py": "slow-lane-1",
    "tests/trainer/test_slow_smollm2.py": "slow-lane-1",
    # The trainer's own runs on the tiny model: one conversion cache (tests/trainer/conftest.py).
    "tests/trainer/test_slow_learning.py": "slow-lane-2",
    "tests/trainer/test_slow_pipeline.py": "slow-lane-2",
    "tests/trainer/test_slow_preemption.py": "slow-lane-2",
    "tests/trainer/test_slow_export_check.py": "slow-lane-2",
    "tests/trainer/test_slow_shared_prefill.py": "slow-lane-2",
}
LANE_ORDER = {name: i for i, name in enumerate(dict.fromkeys(SLOW_LANES.values()))}


def pytest_configure(config: pytest.Config) -> None:
    problem = checkout_guard.mismatch(checkout_guard.installed_checkout())
    if problem:
        raise pytest.UsageError(problem)
    skip_policy.install(config)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each slow test joins its lane's xdist group; the lanes come first (lane 1, then lane 2), so the two
    workers start one lane each, and every other test keeps its place after them."""
    lane_of: dict[str, str] = {}
    unplaced = set()
    for item in items:
        if item.get_closest_marker("slow") is None:
            continue
        path = item.nodeid.split("::", 1)[0]
        lane = SLOW_LANES.get(path)
        if lane is None:
            unplaced.add(path)
            continue
        item.add_marker(pytest.mark.xdist_group(lane))
        lane_of[item.nodeid] = lane
    if unplaced:
        raise pytest.UsageError(f"slow tests without a lane: {', '.join(sorted(unplaced))}; give each file one in "
                                "SLOW_LANES (tests/conftest.py)")  # fmt: skip
    items.sort(key=lambda item: LANE_ORDER.get(lane_of.get(item.nodeid, ""), len(LANE_ORDER)))  # stable


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, tokenizer, data and reward (`python -m trainer make-tiny`), built once per worker
    process for every slow test in it; tests copy what they change, never change it."""
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run([sys.executable, "-m", "trainer", "make-tiny", "--out", str(out)], cwd=REPO, check=True,
                   env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=600)  # fmt: skip
    return out


@pytest.fixture(scope="session")
def tiny_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output directory the slow tiny runs of a worker share: the trainer's conversion cache for an output
    is its `_cache/maxtext`, so the tiny model is converted once per worker, by its first run, and every later
    run takes the cached checkpoint (the cache is tested for itself: tests/storage/test_conversion_cache.py,
    and on GCS tests/storage/test_pipeline_gcs.py, which converts for real)."""
    return tmp_path_factory.mktemp("tiny-runs")
