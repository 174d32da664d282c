"""Usage through the API: GET /v1/jobs/{id}.usage, GET /v1/usage, the terminal SSE event and the
Prometheus counters, all from one timeline a ManualClock drives (the fake launcher reports phases)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from service.domain.cost.usage import DEFAULT_PRICES_USD_PER_CHIP_HOUR as PRICES
from service.domain.records.models import QueueStatus
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.conftest import Api, add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, TOKEN_A, TOKEN_ADMIN, TOKEN_B, ManualClock, spec_body, wait_for_phase, wait_until

V6E = {"accelerator": "v6e-8"}  # 8 chips, on-demand
V5P_SPOT = {"accelerator": "v5p-8", "chips_per_vm": 4, "capacity": "spot"}  # 4 chips
CPU = {"accelerator": "cpu", "rollout_engine": "jax"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def timed_api(
    store: SqlJobStore,
    fake_launcher: FakeLauncher,
    fake_progress: FakeProgress,
    settings_factory: Callable[..., Settings],
    clock: ManualClock,
) -> Iterator[Api]:
    add_test_tokens(store)
    app = create_app(settings_factory(), store=store, launcher=fake_launcher, progress=fake_progress, clock=clock)
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield Api(client, store, fake_launcher, fake_progress)


def _submit(api: Api, tmp_path: Path, name: str, hardware: dict[str, object], token: str = TOKEN_A) -> str:
    return str(api.submit(spec_body(tmp_path, name=name, hardware=hardware), token=token)["id"])


def _emit(api: Api, job_id: str, state: ObservedState, phase: JobPhase, **kw: object) -> None:
    """Report `state` and wait until the job service has applied it (observations queue to its thread),
    so the clock moves only after the phase has changed."""
    api.launcher.emit(job_id, state, **kw)
    wait_for_phase(lambda: api.phase(job_id, _owner(api, job_id)), phase)


def _owner(api: Api, job_id: str) -> str:
    record = api.store.get(job_id)
    return TOKEN_B if record is not None and record.team == "team-b" else TOKEN_A


def _usage(api: Api, token: str = TOKEN_A, **params: str) -> dict:
    response = api.client.get("/v1/usage", params={"since": T0.isoformat(), **params}, headers=api.as_(token))
    assert response.status_code == 200, response.text
    return response.json()


def _job_usage(api: Api, job_id: str, token: str = TOKEN_A) -> dict:
    return api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(token)).json()["usage"]


def _run_timeline(api: Api, clock: ManualClock, tmp_path: Path) -> dict[str, str]:
    """team-a: a v6e-8 job queued 10 min, launching 2 min, running 1 h, succeeded; a v5p-8 spot job
    running 30 min, cancelled (1 min to stop); a cpu job still running. team-b: a v6e-8 job running."""
    ids = {"v6e": _submit(api, tmp_path, "v6e", V6E)}  # LAUNCHING at once (the fake launcher takes it)
    _emit(api, ids["v6e"], ObservedState.QUEUED, JobPhase.QUEUED, queue=QueueStatus(name="tpu", reason="InsufficientQuota"))
    clock.advance(600)
    _emit(api, ids["v6e"], ObservedState.PENDING, JobPhase.LAUNCHING, message="admitted")
    clock.advance(120)
    _emit(api, ids["v6e"], ObservedState.RUNNING, JobPhase.RUNNING)
    ids["spot"] = _submit(api, tmp_path, "spot", V5P_SPOT)
    _emit(api, ids["spot"], ObservedState.RUNNING, JobPhase.RUNNING)
    clock.advance(1800)
    assert api.client.post(f"/v1/jobs/{ids['spot']}/cancel", headers=api.as_(TOKEN_A)).status_code == 200
    clock.advance(60)
    _emit(api, ids["spot"], ObservedState.FAILED, JobPhase.CANCELLED, exit_code=143)
    clock.advance(3600 - 1860)
    _emit(api, ids["v6e"], ObservedState.SUCCEEDED, JobPhase.SUCCEEDED, exit_code=0)
    ids["cpu"] = _submit(api, tmp_path, "cpu", CPU)
    _emit(api, ids["cpu"], ObservedState.RUNNING, JobPhase.RUNNING)
    ids["other"] = _submit(api, tmp_path, "other", V6E, token=TOKEN_B)
    _emit(api, ids["other"], ObservedState.RUNNING, JobPhase.RUNNING)
    clock.advance(1800)  # the cpu job and team-b's job have run 30 min now
    return ids


def test_usage_adds_up_across_jobs_and_the_team_report(timed_api: Api, clock: ManualClock, tmp_path: Path) -> None:
    ids = _run_timeline(timed_api, clock, tmp_path)
    v6e, spot, cpu = (_job_usage(timed_api, ids[k]) for k in ("v6e", "spot", "cpu"))
    assert v6e["phases"]["QUEUED"]["seconds"] == 600 and v6e["phases"]["LAUNCHING"]["seconds"] == 120
    assert v6e["billed_chip_hours"] == 8.0 and v6e["cost_usd"] == pytest.approx(8 * PRICES["v6e"]["on-demand"])
    # The cancelled job counts what it ran, the minute it took to stop included.
    assert spot["phases"]["RUNNING"]["seconds"] == 1800 and spot["phases"]["CANCELLING"]["seconds"] == 60
    assert spot["billed_chip_hours"] == pytest.approx(4 * 1860 / 3600)
    assert spot["cost_usd"] == pytest.approx(4 * 1860 / 3600 * PRICES["v5p"]["spot"])
    assert cpu["chips"] == 0 and cpu["phases"]["RUNNING"]["seconds"] == 1800 and cpu["cost_usd"] == 0

    report = _usage(timed_api)
    assert report["team"] == "team-a" and {row["job_id"] for row in report["jobs"]} == {ids["v6e"], ids["spot"], ids["cpu"]}
    per_job = [_job_usage(timed_api, row["job_id"]) for row in report["jobs"]]
    assert [row["usage"] for row in report["jobs"]] == per_job  # the report's rows are the jobs' own usage
    total = report["total"]
    assert total["jobs"] == 3
    assert total["billed_chip_hours"] == pytest.approx(sum(u["billed_chip_hours"] for u in per_job))
    assert total["billed_chip_hours"] == pytest.approx(8 + 4 * 1860 / 3600)
    assert total["cost_usd"] == pytest.approx(sum(u["cost_usd"] for u in per_job))
    assert total["chip_hours"]["QUEUED"] == pytest.approx(8 * 600 / 3600)
    assert sum(g["billed_chip_hours"] for g in report["groups"]) == pytest.approx(total["billed_chip_hours"])
    assert {(g["accelerator"], g["capacity"]) for g in report["groups"]} == {
        ("v6e-8", "on-demand"),
        ("v5p-8", "spot"),
        ("cpu", "on-demand"),
    }

    # An admin's report of every team is the sum of the teams' own reports.
    everyone = _usage(timed_api, TOKEN_ADMIN)
    team_b = _usage(timed_api, TOKEN_B)
    assert everyone["team"] is None and everyone["total"]["jobs"] == 4
    assert everyone["total"]["billed_chip_hours"] == pytest.approx(total["billed_chip_hours"] + team_b["total"]["billed_chip_hours"])
    assert team_b["total"]["billed_chip_hours"] == 4.0  # 8 chips x 30 min so far


def test_a_running_job_counts_up_to_now(timed_api: Api, clock: ManualClock, tmp_path: Path) -> None:
    job_id = _submit(timed_api, tmp_path, "long", V6E)
    _emit(timed_api, job_id, ObservedState.RUNNING, JobPhase.RUNNING)
    clock.advance(3600)
    assert _job_usage(timed_api, job_id)["billed_chip_hours"] == 8.0
    assert _usage(timed_api)["total"]["billed_chip_hours"] == 8.0
    clock.advance(1800)
    assert _job_usage(timed_api, job_id)["billed_chip_hours"] == 12.0
    assert _usage(timed_api)["total"]["billed_chip_hours"] == 12.0


def test_since_counts_the_jobs_submitted_from_then(timed_api: Api, clock: ManualClock, tmp_path: Path) -> None:
    first = _submit(timed_api, tmp_path, "first", V6E)
    clock.advance(3600)
    second = _submit(timed_api, tmp_path, "second", V6E)
    assert [row["job_id"] for row in _usage(timed_api)["jobs"]] == [second, first]  # newest first
    later = (T0 + timedelta(seconds=60)).isoformat()
    assert [row["job_id"] for row in _usage(timed_api, since=later)["jobs"]] == [second]
    assert _usage(timed_api, since="2030-01-01")["total"]["jobs"] == 2  # a date is its midnight, UTC


def test_a_team_cannot_read_another_teams_usage(timed_api: Api, clock: ManualClock, tmp_path: Path) -> None:
    _submit(timed_api, tmp_path, "secret", V6E, token=TOKEN_A)
    refused = timed_api.client.get("/v1/usage", params={"team": "team-a"}, headers=timed_api.as_(TOKEN_B))
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["query", "team"] and "admins" in refused.json()["detail"][0]["msg"]
    assert _usage(timed_api, TOKEN_B)["total"]["jobs"] == 0  # team-b's own report has none of team-a's jobs
    assert _usage(timed_api, TOKEN_ADMIN, team="team-a")["total"]["jobs"] == 1
    assert timed_api.client.get("/v1/usage").status_code == 401


@pytest.mark.parametrize(
    ("since", "reason"),
    [("last tuesday", "datetime"), ("2030-13-01", "datetime"), ("2031-01-01", "future"), ("0.5", "datetime"), ("1767225600", "datetime")],
)
def test_a_bad_since_is_a_422_naming_it(timed_api: Api, since: str, reason: str) -> None:
    response = timed_api.client.get("/v1/usage", params={"since": since}, headers=timed_api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    problem = response.json()["detail"][0]
    assert problem["loc"] == ["query", "since"] and reason in problem["msg"]


def test_the_terminal_phase_event_carries_the_final_usage(timed_api: Api, clock: ManualClock, tmp_path: Path) -> None:
    job_id = _submit(timed_api, tmp_path, "streamed", V6E)
    _emit(timed_api, job_id, ObservedState.RUNNING, JobPhase.RUNNING)
    clock.advance(900)
    _emit(timed_api, job_id, ObservedState.SUCCEEDED, JobPhase.SUCCEEDED, exit_code=0)
    with timed_api.client.stream("GET", f"/v1/jobs/{job_id}/events", headers={**timed_api.as_(TOKEN_A), "Last-Event-ID": "0"}) as stream:
        body = "".join(stream.iter_text())
    phases = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]
    phases = [event["data"] for event in phases if event["kind"] == "phase"]
    assert [p["phase"] for p in phases] == ["QUEUED", "LAUNCHING", "RUNNING", "SUCCEEDED"]
    assert all("usage" not in p for p in phases[:-1])
    assert phases[-1]["usage"]["billed_chip_hours"] == 2.0 and phases[-1]["usage"] == _job_usage(timed_api, job_id)


def test_the_team_stream_carries_the_final_usage_too(timed_api: Api, clock: ManualClock, tmp_path: Path) -> None:
    job_id = _submit(timed_api, tmp_path, "team-streamed", V6E)
    _emit(timed_api, job_id, ObservedState.RUNNING, JobPhase.RUNNING)
    clock.advance(450)
    _emit(timed_api, job_id, ObservedState.FAILED, JobPhase.FAILED, exit_code=70)
    headers = {**timed_api.as_(TOKEN_A), "Last-Event-ID": "0"}
    with timed_api.client.stream("GET", "/v1/events", params={"max_duration_s": 0.5}, headers=headers) as stream:
        body = "".join(stream.iter_text())
    events = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]
    failed = [e["data"] for e in events if e.get("kind") == "phase" and e["data"]["phase"] == "FAILED"]
    assert len(failed) == 1 and failed[0]["usage"]["billed_chip_hours"] == 1.0  # 8 chips x 7.5 min


def _counters(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    usage_families = ("rljob_chip_seconds", "rljob_job_seconds", "rljob_cost_usd")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(api.client.get("/metrics").text)
        if family.name.startswith(usage_families)
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def _key(name: str, team: str, accelerator: str, capacity: str, phase: str | None = None) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = {"team": team, "accelerator": accelerator, "capacity": capacity, **({"phase": phase} if phase else {})}
    return name, tuple(sorted(labels.items()))


def test_the_prometheus_counters_grow_as_jobs_progress(timed_api: Api, clock: ManualClock, tmp_path: Path) -> None:
    ids = _run_timeline(timed_api, clock, tmp_path)
    counters = _counters(timed_api)
    chips = "rljob_chip_seconds_total"
    assert counters[_key(chips, "team-a", "v6e-8", "on-demand", "RUNNING")] == 8 * 3600
    assert counters[_key(chips, "team-a", "v6e-8", "on-demand", "QUEUED")] == 8 * 600
    assert counters[_key(chips, "team-a", "v5p-8", "spot", "CANCELLING")] == 4 * 60
    assert counters[_key(chips, "team-b", "v6e-8", "on-demand", "RUNNING")] == 8 * 1800
    assert counters[_key("rljob_job_seconds_total", "team-a", "cpu", "on-demand", "RUNNING")] == 1800
    assert counters[_key("rljob_cost_usd_total", "team-a", "v6e-8", "on-demand")] == pytest.approx(8 * PRICES["v6e"]["on-demand"])
    # Equal to the API's figures, and growing with a running job (and not with an ended one).
    report = _usage(timed_api, TOKEN_ADMIN)
    billed_s = sum(v for (name, labels), v in counters.items() if name == chips and dict(labels)["phase"] in ("RUNNING", "CANCELLING"))
    assert billed_s / 3600 == pytest.approx(report["total"]["billed_chip_hours"])
    clock.advance(600)
    after = _counters(timed_api)
    assert after[_key(chips, "team-b", "v6e-8", "on-demand", "RUNNING")] == 8 * 2400
    assert after[_key(chips, "team-a", "v6e-8", "on-demand", "RUNNING")] == 8 * 3600
    assert ids["v6e"]


def test_counters_start_from_the_jobs_usage_when_the_service_starts(
    store: SqlJobStore,
    fake_launcher: FakeLauncher,
    fake_progress: FakeProgress,
    settings_factory: Callable[..., Settings],
    clock: ManualClock,
    tmp_path: Path,
) -> None:
    add_test_tokens(store)
    first = create_app(settings_factory(), store=store, launcher=fake_launcher, progress=fake_progress, clock=clock)
    with TestClient(first) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        api = Api(client, store, fake_launcher, fake_progress)
        job_id = _submit(api, tmp_path, "restarted", V6E)
        _emit(api, job_id, ObservedState.RUNNING, JobPhase.RUNNING)
        clock.advance(3600)
    fake_launcher.set(job_id, ObservedState.RUNNING)  # still running when the service comes back
    second = create_app(settings_factory(), store=store, launcher=fake_launcher, progress=fake_progress, clock=clock)
    with TestClient(second) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        api = Api(client, store, fake_launcher, fake_progress)
        running = _key("rljob_chip_seconds_total", "team-a", "v6e-8", "on-demand", "RUNNING")
        assert _counters(api).get(running, 0) == 0  # the first process counted that hour already
        clock.advance(60)
        assert _counters(api)[running] == 8 * 60


def test_a_report_pages_through_the_jobs_and_says_when_it_holds_only_some(
    timed_api: Api, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.api.routes import usage as usage_route

    monkeypatch.setattr(usage_route, "PAGE_SIZE", 1)  # every job its own page
    ids = []
    for name in ("one", "two", "three"):
        ids.append(_submit(timed_api, tmp_path, name, V6E))
        clock.advance(60)
    whole = _usage(timed_api)
    assert [row["job_id"] for row in whole["jobs"]] == ids[::-1] and whole["truncated"] is False
    monkeypatch.setattr(usage_route, "MAX_REPORT_JOBS", 2)
    cut = _usage(timed_api)
    assert [row["job_id"] for row in cut["jobs"]] == ids[:0:-1] and cut["truncated"] is True
    assert cut["total"]["jobs"] == 2
