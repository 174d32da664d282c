"""GET /v1/phases serves the domain's phase facts (the dashboard reads them instead of a copy)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from service.app import create_app
from service.config import Settings
from service.domain.records.phases import CANCELLABLE, TERMINAL, JobPhase


def test_phases_are_the_domains_and_need_no_token(settings_factory: Callable[..., Settings]) -> None:
    with TestClient(create_app(settings_factory())) as client:
        answer = client.get("/v1/phases")
        schema = client.get("/openapi.json").json()
    assert answer.status_code == 200
    body = answer.json()
    assert body["phases"] == [p.value for p in JobPhase]  # lifecycle order, as the enum declares it
    assert set(body["terminal"]) == set(TERMINAL) and set(body["cancellable"]) == set(CANCELLABLE)
    assert body["terminal"] == [p for p in body["phases"] if p in body["terminal"]]  # same order
    assert "/v1/phases" in schema["paths"]
