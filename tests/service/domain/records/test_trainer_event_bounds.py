"""A job's trainer events are bounded per job (issue 33): what is past a bound is refused and counted, never stored.

Real app, store and events reader (the `api_reading_events` fixture), the events written as a hostile trainer
(or a reward function inside it) would. Before the bounds, 100,000 artifact events gave a 13 MB list page and
+440 MiB of service memory, and a trainer could fill the event log and metric tables without end.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.domain.progress import fold_events
from service.domain.records import trainer_event_budget as budget
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.domain.records.run_report import RunReport
from service.domain.records.trainer_event_budget import TrainerEventCounts
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, TOKEN_B, record_spec, spec_body, wait_until
from trainer.contract import ArtifactWritten, GoodputMeasured, RunLayout, Stage, StageStarted, TrainStep
from trainer.contract.run.goodput import TRAIN_PARTS, TrainGoodput

pytestmark = pytest.mark.timeout(120)

NOW = datetime.now(UTC)


def _job(api: Api, tmp_path: Path, name: str = "hostile", token: str = TOKEN_A) -> tuple[str, RunLayout]:
    job_id = api.submit(spec_body(tmp_path, name=name, output=str(tmp_path / f"runs-{name}")), token=token)["id"]
    return job_id, RunLayout(str(tmp_path / f"runs-{name}"), job_id)


def _running(api: Api, job_id: str) -> None:
    """RUNNING before the trainer writes: the phase change's own message would replace the one a test reads."""
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_until(lambda: api.store.get(job_id).phase is JobPhase.RUNNING, timeout_s=30)  # type: ignore[union-attr]


def _write(layout: RunLayout, lines: list[str]) -> None:
    Path(layout.events).parent.mkdir(parents=True, exist_ok=True)
    with Path(layout.events).open("a") as f:
        f.write("".join(line + "\n" for line in lines))


def _step(job_id: str, seq: int, step: int, **metrics: float) -> str:
    return TrainStep(seq=seq, time=NOW, job_id=job_id, step=step, total_steps=10**6, loss=0.5, kl=0.1, metrics=metrics).model_dump_json()


def _get(api: Api, job_id: str, token: str = TOKEN_A) -> dict:
    return api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(token)).json()


def test_a_hundred_thousand_artifact_names_keep_the_first_few_and_count_the_rest(api_reading_events: Api, tmp_path: Path) -> None:
    api = api_reading_events
    job_id, layout = _job(api, tmp_path)
    _running(api, job_id)
    names = 100_000
    lines = [StageStarted(seq=0, time=NOW, job_id=job_id, stage=Stage.TRAIN).model_dump_json()]
    lines += [
        ArtifactWritten(seq=i + 1, time=NOW, job_id=job_id, name=f"a{i:06d}", uri=f"{layout.root}/x{i}", size_bytes=1).model_dump_json()
        for i in range(names)
    ]
    lines.append(_step(job_id, names + 1, 7))
    _write(layout, lines)
    wait_until(lambda: api.store.get(job_id).report.step == 7, timeout_s=60)  # type: ignore[union-attr]

    job = _get(api, job_id)
    assert len(job["artifacts"]) == budget.MAX_ARTIFACTS
    assert {a["name"] for a in job["artifacts"]} == {f"a{i:06d}" for i in range(budget.MAX_ARTIFACTS)}  # the first
    assert job["trainer_events"]["refused"] == names - budget.MAX_ARTIFACTS
    assert "exceed what the service stores per job" in job["message"]
    kinds = [e.kind for e in api.store.events_after(0, job_id=job_id, limit=1000)]
    assert kinds.count("artifact") == budget.MAX_ARTIFACTS and kinds.count("message") == 1
    page = api.client.get("/v1/jobs", headers=api.as_(TOKEN_A))
    assert page.status_code == 200 and len(page.content) < 100_000, len(page.content)  # was 13 MB

    # Another team's job is told apart: nothing of team A's refusal is on it.
    other, _ = _job(api, tmp_path, name="other", token=TOKEN_B)
    assert _get(api, other, TOKEN_B)["trainer_events"] == {"stored": 0, "stored_bytes": 0, "refused": 0}


