"""GET /v1/jobs/{id}/logs?follow=true: an idle follow must not hold the shared thread pool, follows
are capped (429), and a follow ends once the job is terminal."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.conftest import Api, add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, TOKEN_B, spec_body, wait_for_phase, wait_until


@pytest.fixture
def small_api(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, settings_factory: Callable[..., Settings]
) -> Iterator[Api]:
    """The app with room for 3 log follows and a shared thread pool of only 2 threads."""
    add_test_tokens(store)
    settings = settings_factory(max_log_followers=3, log_follow_poll_interval_s=0.05)
    app = create_app(settings, store=store, launcher=fake_launcher, progress=fake_progress)
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)

        async def shrink_pool() -> None:
            anyio.to_thread.current_default_thread_limiter().total_tokens = 2

        client.portal.call(shrink_pool)  # type: ignore[union-attr]
        yield Api(client, store, fake_launcher, fake_progress)


def _follow(api: Api, job_id: str, into: list[str], statuses: list[int]) -> threading.Thread:
    def read() -> None:
        with api.client.stream("GET", f"/v1/jobs/{job_id}/logs", params={"follow": "true"}, headers=api.as_(TOKEN_A)) as response:
            statuses.append(response.status_code)
            for line in response.iter_lines():
                into.append(line)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_idle_follows_leave_the_pool_free_are_capped_and_end_with_the_job(small_api: Api, tmp_path: Path) -> None:
    api = small_api
    job_id = api.submit(spec_body(tmp_path))["id"]
    api.launcher.log_lines[job_id] = ["compiling"]
    api.launcher.log_open.add(job_id)  # the job prints nothing more: every follow sits idle
    lines: list[list[str]] = [[], [], []]
    statuses: list[int] = []
    readers = [_follow(api, job_id, lines[i], statuses) for i in range(3)]
    wait_until(lambda: all(lines[i] == ["compiling"] for i in range(3)), timeout_s=10)

    # Three idle follows, a pool of two: sync routes still answer at once.
    assert api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_A)).status_code == 200
    refused = api.client.get(f"/v1/jobs/{job_id}/logs", params={"follow": "true"}, headers=api.as_(TOKEN_A))
    assert refused.status_code == 429 and "log streams are already being followed" in refused.json()["detail"]
    assert refused.headers["Retry-After"] == "2"
    assert api.client.get(f"/v1/jobs/{job_id}/logs", headers=api.as_(TOKEN_A)).text == "compiling\n"

    # The job ends (the workload log never closes): every follow stops after one more empty read.
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    api.launcher.emit(job_id, ObservedState.SUCCEEDED, exit_code=0)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.SUCCEEDED)
    for reader in readers:
        reader.join(timeout=15)
        assert not reader.is_alive()
    assert statuses == [200, 200, 200]
    followers = api.client.app.state.serving.log_followers  # type: ignore[attr-defined]
    wait_until(lambda: followers.active == 0, timeout_s=5)


def test_a_huge_cursor_is_a_422_naming_the_parameter(api: Api) -> None:
    from service.api.routes.jobs import encode_cursor

    for pk in (2**63, 10**40):
        response = api.client.get("/v1/jobs", params={"cursor": encode_cursor(pk)}, headers=api.as_(TOKEN_A))
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == ["query", "cursor"]


def test_a_log_without_follow_is_sent_in_pieces_of_whole_lines() -> None:
    """Starlette steps a sync body in a worker thread per item: one item per line cost 45-90 us of CPU a line (262 s
    for an 8 MiB stage log of 2-byte lines; bench/control_plane/log_read_cpu.py). The pieces keep every line whole and in order."""
    from service.api.log_follow import CHUNK_BYTES, log_chunks

    lines = [f"line {i}" for i in range(100_000)] + [None, "x" * (3 * CHUNK_BYTES), "last"]
    pieces = list(log_chunks(iter(lines)))
    assert b"".join(pieces).decode() == "".join(f"{line}\n" for line in lines if line is not None)
    assert all(p.endswith(b"\n") for p in pieces)  # whole lines only
    assert all(len(p) < 2 * CHUNK_BYTES for p in pieces[:-3])  # a piece closes at the first line past 64 KiB
    assert len(pieces) <= 1_000_000 // CHUNK_BYTES + 6  # about 1 MB of lines: ~16 items, not 100,003


def test_a_follow_steps_once_per_piece_of_ready_lines_and_hands_a_piece_over_before_a_read_that_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A follow stepped a worker thread per line (45-90 us of CPU each; bench/control_plane/log_read_cpu.py): now one step takes the
    lines that are ready. The launcher's None ends a step, so what has arrived is sent before a read that blocks (a
    pod's log between two pieces from the API server): here the third line comes only after the first two reached
    the client."""
    from service.api.log_follow import CHUNK_BYTES, LogFollowers, Pacer, follow_log

    steps = 0
    real_run_sync = anyio.to_thread.run_sync

    async def counting_run_sync(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal steps
        steps += 1
        return await real_run_sync(*args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting_run_sync)
    first_sent = threading.Event()
    ready = [f"line {i}" for i in range(100_000)]

    def lines() -> Iterator[str | None]:
        yield from ready
        yield None
        assert first_sent.wait(10), "the ready lines were held back until more came"
        yield "after the wait"

    async def disconnected() -> bool:
        return False

    async def read() -> bytes:
        got = b""
        body = follow_log(
            lines(),
            LogFollowers(1),
            "team-a",
            is_disconnected=disconnected,
            is_terminal=lambda: False,
            pacer=Pacer(1 << 30),
            poll_interval_s=0.01,
        )
        async for piece in body:
            got += piece
            if got.endswith(b"line 99999\n"):
                first_sent.set()
        return got

    got = anyio.run(read)
    assert got.decode() == "".join(f"{line}\n" for line in [*ready, "after the wait"])
    assert steps <= len(got) // CHUNK_BYTES + 8, steps  # about 1 MB: ~16 steps and the waits, not 100,001


def test_one_team_holds_at_most_its_share_of_the_follows(
    store: SqlJobStore,
    fake_launcher: FakeLauncher,
    fake_progress: FakeProgress,
    settings_factory: Callable[..., Settings],
    tmp_path: Path,
) -> None:
    """Before, one team could follow as many logs as the service streams (32) and every other team's follow got 429."""
    add_test_tokens(store)
    settings = settings_factory(max_log_followers=3, max_log_followers_per_team=2, log_follow_poll_interval_s=0.05)
    with TestClient(create_app(settings, store=store, launcher=fake_launcher, progress=fake_progress)) as client:
        api = Api(client, store, fake_launcher, fake_progress)
        wait_until(lambda: client.get("/readyz").status_code == 200)
        jobs = {token: api.submit(spec_body(tmp_path, name=f"j-{i}"), token=token)["id"] for i, token in enumerate((TOKEN_A, TOKEN_B))}
        for job_id in jobs.values():
            api.launcher.log_lines[job_id] = ["compiling"]
            api.launcher.log_open.add(job_id)
        lines: list[list[str]] = [[], []]
        statuses: list[int] = []
        readers = [_follow(api, jobs[TOKEN_A], lines[i], statuses) for i in range(2)]
        wait_until(lambda: all(got == ["compiling"] for got in lines), timeout_s=10)

        with client.stream("GET", f"/v1/jobs/{jobs[TOKEN_A]}/logs", params={"follow": "true"}, headers=api.as_(TOKEN_A)) as refused:
            assert refused.status_code == 429, refused.status_code
            assert "team team-a already follows 2 log streams (its share" in refused.read().decode()
        with client.stream("GET", f"/v1/jobs/{jobs[TOKEN_B]}/logs", params={"follow": "true"}, headers=api.as_(TOKEN_B)) as other:
            assert other.status_code == 200
            assert next(other.iter_lines()) == "compiling"  # the service's third place, taken by the other team
        for job_id in jobs.values():
            api.launcher.emit(job_id, ObservedState.SUCCEEDED, exit_code=0)
        for reader in readers:
            reader.join(timeout=15)
        assert statuses == [200, 200]


def test_a_follow_sends_at_its_pace_whatever_the_trainer_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """A follow of a trainer printing faster than log_follow_max_bytes_per_s waits between pieces, so one follow's
    CPU is bounded: 8 unpaced follows of 31 MiB of short lines slowed another team's requests 5 times
    (bench/control_plane/hostile_load.py). The clock is the test's: the waits are what the pace asks for, not timings."""
    from service.api import log_follow
    from service.api.log_follow import CHUNK_BYTES, LogFollowers, Pacer, follow_log

    now = [0.0]
    waits: list[float] = []
    real_sleep = anyio.sleep

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds
        await real_sleep(0)

    monkeypatch.setattr(log_follow.anyio, "sleep", sleep)
    rate = 64 * 1024
    pacer = Pacer(rate, clock=lambda: now[0])
    ready = [f"{i:07d}" for i in range(200_000)]  # 1.6 MB, all ready at once

    async def connected() -> bool:
        return False

    async def read() -> int:
        body = follow_log(
            iter(ready), LogFollowers(1), "team-a", is_disconnected=connected, is_terminal=lambda: True, poll_interval_s=0.01, pacer=pacer
        )
        return sum([len(piece) async for piece in body])

    sent = anyio.run(read)
    assert sent == 8 * len(ready)
    # Everything past the first burst waited for the bucket to refill: (bytes - burst) / rate seconds in all.
    expected = (sent - pacer.burst) / rate
    assert expected - CHUNK_BYTES / rate <= sum(waits) <= expected + CHUNK_BYTES / rate, (sum(waits), expected)


def test_the_pace_lets_a_burst_through_then_waits_and_refills_with_time() -> None:
    from service.api.log_follow import Pacer

    now = [10.0]
    pacer = Pacer(1000, burst=4000, clock=lambda: now[0])
    assert pacer.delay_after(3000) == 0.0  # within the burst
    assert pacer.delay_after(3000) == 2.0  # 2,000 bytes over: two seconds at 1,000 a second
    now[0] += 2.0
    assert pacer.delay_after(0) == 0.0
    now[0] += 100.0  # idle for long: the allowance is the burst, no more
    assert pacer.delay_after(5000) == 1.0
