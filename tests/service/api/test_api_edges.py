"""Edges of the API that a generated or hostile client reaches: out-of-range SSE resume ids; idle streams."""

from __future__ import annotations

from pathlib import Path

import pytest

import service.api.routes.events as events_routes
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, spec_body


@pytest.mark.parametrize("last_event_id", [str(2**63), str(2**64 + 5), "9" * 40, "-1"])
@pytest.mark.parametrize("stream", ["job", "team"])
def test_out_of_range_last_event_id_is_a_422_naming_the_header(api: Api, tmp_path: Path, stream: str, last_event_id: str) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    path = f"/v1/jobs/{job_id}/events" if stream == "job" else "/v1/events"
    response = api.client.get(path, params={"max_duration_s": 1}, headers={**api.as_(TOKEN_A), "Last-Event-ID": last_event_id})
    assert response.status_code == 422, response.text
    (problem,) = response.json()["detail"]
    assert problem["loc"] == ["header", "Last-Event-ID"]


def test_largest_last_event_id_resumes_with_nothing_missed(api: Api, tmp_path: Path) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    response = api.client.get("/v1/events", params={"max_duration_s": 0.3}, headers={**api.as_(TOKEN_A), "Last-Event-ID": str(2**63 - 1)})
    assert response.status_code == 200
    assert response.text.startswith("event: hello") and job_id not in response.text


def test_an_idle_stream_sends_keepalive_comments(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_routes, "KEEPALIVE_S", 0.1)  # the fixture's poll interval is 0.2 s
    response = api.client.get("/v1/events", params={"max_duration_s": 1}, headers=api.as_(TOKEN_A))
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    frames = response.text.split("\n\n")
    assert frames[0].startswith("event: hello") and ": keepalive" in frames[1:]


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/jobs", "GET, POST"),
        ("PUT", "/v1/jobs/rl-aaaaaaaaaaaa", "GET"),
        ("GET", "/v1/jobs/rl-aaaaaaaaaaaa/cancel", "POST"),
        ("POST", "/v1/events", "GET"),
    ],
)
def test_a_405_allows_every_method_the_schema_declares_at_that_path(api: Api, method: str, path: str, allow: str) -> None:
    response = api.client.request(method, path, headers=api.as_(TOKEN_A))
    assert response.status_code == 405 and response.headers["allow"] == allow
    declared = api.client.get("/openapi.json").json()["paths"][path.replace("rl-aaaaaaaaaaaa", "{job_id}")]
    assert ", ".join(sorted(m.upper() for m in declared)) == allow


def test_a_body_that_is_not_utf8_is_a_422_naming_the_body(api: Api) -> None:
    headers = {**api.as_(TOKEN_A), "Content-Type": "application/json"}
    response = api.client.post("/v1/jobs", content=b'{"name": "\xff\xfe"}', headers=headers)
    assert response.status_code == 422
    (problem,) = response.json()["detail"]
    assert problem["loc"] == ["body"] and "UTF-8" in problem["msg"]


@pytest.mark.parametrize(
    ("section", "field", "value"),
    [("export", "hub_private", 0), ("export", "enabled", "true"), ("grpo", "num_batches", "20"), ("grpo", "beta", "0.1")],
)
def test_a_spec_value_of_another_json_type_is_a_422_not_converted(
    api: Api, tmp_path: Path, section: str, field: str, value: object
) -> None:
    response = api.client.post("/v1/jobs", json=spec_body(tmp_path, **{section: {field: value}}), headers=api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    assert [p["loc"] for p in response.json()["detail"]] == [["body", section, field]]
    assert api.client.get("/v1/jobs", headers=api.as_(TOKEN_A)).json()["count"] == 0  # nothing stored


def test_an_integer_for_a_number_field_is_accepted(api: Api, tmp_path: Path) -> None:
    api.submit(spec_body(tmp_path, grpo={"beta": 0, "learning_rate": 1e-6}))


def test_an_integral_number_is_an_integer_as_json_schema_counts_it(api: Api, tmp_path: Path) -> None:
    api.submit(spec_body(tmp_path, grpo={"num_batches": 20.0, "batch_size": 2}))
    response = api.client.post("/v1/jobs", json=spec_body(tmp_path, grpo={"num_batches": 20.5}), headers=api.as_(TOKEN_A))
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "grpo", "num_batches"]
