"""An ASGI app served by a real uvicorn on a loopback port, in a thread: for tests that need real
connections (streams left mid-way, disconnects, load shedding) rather than the in-process client."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from service.free_port import free_port
from service.process_stop import terminate_then_kill
from tests.service.service_helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def served(app: Any, *, probe: str = "/readyz", log_config: dict[str, Any] | None = None) -> Iterator[str]:
    """Serve `app` until the block ends; yields its base URL once `probe` answers 200.
    log_config=None: uvicorn's records reach the root logger, where caplog sees them."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=log_config, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}{probe}").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(up, timeout_s=30)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@contextmanager
def serving_process(argv: list[str], env: dict[str, str], port: int, stderr_path: Path, token: str) -> Iterator[httpx.Client]:
    """Run the service as a process of its own (`rljob serve`, the image's entrypoint), stderr to a file
    (not a terminal), until it is ready; yields a client with `token`; stops it with SIGTERM."""
    with stderr_path.open("ab") as stderr:
        server = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    try:

        def ready() -> bool:
            assert server.poll() is None, stderr_path.read_text()[-3000:]
            try:
                return client.get("/readyz").status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, timeout_s=60, interval_s=0.2)
        yield client
    finally:
        client.close()
        terminate_then_kill(server, grace_s=30)
