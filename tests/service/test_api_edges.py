"""Edges of the API that a generated or hostile client reaches: out-of-range SSE resume ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Api
from service_helpers import TOKEN_A, spec_body


@pytest.mark.parametrize("last_event_id", [str(2**63), str(2**64 + 5), "9" * 40, "-1"])
@pytest.mark.parametrize("stream", ["job", "team"])
def test_out_of_range_last_event_id_is_a_422_naming_the_header(
    api: Api, tmp_path: Path, stream: str, last_event_id: str
) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    path = f"/v1/jobs/{job_id}/events" if stream == "job" else "/v1/events"
    response = api.client.get(
        path, params={"max_duration_s": 1}, headers={**api.as_(TOKEN_A), "Last-Event-ID": last_event_id}
    )
    assert response.status_code == 422, response.text
    (problem,) = response.json()["detail"]
    assert problem["loc"] == ["header", "Last-Event-ID"]


def test_largest_last_event_id_resumes_with_nothing_missed(api: Api, tmp_path: Path) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    response = api.client.get(
        "/v1/events", params={"max_duration_s": 0.3}, headers={**api.as_(TOKEN_A), "Last-Event-ID": str(2**63 - 1)}
    )
    assert response.status_code == 200
    assert response.text.startswith("event: hello") and job_id not in response.text
