"""Hooks for every test run: the skip policy (tests/skip_policy.py, allow-list tests/allowed_skips.toml)."""

from __future__ import annotations

import pytest

from tests import skip_policy


def pytest_configure(config: pytest.Config) -> None:
    skip_policy.install(config)
