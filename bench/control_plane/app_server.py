"""A uvicorn server for a bench, started the way the image starts the service (`uvicorn APP --factory --workers 1`,
no access log), as a context manager that yields its (pid, port) once /healthz answers. Used by bench/control_plane/replicas.py and
bench/control_plane/idle_cpu.py, so they do not depend on bench/control_plane/control_plane.py's own server variants."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@contextmanager
def uvicorn_app(app: str, env: dict[str, str], work: Path, name: str, app_dir: Path | None = None) -> Iterator[tuple[int, int]]:
    sys.path.insert(0, str(REPO))
    from service.free_port import free_port

    port = free_port()
    log = work / f"{name}.log"
    argv = [
        str(BIN / "uvicorn"),
        app,
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--timeout-graceful-shutdown",
        "5",
        "--no-server-header",
        "--no-access-log",
    ]
    if app_dir is not None:
        argv += ["--app-dir", str(app_dir)]
    with until_healthy(argv, env, work, log, name, port) as pid:
        yield pid, port


@contextmanager
def until_healthy(argv: list[str], env: dict[str, str], work: Path, log: Path, name: str, port: int) -> Iterator[int]:
    """Start `argv` (its output to `log`) and yield its pid once /healthz on `port` answers; stop it after."""
    sys.path.insert(0, str(REPO))
    from service.process_stop import terminate_then_kill

    with log.open("wb") as out:  # the access log goes here, as a container's stderr goes to its runtime
        server = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=work)
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                raise SystemExit(f"{name} exited: {log.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} did not answer /healthz within 60 s")
            time.sleep(0.2)
        yield server.pid
    finally:
        terminate_then_kill(server, grace_s=10)
