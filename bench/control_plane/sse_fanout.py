"""SSE delivery and lag with many subscribers: one reader fanning out (now) vs every stream polling the
event log on its own (before), measured in the same run.

A server process (this file with --serve) runs the real app on SQLite and appends one event a `--rate`-th
of a second to one job (through the store and the change notifier, as the job service does); it also
mounts the old per-stream polling loop at /bench/poll-events as the baseline. This process opens N
streams of /v1/events (or the baseline's), and for the events committed while all are open reports the
fraction delivered to every stream and the lag (receive time - commit time) p50/p99, then the ratios.

    python bench/control_plane/sse_fanout.py [--subscribers 1 200 1000] [--seconds 15] [--rate 5] [--client raw|httpx]

writes bench/results/sse_fanout.json (sse_fanout-httpx.json with --client httpx) with the machine's facts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.result_meta import machine_facts, write_result  # noqa: E402
from service.free_port import free_port  # noqa: E402
from service.process_stop import terminate_then_kill  # noqa: E402

TOKEN = "rlj_bench-sse-fanout-token-" + "0123456789abcdef" * 2
JOB_ID = "rl-benchbench01"


def serve(port: int, rate: float, state_dir: Path) -> None:
    import uvicorn
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import JSONResponse, StreamingResponse

    from service.api.sse import sse_event
    from service.app import create_app
    from service.config import Settings
    from service.domain.records.models import JobRecord
    from service.domain.records.phases import JobPhase
    from trainer.contract import JobSpec

    settings = Settings(
        state_dir=state_dir, bootstrap_token=TOKEN, bootstrap_team="bench", max_event_streams=5000, max_requests_in_flight=5000
    )
    app = create_app(settings)
    produced: list[tuple[int, float]] = []

    def produce() -> None:
        while getattr(app.state, "runtime", None) is None:
            time.sleep(0.05)
        runtime = app.state.runtime
        now = datetime.now(UTC)
        with runtime.store.transaction() as tx:  # a finished job: the supervisor leaves it alone
            spec = JobSpec.model_validate(
                {
                    "name": "bench",
                    "model": {"source": "/models/tiny"},
                    "output": str(state_dir),
                    "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
                }
            )
            tx.insert(
                JobRecord(
                    id=JOB_ID,
                    team="bench",
                    name="bench",
                    spec=spec,
                    spec_hash="-",
                    phase=JobPhase.SUCCEEDED,
                    created_at=now,
                    updated_at=now,
                )
            )
        while True:
            time.sleep(1 / rate)
            now = datetime.now(UTC)
            with runtime.store.transaction() as tx:
                record = tx.get(JOB_ID, for_update=True)
                seq = tx.append_event(record, "message", {"n": len(produced)}, now)
                tx.update(record)
            produced.append((seq, now.timestamp()))
            runtime.notifier.notify()

    @app.get("/bench/produced")
    def produced_so_far() -> JSONResponse:
        return JSONResponse(produced)

    @app.get("/bench/poll-events")
    async def poll_events() -> StreamingResponse:
        """Before: what /v1/events did per stream (read the log, wait for a commit or the poll interval)."""
        runtime = app.state.runtime

        async def stream() -> AsyncIterator[bytes]:
            after = await run_in_threadpool(runtime.store.max_event_seq)
            yield sse_event("hello", after, {"after": after})
            while True:
                seen_version = runtime.notifier.version
                events = await run_in_threadpool(runtime.store.events_after, after, team="bench", limit=500)
                for event in events:
                    yield sse_event(event.kind, event.seq, event.model_dump(mode="json"))
                    after = event.seq
                if not events:
                    await runtime.notifier.wait(seen_version, settings.sse_poll_interval_s)

        return StreamingResponse(stream(), media_type="text/event-stream")

    threading.Thread(target=produce, daemon=True).start()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2)


async def _raw_stream(url: str, path: str) -> AsyncIterator[str]:
    """One SSE stream's lines over a bare asyncio connection: a client that costs far less CPU per stream
    than httpx, so that with 1,000 streams on this machine the lag measured is more the server's. uvicorn
    sends each frame as one chunk, so a chunk-size line is just one more line that no check matches."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n".encode())
    try:
        status = await reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(f"stream refused: {status!r}")
        while (line := await reader.readline()) not in (b"\r\n", b""):
            pass  # response headers
        while line := await reader.readline():
            yield line.decode().rstrip("\r\n")
    finally:
        writer.close()


async def _httpx_stream(client: httpx.AsyncClient, path: str) -> AsyncIterator[str]:
    async with client.stream("GET", path) as response:
        async for line in response.aiter_lines():
            yield line


