"""Event streams over a real uvicorn and a real store: 50 streams get every event while the event log
is read by one reader only, and 100 streams leaving at once while events flow log nothing at ERROR."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from functools import wraps
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.live_server import served
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from tests.service.conftest import add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, spec_body

AUTH = {"Authorization": f"Bearer {TOKEN_A}"}


class CountedReads:
    def __init__(self, store: SqlJobStore) -> None:
        self.calls = 0
        read = store.events_after

        @wraps(read)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return read(*args, **kwargs)

        store.events_after = counted  # type: ignore[method-assign]


@pytest.fixture
def live(store: SqlJobStore, tmp_path: Path) -> Iterator[tuple[str, CountedReads]]:
    add_test_tokens(store)
    reads = CountedReads(store)
    settings = Settings(state_dir=tmp_path / "state", sse_poll_interval_s=1.0)
    app = create_app(settings, store=store, launcher=FakeLauncher(), progress=FakeProgress())
    with served(app) as url:
        yield url, reads


async def _stream(client: httpx.AsyncClient, seen: list[int], opened: Callable[[], None], **headers: str) -> None:
    async with client.stream("GET", "/v1/events", headers=headers) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                seen.append(int(line[4:]))
                if len(seen) == 1:
                    opened()


def test_fifty_streams_get_every_event_from_one_reader(live: tuple[str, CountedReads], store: SqlJobStore, tmp_path: Path) -> None:
    url, reads = live
    received: list[list[int]] = [[] for _ in range(50)]

    async def run() -> None:
        limits = httpx.Limits(max_connections=60)
        async with httpx.AsyncClient(base_url=url, headers=AUTH, limits=limits, timeout=30) as client:
            opened = 0

            def one_opened() -> None:
                nonlocal opened
                opened += 1

            tasks = [asyncio.create_task(_stream(client, seen, one_opened)) for seen in received]
            async with asyncio.timeout(30):
                while opened < 50:
                    await asyncio.sleep(0.01)
            before = reads.calls
            for i in range(3):
                assert (await client.post("/v1/jobs", json=spec_body(tmp_path, name=f"j{i}"))).status_code == 201
            start = received[0][0]  # the hello's id: where "now" was
            expected = [e.seq for e in store.events_after(start, team="team-a")]
            async with asyncio.timeout(30):
                while not all(seen[1:] == expected for seen in received):
                    await asyncio.sleep(0.02)
            during = reads.calls - before - 1  # the store read just above is the test's own
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            assert len(expected) >= 6 and all(seen[1:] == expected for seen in received)
            # One reader: about one read per commit (and a poll a second), not one per stream.
            assert during <= 20, during

    asyncio.run(run())


def test_a_hundred_streams_leaving_at_once_while_events_flow_log_no_error(
    live: tuple[str, CountedReads], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = live
    caplog.set_level(logging.WARNING)

    async def run() -> None:
        limits = httpx.Limits(max_connections=120)
        async with httpx.AsyncClient(base_url=url, headers=AUTH, limits=limits, timeout=30) as client:
            for i in range(40):
                assert (await client.post("/v1/jobs", json=spec_body(tmp_path, name=f"j{i}"))).status_code == 201
            opened = 0

            def one_opened() -> None:
                nonlocal opened
                opened += 1

            # From seq 0: every stream has a backlog to write when its client leaves.
            tasks = [asyncio.create_task(_stream(client, [], one_opened, **{"Last-Event-ID": "0"})) for _ in range(100)]
            async with asyncio.timeout(60):
                while opened < 100:
                    await asyncio.sleep(0.01)
            submits = [asyncio.create_task(client.post("/v1/jobs", json=spec_body(tmp_path, name=f"k{i}"))) for i in range(5)]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, *submits, return_exceptions=True)
            assert (await client.get("/readyz")).status_code == 200

    asyncio.run(run())
    problems = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert not problems, problems[:2]
