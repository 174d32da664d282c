"""What a job writes in its run directory is untrusted input (issue 22): a team plants, where the trainer's
samples, stage logs, manifest and events go, a link to a file outside (the service's client.yaml), a link
into another team's run directory, a FIFO, a link to /dev/zero, a huge file, a directory, or links a
whole directory. Each is answered at once, clearly (a 409, or a line saying the file is not served),
never with what it points at, and another team's reads go on meanwhile. Real app, store and files.

Without the safe reader (service/adapters/run_reads.py) these fail: the links are served, the FIFO
holds its request (and the progress poller, and the job's end) for good, /dev/zero is read until the
memory runs out."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.adapters.events_file import MAX_SCAN_BYTES, EventsFileReader
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.api.test_api_learning import write_samples
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, TOKEN_B, spec_body, wait_for_phase, wait_until
from trainer.contract import STAGE_ORDER, RunLayout, Stage, StageStarted, TrainStep

pytestmark = pytest.mark.timeout(60)  # a hang is the failure these tests exist for: never wait it out

PROMPT_S = 5.0  # an answer "at once", with room for a loaded test machine
SECRET = "rljob-admin-0123456789abcdef"  # the bootstrap admin token, as client.yaml holds it
HUGE_BYTES = 3 << 30  # sparse: no disk, but 3 GiB to anyone who reads to EOF


def _plant(kind: str, path: Path, *, outside: Path, other_team: Path) -> None:
    """Put the hostile `kind` where the trainer's file `path` goes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link-outside":
        os.symlink(outside, path)
    elif kind == "link-other-team":
        os.symlink(other_team, path)
    elif kind == "hardlink-outside":  # the service's client.yaml under a name in the run directory (one filesystem)
        os.link(outside, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "huge":
        with path.open("wb") as f:
            f.truncate(HUGE_BYTES)
    elif kind == "directory":
        path.mkdir()
    else:
        raise AssertionError(kind)


KINDS = ["link-outside", "link-other-team", "hardlink-outside", "fifo", "dev-zero", "huge", "directory"]
REFUSED_AS = {
    "link-outside": "is not a regular file (a symlink)",
    "link-other-team": "is not a regular file (a symlink)",
    "fifo": "is not a regular file (a FIFO)",
    "dev-zero": "is not a regular file (a symlink)",
    "directory": "is not a regular file (a directory)",
    "hardlink-outside": "is a hard link (2 names for one file)",
}


@pytest.fixture
def planted_fifos() -> Iterator[list[Path]]:
    """FIFOs a test planted; at its end each is opened for writing once, so a reader a broken service
    left blocked in open() gets EOF and the app can shut down (the test has failed by then)."""
    fifos: list[Path] = []
    yield fifos
    for fifo in fifos:
        for _ in range(20):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # ENXIO: no reader (any more)
                break


class Teams:
    """Team A's job (the one that plants) and team B's, each with its own output directory."""

    def __init__(self, api: Api, tmp_path: Path, fifos: list[Path]) -> None:
        self.api, self.fifos = api, fifos
        self.a = api.submit(spec_body(tmp_path, output=str(tmp_path / "runs-a")))["id"]
        self.b = api.submit(spec_body(tmp_path, name="job-b", output=str(tmp_path / "runs-b")), token=TOKEN_B)["id"]
        self.layout_a = RunLayout(str(tmp_path / "runs-a"), self.a)
        self.layout_b = RunLayout(str(tmp_path / "runs-b"), self.b)
        self.client_yaml = tmp_path / "service" / "client.yaml"
        self.client_yaml.parent.mkdir()
        self.client_yaml.write_text(f"url: http://127.0.0.1:8000\ntoken: {SECRET}\n")
        write_samples(self.layout_b, 1, completion=f"team b's private completion {SECRET}")
        Path(self.layout_b.stage_log(Stage.TRAIN)).parent.mkdir(parents=True)
        Path(self.layout_b.stage_log(Stage.TRAIN)).write_text(f"team b's log {SECRET}\n")

    def plant(self, kind: str, path: str, other_team: str) -> None:
        _plant(kind, Path(path), outside=self.client_yaml, other_team=Path(other_team))
        if kind == "fifo":
            self.fifos.append(Path(path))

    def get(self, path: str, token: str = TOKEN_A, **params: object) -> tuple[int, str, float]:
        started = time.monotonic()
        response = self.api.client.get(path, params=params, headers=self.api.as_(token))
        return response.status_code, response.text, time.monotonic() - started

    def while_planted_b_still_reads(self, *hostile: Callable[[], tuple[int, str, float]]) -> list[tuple[int, str, float]]:
        """Run the hostile reads (several of each) alongside team B's own reads; every answer comes promptly."""
        pool = ThreadPoolExecutor(max_workers=8)
        try:  # never `with`: its exit would wait for a read a broken service left hanging
            planted = [pool.submit(read) for read in hostile for _ in range(3)]
            b_samples = [pool.submit(self.get, f"/v1/jobs/{self.b}/samples", TOKEN_B) for _ in range(3)]
            b_logs = pool.submit(self.get, f"/v1/jobs/{self.b}/logs", TOKEN_B)
            answers = [f.result(timeout=PROMPT_S * 4) for f in planted]
            for f in b_samples:
                status, text, took = f.result(timeout=PROMPT_S * 4)
                assert status == 200 and "team b's private completion" in text and took < PROMPT_S, (status, took)
            status, text, took = b_logs.result(timeout=PROMPT_S * 4)
            assert status == 200 and "team b's log" in text and took < PROMPT_S
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        for _, text, took in answers:
            assert took < PROMPT_S, f"answered after {took:.1f}s"
            assert SECRET not in text and "private completion" not in text
        return answers


@pytest.fixture
def teams(api: Api, tmp_path: Path, planted_fifos: list[Path]) -> Teams:
    return Teams(api, tmp_path, planted_fifos)


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_samples_file_is_refused_at_once(teams: Teams, kind: str) -> None:
    write_samples(teams.layout_a, 2)  # a good one beside it: still served
    teams.plant(kind, teams.layout_a.samples_file(1), other_team=teams.layout_b.samples_file(1))
    answers = teams.while_planted_b_still_reads(lambda: teams.get(f"/v1/jobs/{teams.a}/samples", step=1))
    for status, text, _ in answers:
        assert status == 409, text
        expected = "is over 4194304 bytes" if kind == "huge" else REFUSED_AS[kind]
        assert expected in text and "not served" in text
    status, text, _ = teams.get(f"/v1/jobs/{teams.a}/samples")
    assert status == 200 and '"step":2' in text  # a link is not even listed; the newest real file is served


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_stage_log_is_marked_not_served_at_once(teams: Teams, kind: str) -> None:
    Path(teams.layout_a.stage_log(Stage.CONVERT)).parent.mkdir(parents=True)
    Path(teams.layout_a.stage_log(Stage.CONVERT)).write_text("converted\n")
    teams.plant(kind, teams.layout_a.stage_log(Stage.TRAIN), other_team=teams.layout_b.stage_log(Stage.TRAIN))
    answers = teams.while_planted_b_still_reads(lambda: teams.get(f"/v1/jobs/{teams.a}/logs"))
    for status, text, _ in answers:
        lines = text.splitlines()
        assert status == 200 and lines[:2] == [f"==> convert stage log ({teams.layout_a.stage_log(Stage.CONVERT)}) <==", "converted"]
        if kind == "huge":  # a log may be long: its tail, never the whole
            assert lines[2].endswith(", last 8 MiB) <==") and len(text) < (8 << 20) + 4096
        else:
            assert lines[2:] == [f"==> train stage log: the run directory's logs/train.log {REFUSED_AS[kind]}: it is not served <=="]


@pytest.mark.parametrize("what", ["samples", "logs", "run"])
def test_a_linked_directory_is_not_followed(teams: Teams, what: str) -> None:
    """A directory on the way to the file, or the run directory itself, linked to another team's."""
    if what == "run":
        Path(teams.layout_a.output).mkdir()
        os.symlink(teams.layout_b.root, teams.layout_a.root)
    else:
        Path(teams.layout_a.root).mkdir(parents=True)
        os.symlink(Path(teams.layout_b.root, what), Path(teams.layout_a.root, what))
    samples, logs = teams.while_planted_b_still_reads(
        lambda: teams.get(f"/v1/jobs/{teams.a}/samples"),
        lambda: teams.get(f"/v1/jobs/{teams.a}/logs"),
    )[::3]
    place = "the run directory itself" if what == "run" else f"the run directory's {what}"
    if what in ("samples", "run"):
        assert samples[:2] == (409, f'{{"detail":"{place} is not a plain directory (a symlink): samples not served"}}')
    else:
        assert samples[0] == 404  # team a's job has no samples of its own
    if what in ("logs", "run"):
        assert logs[0] == 200 and logs[1].splitlines() == [
            f"==> {stage.value} stage log: {place} is not a plain directory (a symlink): logs/{stage.value}.log not served <=="
            for stage in STAGE_ORDER
        ]
    else:
        assert logs[:2] == (200, "")  # no stage logs of its own


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link-other-team", "huge"])
def test_a_planted_manifest_does_not_hold_up_the_jobs_end(api: Api, teams: Teams, kind: str) -> None:
    b_manifest = Path(teams.layout_b.manifest)
    b_manifest.write_text(json.dumps({"job_id": teams.a, "artifacts": [], "references": {"stolen": str(teams.client_yaml)}}))
    teams.plant(kind, teams.layout_a.manifest, other_team=str(b_manifest))
    for job_id in (teams.a, teams.b):
        api.launcher.emit(job_id, ObservedState.RUNNING)
    started = time.monotonic()
    api.launcher.emit(teams.a, ObservedState.SUCCEEDED)
    api.launcher.emit(teams.b, ObservedState.SUCCEEDED)
    wait_for_phase(lambda: api.phase(teams.b, TOKEN_B), JobPhase.SUCCEEDED, timeout_s=PROMPT_S * 2)
    wait_for_phase(lambda: api.phase(teams.a), JobPhase.SUCCEEDED, timeout_s=PROMPT_S * 2)
    assert time.monotonic() - started < PROMPT_S * 2
    job = api.client.get(f"/v1/jobs/{teams.a}", headers=api.as_(TOKEN_A)).json()
    assert str(teams.client_yaml) not in str(job["artifacts"])


# ---- events.jsonl, read by the progress poller --------------------------------------------------


def _write_events(layout: RunLayout, job_id: str, step: int) -> None:
    now = datetime.now(UTC)
    events = [
        StageStarted(seq=0, time=now, job_id=job_id, stage=Stage.TRAIN),
        TrainStep(seq=1, time=now, job_id=job_id, step=step, total_steps=9, loss=0.5, kl=0.1),
    ]
    Path(layout.events).parent.mkdir(parents=True, exist_ok=True)
    Path(layout.events).write_text("".join(e.model_dump_json() + "\n" for e in events))


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_events_file_stops_no_ones_progress(
    api_reading_events: Api, tmp_path: Path, planted_fifos: list[Path], kind: str
) -> None:
    api = api_reading_events
    teams = Teams(api, tmp_path, planted_fifos)
    _write_events(teams.layout_b, teams.b, step=3)
    teams.plant(kind, teams.layout_a.events, other_team=teams.layout_b.events)
    for job_id in (teams.a, teams.b):
        api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_until(lambda: api.store.get(teams.b).report.step == 3, timeout_s=PROMPT_S * 2)  # type: ignore[union-attr]

    reader = EventsFileReader()
    record = api.store.get(teams.a)
    assert record is not None
    started = time.monotonic()
    pending, batch = reader.pending(record), reader.read_new(record)
    assert time.monotonic() - started < PROMPT_S
    assert batch.events == []
    if kind == "huge":  # a regular file, only far longer than it should be: read, and stepped over, in bounded parts
        assert pending and batch.skipped and 0 < batch.end <= reader.max_read_bytes + MAX_SCAN_BYTES
    else:
        assert not pending and batch.end == 0 and not batch.more
    assert api.store.get(teams.a).report.step in (None, 0)  # type: ignore[union-attr]  # team b's steps are not team a's


@pytest.mark.parametrize("huge", [2**40, 2**70])  # over PostgreSQL's integer; over SQLite's (and Python sqlite3's) int64
def test_an_out_of_range_count_is_one_skipped_event_and_the_rest_of_the_batch_lands(
    api_reading_events: Api, tmp_path: Path, huge: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Before the events' counts were bounded, the store refused the whole batch with the step in it: the job's
    progress stopped at the hostile line for good (every poll re-read the same batch)."""
    api = api_reading_events
    job_id = api.submit(spec_body(tmp_path, output=str(tmp_path / "runs")))["id"]
    layout = RunLayout(str(tmp_path / "runs"), job_id)
    now = datetime.now(UTC)

    def step(seq: int, n: int) -> str:
        good = TrainStep(seq=seq, time=now, job_id=job_id, step=1, total_steps=9, loss=0.5, kl=0.1)
        return json.dumps({**json.loads(good.model_dump_json()), "step": n})  # written as a hostile trainer would

    lines = [
        StageStarted(seq=0, time=now, job_id=job_id, stage=Stage.TRAIN).model_dump_json(),
        step(1, huge),
        step(2, 2),
        step(3, huge + 1),
        step(4, 3),
    ]
    Path(layout.events).parent.mkdir(parents=True, exist_ok=True)
    Path(layout.events).write_text("".join(line + "\n" for line in lines))
    with caplog.at_level("WARNING", logger="service.adapters.events_file"):
        api.launcher.emit(job_id, ObservedState.RUNNING)
        wait_until(lambda: api.store.get(job_id).report.step == 3, timeout_s=PROMPT_S * 2)  # type: ignore[union-attr]
    points = api.client.get(f"/v1/jobs/{job_id}/metrics", headers=api.as_(TOKEN_A)).json()["points"]
    assert [p["step"] for p in points if p["kind"] == "train"] == [2, 3]
    assert sum("unreadable event line" in r.getMessage() for r in caplog.records) == 1  # two bad lines, one warning
