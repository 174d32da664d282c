"""Server-Sent Events: snapshot first, ordered ids, resume with Last-Event-ID, end after terminal."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, TOKEN_ADMIN, TOKEN_B, spec_body, wait_for_phase


def read_sse(api: Api, path: str, token: str = TOKEN_A, on_event=None, **headers: str) -> list[tuple[str, int, dict]]:
    """Read a stream to its end; `on_event(events_so_far)` runs after each event (to drive the job)."""
    events: list[tuple[str, int, dict]] = []
    with api.client.stream("GET", path, headers={**api.as_(token), **headers}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        kind, event_id, data = None, None, None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                data = json.loads(line[6:])
            elif line == "" and kind is not None:
                events.append((kind, event_id, data))
                kind = event_id = data = None
                if on_event is not None:
                    on_event(events)
    return events


def _finish(api: Api, job_id: str) -> None:
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    api.launcher.emit(job_id, ObservedState.SUCCEEDED, exit_code=0)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.SUCCEEDED)


def test_live_stream_snapshot_then_changes_then_end(api: Api, tmp_path: Path) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    driver = threading.Thread(target=_finish, args=(api, job_id), daemon=True)

    def drive(events: list) -> None:
        if len(events) == 1:  # after the snapshot, while the stream is open
            driver.start()

    events = read_sse(api, f"/v1/jobs/{job_id}/events", on_event=drive)
    driver.join(timeout=20)  # it uses the client: finish before the app shuts down
    kinds = [k for k, _, _ in events]
    assert kinds[0] == "snapshot" and events[0][2]["phase"] == "LAUNCHING"
    ids = [i for _, i, _ in events]
    assert ids == sorted(set(ids)), "ids strictly increase"
    phases = [d["data"]["phase"] for k, _, d in events if k == "phase"]
    assert phases == ["RUNNING", "SUCCEEDED"]
    assert kinds[-1] == "phase"  # the stream ended right after the terminal phase


def test_replay_from_zero_and_resume_with_last_event_id(api: Api, tmp_path: Path) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    other = api.submit(spec_body(tmp_path, name="other"))["id"]
    _finish(api, job_id)
    everything = read_sse(api, f"/v1/jobs/{job_id}/events", **{"Last-Event-ID": "0"})
    assert [d["data"]["phase"] for k, _, d in everything] == ["QUEUED", "LAUNCHING", "RUNNING", "SUCCEEDED"]
    assert all(d["job_id"] == job_id for _, _, d in everything) and other not in str(everything)
    middle = everything[1][1]
    resumed = read_sse(api, f"/v1/jobs/{job_id}/events", **{"Last-Event-ID": str(middle)})
    assert resumed == everything[2:]  # exactly what was missed, no snapshot on resume
    snapshot_only = read_sse(api, f"/v1/jobs/{job_id}/events")
    assert [k for k, _, _ in snapshot_only] == ["snapshot"] and snapshot_only[0][1] == everything[-1][1]
    assert api.client.get(f"/v1/jobs/{job_id}/events", headers={**api.as_(TOKEN_A), "Last-Event-ID": "x"}).status_code == 422


def test_team_stream_shows_only_the_teams_jobs(api: Api, tmp_path: Path) -> None:
    mine = api.submit(spec_body(tmp_path))["id"]
    theirs = api.submit(spec_body(tmp_path, name="theirs"), token=TOKEN_B)["id"]
    _finish(api, mine)
    events = read_sse(api, "/v1/events?max_duration_s=0.3", **{"Last-Event-ID": "0"})
    assert events[0][0] == "hello"
    job_ids = {d["job_id"] for k, _, d in events[1:]}
    assert job_ids == {mine} and theirs not in str(events)
    ids = [i for _, i, _ in events[1:]]
    assert ids == sorted(ids)
    admin = read_sse(api, "/v1/events?max_duration_s=0.3", token=TOKEN_ADMIN, **{"Last-Event-ID": "0"})
    assert {d["job_id"] for _, _, d in admin[1:]} == {mine, theirs}


def test_team_stream_delivers_live_changes(api: Api, tmp_path: Path) -> None:
    driver = threading.Thread(target=api.submit, args=(spec_body(tmp_path),), daemon=True)

    def drive(events: list) -> None:
        if len(events) == 1:
            driver.start()

    events = read_sse(api, "/v1/events?max_duration_s=1", on_event=drive)
    driver.join(timeout=20)
    assert [d["data"]["phase"] for k, _, d in events if k == "phase"][:2] == ["QUEUED", "LAUNCHING"]
