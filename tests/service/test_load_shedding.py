"""Overload behaves: at the limit a request gets 503 with Retry-After at once and the service recovers
after; probes are never refused; event streams have their own limit; a request whose client left
before its answer started is cancelled, over a real uvicorn (a test client does not disconnect the
way a socket does)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import httpx
import pytest
from live_server import served
from service_helpers import wait_until
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from service.api.disconnect import CancelOnDisconnectMiddleware
from service.api.overload import LoadSheddingMiddleware


class Gate:
    """Endpoints that hold their request until released, and record how it ended."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0
        self.cancelled = 0
        self.finished = 0

    async def held(self, request: Request) -> Response:
        self.entered += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        return PlainTextResponse("done")


def gated_app(gate: Gate, *, max_requests: int = 2, max_streams: int = 1) -> LoadSheddingMiddleware:
    async def ok(request: Request) -> Response:
        return PlainTextResponse("ok")

    routes = [Route(path, gate.held) for path in ("/v1/jobs", "/v1/events", "/v1/jobs/rl-aaaaaaaaaaaa/events")]
    app = Starlette(routes=[*routes, Route("/healthz", ok), Route("/readyz", ok), Route("/v1/jobs/x", ok)])
    return LoadSheddingMiddleware(
        CancelOnDisconnectMiddleware(app), max_requests=max_requests, max_streams=max_streams, retry_after_s=3
    )


def test_at_the_limit_a_request_gets_503_with_retry_after_and_the_service_recovers() -> None:
    async def run() -> None:
        gate = Gate()
        transport = httpx.ASGITransport(app=gated_app(gate))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            held = [asyncio.create_task(client.get("/v1/jobs")) for _ in range(2)]
            stream = asyncio.create_task(client.get("/v1/events"))
            async with asyncio.timeout(10):
                while gate.entered < 3:
                    await asyncio.sleep(0.005)
            refused = await client.get("/v1/jobs/x")
            assert refused.status_code == 503 and refused.headers["Retry-After"] == "3"
            assert "limit of 2 requests" in refused.json()["detail"]
            # Probes still answer; a stream has its own limit, and a request does not take a stream's place.
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/readyz")).status_code == 200
            assert (await client.get("/v1/jobs/rl-aaaaaaaaaaaa/events")).status_code == 503
            gate.release.set()
            assert [r.status_code for r in await asyncio.gather(*held, stream)] == [200, 200, 200]
            assert (await client.get("/v1/jobs/x")).status_code == 200
            assert (await client.get("/v1/jobs/rl-aaaaaaaaaaaa/events")).status_code == 200
        assert gate.cancelled == 0

    asyncio.run(run())


@pytest.fixture
def gated_server() -> Iterator[tuple[str, Gate]]:
    gate = Gate()
    with served(gated_app(gate, max_requests=100), probe="/healthz") as url:
        yield url, gate


def test_work_for_a_client_that_left_is_cancelled_quietly(
    gated_server: tuple[str, Gate], caplog: pytest.LogCaptureFixture
) -> None:
    url, gate = gated_server
    caplog.set_level(logging.WARNING)
    for _ in range(5):
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(f"{url}/v1/jobs", timeout=httpx.Timeout(5, read=0.3))
    wait_until(lambda: gate.cancelled == 5, timeout_s=10)
    assert gate.entered == 5 and gate.finished == 0
    assert httpx.get(f"{url}/v1/jobs/x").status_code == 200
    problems = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert not problems, problems[:2]
