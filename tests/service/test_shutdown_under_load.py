"""SIGTERM of a loaded `rljob serve` (open event streams, requests arriving) exits within its grace
period, and every stream is ended by the service with a `reconnect` event rather than cut."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from service.free_port import free_port
from service.process_stop import terminate_then_kill
from tests.service.conftest import FAKE_TRAINER
from tests.service.service_helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "rlj_shutdown-test-token-" + "0123456789abcdef" * 2
GRACE_S = 5
STREAMS = 100


async def _hold_streams(url: str, opened: threading.Event, ends: list[str]) -> None:
    """Open STREAMS event streams; record the last event kind each got before the service closed it."""
    limits = httpx.Limits(max_connections=STREAMS + 10)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=httpx.Timeout(30)) as client:
        hellos = 0

        async def one() -> None:
            nonlocal hellos
            last = "none"
            try:
                async with client.stream("GET", "/v1/events") as response:
                    async for line in response.aiter_lines():
                        if line.startswith("event: "):
                            last = line[7:]
                            hellos += last == "hello"
                            if hellos == STREAMS:
                                opened.set()
            except httpx.HTTPError as e:
                last = f"cut: {type(e).__name__}"
            ends.append(last)

        await asyncio.gather(*(one() for _ in range(STREAMS)))


def _hammer(url: str, stop: threading.Event, statuses: list[int]) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5) as client:
        while not stop.is_set():
            try:
                statuses.append(client.get("/v1/jobs").status_code)
            except httpx.TransportError:
                return  # the server has stopped listening


def test_sigterm_under_load_exits_within_the_grace_period(tmp_path: Path) -> None:
    port, state = free_port(), tmp_path / "state"
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    env.update(
        RLJOB_STATE_DIR=str(state),
        RLJOB_BOOTSTRAP_TOKEN=TOKEN,
        RLJOB_BOOTSTRAP_TEAM="team-a",
        RLJOB_TRAINER_COMMAND=json.dumps([sys.executable, str(FAKE_TRAINER)]),
        RLJOB_SHUTDOWN_GRACE_S=str(GRACE_S),
        PYTHONPATH=str(ROOT),
    )
    argv = [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port), "--state-dir", str(state)]
    stderr_path = tmp_path / "serve.stderr"
    with stderr_path.open("wb") as stderr:
        server = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:

        def ready() -> bool:
            assert server.poll() is None, stderr_path.read_text()[-3000:]
            try:
                return httpx.get(f"{url}/readyz").status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, timeout_s=60, interval_s=0.2)
        opened, stop, ends, statuses = threading.Event(), threading.Event(), [], []
        streams = threading.Thread(target=asyncio.run, args=(_hold_streams(url, opened, ends),), daemon=True)
        streams.start()
        assert opened.wait(timeout=60), f"{len(ends)} streams ended before all were open: {ends[:3]}"
        hammers = [threading.Thread(target=_hammer, args=(url, stop, statuses), daemon=True) for _ in range(4)]
        for hammer in hammers:
            hammer.start()
        wait_until(lambda: len(statuses) >= 20, timeout_s=30)
        server.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        try:
            server.wait(timeout=GRACE_S + 30)
        finally:
            stop.set()
        took_s = time.monotonic() - sent
        streams.join(timeout=30)
    finally:
        terminate_then_kill(server, grace_s=5)
    assert took_s <= GRACE_S, f"exited {took_s:.1f}s after SIGTERM; grace {GRACE_S}s"
    assert ends == ["reconnect"] * STREAMS, sorted(set(ends))
    assert set(statuses) <= {200, 503}, sorted(set(statuses))
    assert "Cancel" not in stderr_path.read_text()  # no request had to be cancelled at the end of the grace
