"""This CLI against a newer service: the service's answers carry fields this CLI's models do not know, at the top of
the job view and inside the job's spec (JobPublic.spec is the typed JobSpec, which forbids unknown fields where it
takes input). `status` reads the job anyway, ignoring what it does not know, and `rerun` sends the stored spec back
whole, the unknown field included, so the newer service gets its job again as it was.

The newer service is the live one (local launcher, stand-in trainer) behind a transport that adds the fields to
its job answers and, as the newer service would, accepts the field on a submit (it takes it off before the live
service, which is this version and would refuse it, sees the body)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pydantic import ValidationError

import service.cli.client as cli_client
from service.domain.records.models import JobPublic
from tests.service.service_helpers import TOKEN_A, spec_body

VIEW_FIELD = "field_of_a_newer_view"
SPEC_FIELD = "knob_of_a_newer_grpo"
REAL_TRANSPORT = httpx.HTTPTransport


class NewerService(httpx.BaseTransport):
    def __init__(self, **options: Any) -> None:
        self._real = REAL_TRANSPORT(**options)
        self.submitted: list[dict[str, Any]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/v1/jobs":
            self.submitted.append(json.loads(request.content))
            body = json.loads(request.content)
            body["grpo"].pop(SPEC_FIELD, None)
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            request = httpx.Request("POST", request.url, headers=headers, json=body)
        response = self._real.handle_request(request)
        if request.method != "GET" or not re.fullmatch(r"/v1/jobs/[^/]+", request.url.path) or response.status_code != 200:
            return response
        response.read()
        return httpx.Response(200, json=newer_view(response.json()))

    def close(self) -> None:
        self._real.close()


def newer_view(view: dict[str, Any]) -> dict[str, Any]:
    spec = {**view["spec"], "grpo": {**view["spec"]["grpo"], SPEC_FIELD: 7}}
    return {**view, VIEW_FIELD: {"new": True}, "spec": spec}


def test_status_reads_a_newer_services_job_and_rerun_sends_its_spec_back_whole(
    run_cli: Callable[..., Any], live_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_body(tmp_path, labels={"fake-steps": "1"})))
    submitted = run_cli("submit", str(spec))
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.output.split("submitted ")[1].split()[0]

    newer = NewerService()
    monkeypatch.setattr(cli_client.httpx, "HTTPTransport", lambda **options: newer)
    shown = run_cli("status", job_id, "-o", "json")
    assert shown.exit_code == 0, shown.output
    read = JobPublic.model_validate_json(shown.stdout)  # what this CLI made of it: the typed spec, the known fields
    assert read.id == job_id and read.spec.grpo.learning_rate == 3e-6
    assert VIEW_FIELD not in shown.stdout and SPEC_FIELD not in shown.stdout

    rerun = run_cli("rerun", job_id)
    assert rerun.exit_code == 0, rerun.output
    assert [body["grpo"].get(SPEC_FIELD) for body in newer.submitted] == [7]

    # The control: read strictly, as the models take input, the same answer is refused.
    view = httpx.get(f"{live_url}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {TOKEN_A}"}).json()
    with pytest.raises(ValidationError, match=SPEC_FIELD):
        JobPublic.model_validate(newer_view(view))
