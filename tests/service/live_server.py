"""An ASGI app served by a real uvicorn on a loopback port, in a thread: for tests that need real
connections (streams left mid-way, disconnects, load shedding) rather than the in-process client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from service_helpers import wait_until

from service.free_port import free_port


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
