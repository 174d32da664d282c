"""Hooks for every test run: the skip policy (tests/skip_policy.py, allow-list tests/allowed_skips.toml),
and the check that the venv runs this checkout's code (tests/checkout_guard.py)."""

from __future__ import annotations

import pytest

from tests import checkout_guard, skip_policy


def pytest_configure(config: pytest.Config) -> None:
    problem = checkout_guard.mismatch(checkout_guard.installed_checkout())
    if problem:
        raise pytest.UsageError(problem)
    skip_policy.install(config)
