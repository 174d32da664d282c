"""Hooks for every test run: the skip policy (tests/skip_policy.py, allow-list tests/allowed_skips.toml),
the check that the venv runs this checkout's code (tests/checkout_guard.py), the slow tests' lanes
(tests/lanes.py), the tiny model and output every slow tiny run of a worker shares, and the JAX compilation
cache the run's workers share."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import checkout_guard, skip_policy
from tests.lanes import LaneScheduling, lane_of, lane_position

REPO = Path(__file__).resolve().parents[1]

# Bytecode is written by the first process that imports a module (scripts/bootstrap.sh compiles none). Machines
# that set PYTHONDONTWRITEBYTECODE (ours, CI's) would otherwise compile every import in every process: 30 s of
# each MaxText stage's start. Set before the workers and every test's subprocesses start, which inherit it; the
# pods of harness/podrun keep their image's own setting (the images compile at build and never write).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_configure(config: pytest.Config) -> None:
    problem = checkout_guard.mismatch(checkout_guard.installed_checkout())
    if problem:
        raise pytest.UsageError(problem)
    skip_policy.install(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The lanes first, each in the order tests/lanes.py gives its files, so that the two workers start one lane
    each; every other test keeps its place after them. A slow test outside every lane stops the run."""
    unplaced = {
        item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow") is not None and lane_of(item.nodeid) is None
    }
    if unplaced:
        raise pytest.UsageError(
            f"slow tests without a lane: {', '.join(sorted(unplaced))}; give each file one in SLOW_LANES (tests/lanes.py)"
        )
    items.sort(key=lambda item: lane_position(item.nodeid))  # stable: the other tests keep their order


def pytest_report_header(config: pytest.Config) -> str:
    """Which isolation the emulated cluster's pods get here: the proot fallback makes their tests several times slower."""
    from harness.podrun.pods.process import isolation

    return f"podrun isolation: {isolation()} (harness/podrun/pods/process.py)"


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # a hook of pytest-xdist's; ours decides over its --dist
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LaneScheduling:
    return LaneScheduling(config, log)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, tokenizer, data and reward (`python -m trainer make-tiny`), built once per worker
    process for every slow test in it; tests copy what they change, never change it."""
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run(
        [sys.executable, "-m", "trainer", "make-tiny", "--out", str(out)],
        cwd=REPO,
        check=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        timeout=600,
    )
    return out


@pytest.fixture(scope="session")
def tiny_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output directory the slow tiny runs of a worker share: the trainer's conversion cache for an output
    is its `_cache/maxtext`, so the tiny model is converted once per worker, by its first run, and every later
    run takes the cached checkpoint (the cache is tested for itself: tests/storage/test_conversion_cache.py,
    and on GCS tests/storage/test_pipeline_gcs.py, which converts for real)."""
    return tmp_path_factory.mktemp("tiny-runs")


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A JAX persistent compilation cache for every JAX process this worker starts (the trainer's stages, the
    checks), holding every compile (JAX keeps only those over 1 s by default).

    The slow runs compile the same programs run after run (the tiny model's shapes). MaxText names a cache
    (base.yml's `jax_cache_dir`), but JAX decides whether to use one at a process's first compilation and
    train_rl compiles before its config sets it, so runs never used it (measured: it stays empty, and a second
    identical run spent as long in its train stage). Set in the environment, JAX has it from the start:
    the second run's train stage took 50 s instead of 66 s. A cached executable is what compiling gives, so
    nothing a test asserts changes.

    One cache for the run's workers (its temporary root, which only this run writes: JAX trusts its cache, as
    whoever writes it chooses the code that runs): the lanes compile the same tiny programs (81 of the 84 one
    lane compiled, the other compiled too). JAX takes a file lock around every read and write of its cache only
    when the cache has a size bound (jax/_src/lru_cache.py, jax 0.11.1: `eviction_enabled`); without one it writes
    entries unlocked, and a process of the other worker could read half an entry. So the bound is set, far above
    what a run stores (2 MB)."""
    root = tmp_path_factory.getbasetemp()
    cache = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "jax-cache"
    cache.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAX_COMPILATION_CACHE_DIR", str(cache))
        patch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        patch.setenv("JAX_COMPILATION_CACHE_MAX_SIZE", str(1 << 30))
        yield cache