def test_past_the_entry_bound_steps_still_move_the_job_but_are_not_stored(
    api_reading_events: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is 100,000 entries; 40 here, so the test writes hundreds, not hundreds of thousands (the rule is
    the same code: TrainerEventCounts.admit reads the bound when it counts)."""
    monkeypatch.setattr(budget, "MAX_STORED_ENTRIES", 40)
    api = api_reading_events
    job_id, layout = _job(api, tmp_path)
    _running(api, job_id)
    _write(
        layout,
        [StageStarted(seq=0, time=NOW, job_id=job_id, stage=Stage.TRAIN).model_dump_json()] + [_step(job_id, s, s) for s in range(1, 301)],
    )
    wait_until(lambda: api.store.get(job_id).report.step == 300, timeout_s=60)  # type: ignore[union-attr]

    job = _get(api, job_id)
    assert job["step"] == 300 and job["metrics"]["loss"] == 0.5  # the status follows every step
    assert job["trainer_events"]["stored"] == 40 and job["trainer_events"]["refused"] == 301 - 40
    points = api.client.get(f"/v1/jobs/{job_id}/metrics", headers=api.as_(TOKEN_A)).json()["points"]
    assert [p["step"] for p in points if p["kind"] == "train"] == list(range(1, 40))  # entry 1 is the stage's
    assert "exceed what the service stores per job" in job["message"]

    # A restarted service reads the counts back: the bound holds across lives (the events are not folded again).
    record = api.store.get(job_id)
    assert record is not None and record.report.trainer_events == TrainerEventCounts(
        stored=40, stored_bytes=record.report.trainer_events.stored_bytes, refused=261
    )


def test_a_line_over_the_event_size_is_not_parsed_and_counted(api_reading_events: Api, tmp_path: Path) -> None:
    """A 1 MiB train step (metric names a reward function made up) would be a megabyte in the event log and the
    metric table each; it is stepped over, and the job's message names the line."""
    api = api_reading_events
    job_id, layout = _job(api, tmp_path)
    _running(api, job_id)
    huge = _step(job_id, 2, 2, **{f"m{i:07d}": 1.0 for i in range(60_000)})
    assert len(huge) > budget.MAX_EVENT_BYTES
    _write(
        layout,
        [StageStarted(seq=0, time=NOW, job_id=job_id, stage=Stage.TRAIN).model_dump_json(), _step(job_id, 1, 1), huge, _step(job_id, 3, 3)],
    )
    wait_until(lambda: api.store.get(job_id).report.step == 3, timeout_s=30)  # type: ignore[union-attr]
    job = _get(api, job_id)
    points = api.client.get(f"/v1/jobs/{job_id}/metrics", headers=api.as_(TOKEN_A)).json()["points"]
    assert [p["step"] for p in points if p["kind"] == "train"] == [1, 3]
    assert job["trainer_events"]["stored_bytes"] < 10_000
    messages = [e.data for e in api.store.events_after(0, job_id=job_id) if e.kind == "message"]
    assert [m["reason"] for m in messages] == ["EventLineTooLong"]
    assert f"({budget.MAX_EVENT_BYTES} bytes)" in messages[0]["message"]


def test_goodput_attempts_past_the_bound_are_refused() -> None:
    record = JobRecord(
        id="rl-aaaaaaaaaaaa", team="a", name="n", spec=record_spec(), spec_hash="h", phase=JobPhase.RUNNING, created_at=NOW, updated_at=NOW
    )
    train = TrainGoodput(elapsed_s=1.0, parts=dict.fromkeys(TRAIN_PARTS, 0.0), step=1)
    events = [
        GoodputMeasured(seq=i, time=NOW, job_id=record.id, attempt=i + 1, train=train) for i in range(budget.MAX_GOODPUT_ATTEMPTS + 10)
    ]
    fold_events(record, events)
    assert len(record.report.goodput) == budget.MAX_GOODPUT_ATTEMPTS
    assert record.report.trainer_events.refused == 10
    # An attempt already kept is still updated past the bound.
    fold_events(record, [GoodputMeasured(seq=10**6, time=NOW, job_id=record.id, attempt=1, train=train.model_copy(update={"step": 9}))])
    assert record.report.goodput[1].step == 9


def test_the_counts_read_back_from_json_and_unreadable_json_is_zeros() -> None:
    counts = TrainerEventCounts(stored=3, stored_bytes=300, refused=1)
    assert TrainerEventCounts.of_json(json.loads(json.dumps(counts.to_json()))) == counts
    assert TrainerEventCounts.of_json(None) == TrainerEventCounts()
    assert TrainerEventCounts.of_json({"stored": -1}) == TrainerEventCounts()
    assert TrainerEventCounts.of_json("junk") == TrainerEventCounts()


def test_the_byte_bound_refuses_an_entry_that_would_pass_it() -> None:
    counts = TrainerEventCounts(stored_bytes=budget.MAX_STORED_BYTES - 10)
    assert not counts.admit([("progress", {"step": 1, "metrics": {"loss": 0.123456789}})])
    assert counts.refused == 1 and counts.stored == 0
    assert counts.admit([("stage", {})])  # 2 bytes still fit


def test_a_first_refusal_by_an_over_long_line_is_said_too() -> None:
    """The job's message names the first refusal whichever path made it (an event, or a line stepped over)."""
    from service.domain.progress import note_skipped_lines
    from service.domain.records.ports import SkippedLine

    record = JobRecord(
        id="rl-aaaaaaaaaaaa",
        team="a",
        name="n",
        spec=record_spec(),
        spec_hash="h",
        phase=JobPhase.RUNNING,
        created_at=NOW,
        updated_at=NOW,
        report=RunReport(trainer_events=TrainerEventCounts(stored=budget.MAX_STORED_ENTRIES)),
    )
    line = SkippedLine(uri="/r/events.jsonl", offset=0, size_bytes=10**6, limit_bytes=budget.MAX_EVENT_BYTES)
    changes = note_skipped_lines(record, [line, line])
    assert record.report.trainer_events.refused == 2
    assert [data["reason"] for _, data in changes.log] == ["TrainerEventsRefused"]
    assert "exceed what the service stores per job" in record.message
