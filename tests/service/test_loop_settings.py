"""Two loops, two settings: each interval is read from the variable that names its loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.adapters.k8s.settings import K8sSettings
from service.app import create_app
from service.config import Settings
from tests.service.service_fakes import FakeLauncher, FakeProgress


def test_the_active_jobs_reconcile_interval_paces_the_supervisors_reconcile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_launcher: FakeLauncher, fake_progress: FakeProgress
) -> None:
    monkeypatch.setenv("RLJOB_ACTIVE_JOBS_RECONCILE_INTERVAL_S", "42")
    settings = Settings(state_dir=tmp_path)
    assert settings.active_jobs_reconcile_interval_s == 42
    app = create_app(settings, launcher=fake_launcher, progress=fake_progress)
    with TestClient(app):
        assert app.state.runtime.supervisor.active_jobs_reconcile_interval_s == 42


def test_the_kubernetes_watch_resync_interval_has_its_own_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLJOB_K8S_WATCH_RESYNC_INTERVAL_S", "7")
    assert K8sSettings(_env_file=None).watch_resync_interval_s == 7
    assert Settings().active_jobs_reconcile_interval_s == 30.0  # the service's loop is not paced by it
