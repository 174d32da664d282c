"""A job whose run directory is on gs:// while GCS cannot be reached (a network outage, a wrong
endpoint): its samples are a 503 the client may retry, its progress waits with a warning. Both
were a google RetryError escaping the storage adapter: a 500 and an ERROR traceback per poll.
A real GcsStore against a closed loopback port stands in for the outage."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

import service.adapters.run_reads as run_reads
from service.adapters.events_file import EventsFileReader
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, spec_body
from trainer.storage.gcs import GcsStore, RetrySettings


@pytest.fixture
def unreachable_gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[GcsStore]:
    client = storage.Client(project="rljob-test", credentials=AnonymousCredentials(), client_options={"api_endpoint": "http://127.0.0.1:9"})
    dead = GcsStore(client, RetrySettings(initial_s=0.05, maximum_s=0.1, timeout_s=0.3))
    monkeypatch.setattr(run_reads, "store_for", lambda uri: dead)
    monkeypatch.setattr(run_reads, "GCS_READ_DEADLINE_S", 0.3)
    yield dead


def _gs_job(api: Api, tmp_path: Path) -> str:
    return api.submit(spec_body(tmp_path, output="gs://rljob-outage-test/runs"))["id"]


@pytest.mark.usefixtures("unreachable_gcs")
def test_samples_of_a_job_on_unreachable_gcs_are_a_503_to_retry(api: Api, tmp_path: Path) -> None:
    job_id = _gs_job(api, tmp_path)
    response = api.client.get(f"/v1/jobs/{job_id}/samples", headers=api.as_(TOKEN_A))
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] and "gs://rljob-outage-test/runs" in response.json()["detail"]


@pytest.mark.usefixtures("unreachable_gcs")
def test_progress_of_a_job_on_unreachable_gcs_waits_with_a_warning(api: Api, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    record = api.store.get(_gs_job(api, tmp_path))
    assert record is not None
    with caplog.at_level(logging.WARNING):
        batch = EventsFileReader().read_new(record)
    assert (batch.events, batch.end, batch.more) == ([], 0, False)
    assert any(r.levelno == logging.WARNING and "cannot read" in r.getMessage() for r in caplog.records)
