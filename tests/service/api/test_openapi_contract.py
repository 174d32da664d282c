"""The OpenAPI schema tells a client the rules: every error status a route really returns is declared
for that route with the body and headers it really sends, and the job spec's constraints (patterns,
bounds, enums) appear in the request schema as the model states them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from service.domain.records.models import JobCreate
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, spec_body, wait_for_phase

MISSING = "rl-aaaaaaaaaaaa"


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """SQLite only: the contract is the routes' (each error is a domain exception mapped in service/api/errors.py,
    whichever store raised it), and the stores' own tests run on both backends."""
    return f"sqlite:///{tmp_path / 'rljob.db'}"


CONSTRAINT_KEYS = (
    "pattern",
    "maxLength",
    "minLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "enum",
    "const",
    "maxItems",
    "maxProperties",
    "propertyNames",
)


def _auth(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN_A}", **extra}


def _ended_job(api: Api, tmp_path: Path) -> str:
    job_id = api.submit(spec_body(tmp_path, name="ended"))["id"]
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    api.launcher.emit(job_id, ObservedState.SUCCEEDED, exit_code=0)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.SUCCEEDED)
    return job_id


def _idempotency_conflict(api: Api, tmp_path: Path) -> Any:
    api.submit(spec_body(tmp_path, name="first"), **{"Idempotency-Key": "k-1"})
    return api.client.post("/v1/jobs", json=spec_body(tmp_path, name="second"), headers=_auth(**{"Idempotency-Key": "k-1"}))


def _all_log_followers_busy(api: Api, tmp_path: Path) -> Any:
    job_id = api.submit(spec_body(tmp_path))["id"]
    followers = api.client.app.state.serving.log_followers
    slots = [followers.claim(f"team-{i}") for i in range(followers.max_followers)]
    try:
        return api.client.get(f"/v1/jobs/{job_id}/logs", params={"follow": "true"}, headers=_auth())
    finally:
        for slot in slots:
            slot.release()


def _while_recovering(request: Callable[[], Any]) -> Callable[[Api, Path], Any]:
    def run(api: Api, tmp_path: Path) -> Any:
        ready = api.client.app.state.runtime.supervisor.ready
        ready.clear()  # as between the start and the end of re-attaching old jobs
        try:
            return request(api)
        finally:
            ready.set()

    return run


# (method, route as in the schema, how to provoke it, the status it must give)
CASES: list[tuple[str, str, Callable[[Api, Path], Any], int]] = [
    ("post", "/v1/jobs", lambda api, tmp: api.client.post("/v1/jobs", json=spec_body(tmp)), 401),
    ("post", "/v1/jobs", lambda api, tmp: api.client.post("/v1/jobs", json={"name": "x"}, headers=_auth()), 422),
    ("post", "/v1/jobs", lambda api, tmp: api.client.post("/v1/jobs", content=b"{" * 300_000, headers=_auth()), 413),
    (
        "post",
        "/v1/jobs",
        lambda api, tmp: api.client.post("/v1/jobs", content=iter([b"{" * 200_000, b" " * 200_000]), headers=_auth()),
        413,
    ),  # chunked, no length
    ("post", "/v1/jobs", _idempotency_conflict, 409),
    (
        "post",
        "/v1/jobs",
        _while_recovering(lambda api: api.client.post("/v1/jobs", json=spec_body(Path("/tmp")), headers=_auth())),
        503,
    ),
    ("get", "/v1/jobs", lambda api, tmp: api.client.get("/v1/jobs", params={"cursor": "bm9wZQ"}, headers=_auth()), 400),
    ("get", "/v1/jobs", lambda api, tmp: api.client.get("/v1/jobs", params={"limit": 0}, headers=_auth()), 422),
    ("get", "/v1/jobs/{job_id}", lambda api, tmp: api.client.get(f"/v1/jobs/{MISSING}", headers=_auth()), 404),
    (
        "get",
        "/v1/jobs/{job_id}/metrics",
        lambda api, tmp: api.client.get(f"/v1/jobs/{MISSING}/metrics", headers=_auth()),
        404,
    ),
    (
        "get",
        "/v1/jobs/{job_id}/samples",
        lambda api, tmp: api.client.get(f"/v1/jobs/{api.submit(spec_body(tmp))['id']}/samples", headers=_auth()),
        404,
    ),
    (
        "get",
        "/v1/jobs/diff",
        lambda api, tmp: api.client.get("/v1/jobs/diff", params={"a": MISSING, "b": MISSING}, headers=_auth()),
        404,
    ),
    ("get", "/v1/jobs/diff", lambda api, tmp: api.client.get("/v1/jobs/diff", params={"a": MISSING}, headers=_auth()), 422),
    (
        "get",
        "/v1/jobs/{job_id}/repro",
        lambda api, tmp: api.client.get(f"/v1/jobs/{api.submit(spec_body(tmp))['id']}/repro", headers=_auth()),
        404,
    ),
    (
        "post",
        "/v1/jobs/{job_id}/cancel",
        lambda api, tmp: api.client.post(f"/v1/jobs/{_ended_job(api, tmp)}/cancel", headers=_auth()),
        409,
    ),
    ("get", "/v1/jobs/{job_id}/logs", _all_log_followers_busy, 429),
    (
        "get",
        "/v1/jobs/{job_id}/logs",
        lambda api, tmp: api.client.get(f"/v1/jobs/{MISSING}/logs", headers=_auth()),
        404,
    ),
    (
        "get",
        "/v1/jobs/{job_id}/events",
        lambda api, tmp: api.client.get(f"/v1/jobs/{MISSING}/events", headers=_auth()),
        404,
    ),
    ("get", "/v1/events", lambda api, tmp: api.client.get("/v1/events", headers=_auth(**{"Last-Event-ID": "-3"})), 422),
    ("get", "/v1/events", lambda api, tmp: api.client.get("/v1/events", headers={"Authorization": "Basic eDp5"}), 401),
    ("get", "/readyz", _while_recovering(lambda api: api.client.get("/readyz")), 503),
]


