"""Fixtures for the storage tests: one fake-gcs-server per session, a fresh bucket per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from harness.gcs_emulator import GcsEmulator, apply_env, client_for, restore_env
from trainer.storage.gcs import GcsStore, RetrySettings, reset_gcs_store

# Short backoff so tests that provoke retries stay fast; the timeout still covers a few seconds of outage.
FAST_RETRY = RetrySettings(initial_s=0.1, maximum_s=1.0, multiplier=2.0, timeout_s=30.0)


@pytest.fixture(scope="session")
def emulator(tmp_path_factory) -> Iterator[GcsEmulator]:
    emu = GcsEmulator(tmp_path_factory.mktemp("fake-gcs"))
    emu.start()
    previous = apply_env(emu.env())
    reset_gcs_store()  # the process's one store must be built against this emulator
    try:
        yield emu
    finally:
        reset_gcs_store()
        restore_env(previous)
        emu.stop()


@pytest.fixture
def gcs(emulator) -> GcsStore:
    return GcsStore(client_for(emulator.url), FAST_RETRY)


@pytest.fixture
def bucket(gcs) -> str:
    """A new, empty bucket for this test only (tests never share objects)."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    gcs.client.create_bucket(name)
    return name