async def subscribe(url: str, path: str, n: int, seconds: float, client_kind: str) -> tuple[float, list[dict[int, float]]]:
    """Open n streams, hold them `seconds` after all are open; returns that moment and each stream's
    {seq: receive time}."""
    received: list[dict[int, float]] = [{} for _ in range(n)]
    opened = 0
    all_open = asyncio.Event()
    limits = httpx.Limits(max_connections=n + 10)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=httpx.Timeout(60)) as client:

        async def one(got: dict[int, float]) -> None:
            nonlocal opened
            lines = _raw_stream(url, path) if client_kind == "raw" else _httpx_stream(client, path)
            event_id = None
            async for line in lines:
                if line.startswith("id: "):
                    event_id = int(line[4:])
                elif line.startswith("event: hello"):
                    opened += 1
                    if opened == n:
                        all_open.set()
                elif line.startswith("data: ") and event_id is not None and '"kind":"message"' in line:
                    got[event_id] = time.time()

        tasks = [asyncio.create_task(one(got)) for got in received]
        await asyncio.wait_for(all_open.wait(), timeout=300)
        start = time.time()
        await asyncio.sleep(seconds)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return start, received


def measure(url: str, path: str, n: int, seconds: float, client_kind: str) -> dict[str, Any]:
    start, received = asyncio.run(subscribe(url, path, n, seconds, client_kind))
    produced = httpx.get(f"{url}/bench/produced").json()
    # Events committed after all streams were open and at least 2 s before they were closed.
    window = [(seq, at) for seq, at in produced if start <= at <= start + seconds - 2]
    lags = [got[seq] - at for got in received for seq, at in window if seq in got]
    delivered = len(lags) / max(1, len(window) * n)
    lags_ms = sorted(lag * 1000 for lag in lags) or [float("nan")]
    p99 = lags_ms[min(len(lags_ms) - 1, int(len(lags_ms) * 0.99))]
    return {"delivered": delivered, "lag_p50_ms": statistics.median(lags_ms), "lag_p99_ms": p99, "events": len(window)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", type=int, nargs="+", default=[1, 200, 1000])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=float, default=5.0, help="events per second")
    parser.add_argument(
        "--client",
        choices=["raw", "httpx"],
        default="raw",
        help="raw: bare asyncio connections (cheap per stream); httpx: the client the first runs used",
    )
    parser.add_argument("--no-write", action="store_true", help="do not write the result file in bench/results/")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server process's port
    parser.add_argument("--state-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.rate, args.state_dir)
        return
    machine = machine_facts()
    results: dict[str, dict[str, Any]] = {}
    for n in args.subscribers:
        for variant, path in (("before", "/bench/poll-events"), ("now", "/v1/events")):
            port = free_port()
            with tempfile.TemporaryDirectory() as state:
                env = {**os.environ, "PYTHONPATH": str(REPO)}
                argv = [sys.executable, __file__, "--serve", str(port), "--rate", str(args.rate), "--state-dir", state]
                server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
                url = f"http://127.0.0.1:{port}"
                try:
                    deadline = time.monotonic() + 60
                    while True:
                        try:
                            if httpx.get(f"{url}/readyz").status_code == 200:
                                break
                        except httpx.TransportError:
                            pass
                        if time.monotonic() > deadline:
                            raise SystemExit("the bench server did not become ready")
                        time.sleep(0.2)
                    results[f"{variant}-{n}"] = result = measure(url, path, n, args.seconds, args.client)
                    print(
                        f"{variant:>6} {n:>5} subscribers: delivered {result['delivered']:.1%}, lag p50 "
                        f"{result['lag_p50_ms']:.0f} ms, p99 {result['lag_p99_ms']:.0f} ms ({result['events']} events)",
                        flush=True,
                    )
                finally:
                    terminate_then_kill(server, grace_s=10)
        before, now = results[f"before-{n}"], results[f"now-{n}"]
        print(
            f"       {n:>5} subscribers: lag p99 before/now {before['lag_p99_ms'] / now['lag_p99_ms']:.1f}x, "
            f"delivered {before['delivered']:.1%} -> {now['delivered']:.1%}",
            flush=True,
        )
    print(json.dumps(results, indent=1))
    if not args.no_write:
        settings = {"subscribers": args.subscribers, "seconds": args.seconds, "rate": args.rate, "client": args.client}
        name = "sse_fanout.json" if args.client == "raw" else f"sse_fanout-{args.client}.json"
        write_result(name, {"settings": settings, "results": results}, machine)


if __name__ == "__main__":
    main()