def _validator(document: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    # The schema's $refs point into the document ("#/components/schemas/..."): validate with it as root.
    return Draft202012Validator({**schema, "components": document["components"]})


@pytest.mark.parametrize(("method", "route", "provoke", "status"), CASES, ids=[f"{c[0]} {c[1]} {c[3]}" for c in CASES])
def test_every_error_a_route_returns_is_declared_with_its_body_and_headers(
    api: Api, tmp_path: Path, method: str, route: str, provoke: Callable[[Api, Path], Any], status: int
) -> None:
    document = api.client.get("/openapi.json").json()
    response = provoke(api, tmp_path)
    assert response.status_code == status, response.text
    declared = document["paths"][route][method]["responses"]
    assert str(status) in declared, f"{method.upper()} {route} returns {status} but declares only {sorted(declared)}"
    content = declared[str(status)]["content"]
    assert response.headers["content-type"].split(";")[0] in content
    schema = content["application/json"]["schema"]
    errors = [e.message for e in _validator(document, schema).iter_errors(response.json())]
    assert not errors, f"the body {response.text} does not match the declared schema: {errors}"
    for name, header in declared[str(status)].get("headers", {}).items():
        if header.get("required"):
            assert name.lower() in response.headers, f"declared header {name} is missing"


def test_authenticated_routes_declare_401_422_and_503(api: Api) -> None:
    document = api.client.get("/openapi.json").json()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if operation.get("security"):
                assert {"401", "422", "503"} <= set(operation["responses"]), f"{method.upper()} {path}"


def _constraints(document: dict[str, Any], schema: dict[str, Any], path: str = "") -> dict[str, dict[str, Any]]:
    """Each leaf of a JSON schema (refs followed) with its constraint keywords, keyed by its path."""
    if "$ref" in schema:
        return _constraints(document, document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]], path)
    found: dict[str, dict[str, Any]] = {}
    for i, option in enumerate(schema.get("anyOf", [])):
        found.update(_constraints(document, option, f"{path}|{i}"))
    if schema.get("type") == "object" or "properties" in schema:
        for key, sub in schema.get("properties", {}).items():
            found.update(_constraints(document, sub, f"{path}.{key}"))
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            found.update(_constraints(document, extra, f"{path}.*"))
            found[f"{path}.<keys>"] = {k: schema[k] for k in ("propertyNames", "maxProperties") if k in schema}
    elif schema.get("type") == "array":
        found.update(_constraints(document, schema.get("items", {}), f"{path}[]"))
        found[f"{path}[len]"] = {k: schema[k] for k in ("maxItems",) if k in schema}
    elif "type" in schema or "enum" in schema or "const" in schema:
        found[path] = {"type": schema.get("type"), **{k: schema[k] for k in CONSTRAINT_KEYS if k in schema}}
    return found


