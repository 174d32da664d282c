"""An events.jsonl line longer than the reader takes at once is stepped over, not a stall: the
events after it are folded in and the job's message says a line was skipped."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from service.adapters.events_file import MAX_READ_BYTES, EventsFileReader
from service.adapters.store import SqlJobStore
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPorts
from service.domain.records.models import Caller
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.service_fakes import FakeLauncher
from tests.service.service_helpers import T0, spec_body
from trainer.contract import JobSpec, RunLayout, TrainStep, dump_event

TEAM_A = Caller(team="team-a", token_id="tok_a")


def _step(job_id: str, seq: int) -> str:
    event = TrainStep(seq=seq, time=T0 + timedelta(seconds=seq), job_id=job_id, step=seq, total_steps=9, loss=1.0)
    return dump_event(event) + "\n"


def _running_job(store: SqlJobStore, launcher: FakeLauncher, tmp_path: Path, reader: EventsFileReader):
    service = JobService(JobPorts(store, launcher, reader))
    job_id = service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path)))[0].id
    service.apply_observation(launcher.set(job_id, ObservedState.RUNNING))
    events = Path(RunLayout(str(tmp_path / "runs"), job_id).events)
    events.parent.mkdir(parents=True)
    return service, job_id, events


def test_an_over_long_line_is_skipped_and_progress_continues(store: SqlJobStore, fake_launcher: FakeLauncher, tmp_path: Path) -> None:
    service, job_id, events = _running_job(store, fake_launcher, tmp_path, EventsFileReader())
    huge = '{"type": "train_step", "pad": "' + "x" * (MAX_READ_BYTES + 10) + '"}\n'
    events.write_text(_step(job_id, 1) + huge + _step(job_id, 2))
    for _ in range(3):  # the poller's reads; each returns while more remains
        service.ingest_progress(job_id)
    record = store.get(job_id)
    assert record is not None and record.report.step == 2 and record.phase is JobPhase.RUNNING
    assert [p.step for p in store.metric_points(job_id, limit=10)] == [1, 2]
    start = len(_step(job_id, 1))
    assert f"skipped a {len(huge)}-byte line at byte {start} of {events}" in record.message
    notes = [e for e in store.events_after(0, job_id=job_id, limit=100) if e.kind == "message"]
    assert [n.data["reason"] for n in notes] == ["EventLineTooLong"]


def test_a_long_line_still_being_written_waits_for_its_end(store: SqlJobStore, fake_launcher: FakeLauncher, tmp_path: Path) -> None:
    service, job_id, events = _running_job(store, fake_launcher, tmp_path, EventsFileReader(max_read_bytes=1024))
    head, tail = '{"pad": "' + "x" * 3000, '"}\n'
    events.write_text(_step(job_id, 1) + head)  # no newline yet
    service.ingest_progress(job_id, until_caught_up=True)
    record = store.get(job_id)
    assert record is not None and record.report.step == 1 and "skipped" not in record.message
    with events.open("a") as f:
        f.write(tail + _step(job_id, 2))
    service.ingest_progress(job_id, until_caught_up=True)
    record = store.get(job_id)
    assert record is not None and record.report.step == 2 and f"skipped a {len(head + tail)}-byte line" in record.message