def test_the_job_specs_constraints_surface_in_the_openapi_schema(api: Api) -> None:
    document = api.client.get("/openapi.json").json()
    served = _constraints(document, {"$ref": "#/components/schemas/JobCreate"})
    model = JobCreate.model_json_schema(ref_template="#/components/schemas/{model}")
    model_document = {"components": {"schemas": {**model.pop("$defs", {}), "JobCreate": model}}}
    assert served == _constraints(model_document, {"$ref": "#/components/schemas/JobCreate"})
    # Every free value a client can send is bounded: a string by a pattern or enum, a number by a
    # range, a list or map by a size, so a client generated from the schema knows the rules.
    unbounded = [path for path, rules in served.items() if not _bounded(path, rules)]
    assert not unbounded, f"no pattern or bound in the served schema for: {unbounded}"


def _bounded(path: str, rules: dict[str, Any]) -> bool:
    keys = set(rules)
    if rules.get("type") == "string":
        return bool({"pattern", "enum", "const"} & keys)
    if rules.get("type") in ("integer", "number"):
        return bool({"minimum", "exclusiveMinimum"} & keys and {"maximum", "exclusiveMaximum"} & keys)
    if path.endswith(("[len]", ".<keys>")):
        return bool(rules)
    return True


def test_no_parameter_is_declared_nullable(api: Api) -> None:
    """HTTP cannot send a null parameter; a client told it may sends the text "null" and gets 422."""
    document = api.client.get("/openapi.json").json()
    nullable = [
        f"{method.upper()} {path} {parameter['name']}"
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        for parameter in operation.get("parameters", [])
        if '"null"' in json.dumps(parameter["schema"])
    ]
    assert not nullable
    events = document["paths"]["/v1/events"]["get"]["parameters"]
    (last_event_id,) = [p["schema"] for p in events if p["name"] == "Last-Event-ID"]
    assert (last_event_id["type"], last_event_id["minimum"], last_event_id["maximum"]) == ("integer", 0, 2**63 - 1)
    response = api.client.get("/v1/events", headers=_auth(**{"Last-Event-ID": "null"}))
    assert response.status_code == 422  # what the old schema invited


def _sse_frames(text: str) -> list[dict[str, str]]:
    frames = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if fields:
            frames.append(fields)
    return frames


@pytest.mark.parametrize(
    ("route", "resume_after", "first_kind"),
    [
        ("/v1/jobs/{job_id}/events", None, "snapshot"),
        ("/v1/jobs/{job_id}/events", "0", "phase"),
        ("/v1/events", "0", "hello"),
    ],
)
def test_every_streamed_event_matches_the_declared_event_schema(
    api: Api, tmp_path: Path, route: str, resume_after: str | None, first_kind: str
) -> None:
    job_id = _ended_job(api, tmp_path)
    headers = _auth(**{"Last-Event-ID": resume_after} if resume_after else {})
    response = api.client.get(route.format(job_id=job_id), params={"max_duration_s": 0.5}, headers=headers)
    document = api.client.get("/openapi.json").json()
    declared = document["paths"][route]["get"]["responses"]["200"]["content"]
    assert response.headers["content-type"].split(";")[0] in declared
    one_event = declared["text/event-stream"]["schema"]
    frames = _sse_frames(response.text)
    assert frames[0]["event"] == first_kind and (len(frames) > 1 or first_kind == "snapshot")
    for frame in frames:
        assert not list(_validator(document, one_event).iter_errors(frame)), frame
        (branch,) = [b for b in one_event["oneOf"] if not list(_validator(document, b).iter_errors(frame))]
        payload_schema = branch["properties"]["data"]["contentSchema"]
        errors = [e.message for e in _validator(document, payload_schema).iter_errors(json.loads(frame["data"]))]
        assert not errors, (frame["event"], errors)


def test_the_declared_submission_example_is_accepted(api: Api) -> None:
    document = api.client.get("/openapi.json").json()
    examples = document["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    assert examples
    for example in examples.values():
        response = api.client.post("/v1/jobs", json=example["value"], headers=_auth())
        assert response.status_code == 201, response.text
