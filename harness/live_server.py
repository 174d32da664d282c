"""The control service on a real uvicorn on 127.0.0.1, for tests and benches that need real connections
(streams left mid-way, disconnects, load shedding, a browser) rather than the in-process client.

    ThreadedServer    an ASGI app served in a thread of this process, started until its probe answers
    served()          ThreadedServer as a context manager on a fresh port: yields the base URL
    serving_process() the service as a process of its own (`rljob serve`, the image's entrypoint)
    LiveService       the real app (SQLite, the local launcher running held_trainer.py) in a temp dir, with
                      the trainer's side of the progress channel: events and samples written into a run
                      directory the way the trainer writes them; the dashboard's browser tests use it
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx
import uvicorn

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import load_settings
from service.domain.tokens import TokenService
from service.free_port import free_port
from service.process_stop import terminate_then_kill
from trainer.contract import RunLayout, Sample, StepSamples, dump_event, parse_event

ROOT = Path(__file__).resolve().parents[1]
HELD_TRAINER = Path(__file__).with_name("held_trainer.py")
TEAM = "alpha"
TOKEN = "rlj_dashboard-test-token-0123456789abcdef"
SUBMITTER = "alice"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def _poll_until(predicate: Callable[[], bool], what: str, timeout_s: float, interval_s: float) -> None:
    """Poll real state (a server thread or process starting in real time); bounded."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s}s")
        time.sleep(interval_s)


@dataclass
class ThreadedServer:
    """A uvicorn server running `app` in a daemon thread; `start` returns once `probe` answers 200."""

    server: uvicorn.Server
    thread: threading.Thread
    url: str

    @classmethod
    def start(
        cls,
        app: Any,
        port: int = 0,
        *,
        probe: str = "/readyz",
        thread_name: str = "uvicorn",
        timeout_s: float = START_TIMEOUT_S,
        **config: Any,
    ) -> ThreadedServer:
        """`config`: uvicorn.Config options (log_config, timeout_graceful_shutdown, ...). Port 0: one the kernel
        picks. The socket is bound here and handed to uvicorn: a port chosen first and bound later could be taken in
        between (the other test worker's server once was), and the probe then reached that server instead."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a restart on the same port
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            raise
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **config))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=thread_name, daemon=True)
        thread.start()
        running = cls(server, thread, f"http://127.0.0.1:{port}")

        def up() -> bool:
            if not thread.is_alive():
                raise RuntimeError(f"the server thread for {running.url} exited during start-up")
            try:
                return httpx.get(f"{running.url}{probe}", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        try:
            _poll_until(up, f"{running.url}{probe} did not answer 200", timeout_s, interval_s=0.05)
        except BaseException:
            running.stop()
            raise
        return running

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=STOP_TIMEOUT_S)


@contextmanager
def served(app: Any, *, probe: str = "/readyz", log_config: dict[str, Any] | None = None) -> Iterator[str]:
    """Serve `app` until the block ends; yields its base URL once `probe` answers 200.
    log_config=None: uvicorn's records reach the root logger, where caplog sees them."""
    running = ThreadedServer.start(app, probe=probe, log_config=log_config)
    try:
        yield running.url
    finally:
        running.stop()


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

        _poll_until(ready, f"the service on port {port} was not ready", timeout_s=60, interval_s=0.2)
        yield client
    finally:
        client.close()
        terminate_then_kill(server, grace_s=30)


@dataclass
class LiveService:
    root: Path
    url: str = ""
    port: int = 0  # kept across stop()/start() so an open page can find the service again
    _running: ThreadedServer | None = None
    _seq: dict[str, int] = field(default_factory=dict)

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def start(self) -> LiveService:
        settings = load_settings(
            state_dir=self.root / "state",
            trainer_command=[sys.executable, str(HELD_TRAINER)],
            bootstrap_token=TOKEN,
            bootstrap_team=TEAM,
            local_poll_interval_s=0.1,
            progress_poll_interval_s=0.1,  # the board should move within a second of an event
            sse_poll_interval_s=0.5,
            cancel_grace_s=3.0,
        )
        self._ensure_submitter_token(settings.effective_database_url)
        self.port = self.port or free_port()
        # uvicorn's own log config (not log_config=None): its records go to the console, not to caplog.
        self._running = ThreadedServer.start(create_app(settings), self.port, thread_name="rljob-service", timeout_graceful_shutdown=2)
        self.url = self._running.url
        return self

    @staticmethod
    def _ensure_submitter_token(database_url: str) -> None:
        """The test's token, named after its holder: the board's submitter column shows the job's
        `submitted_by`, which is the submitting token's name. The service's bootstrap then finds it."""
        store = SqlJobStore(database_url)
        try:
            store.migrate()
            TokenService(store).ensure(TOKEN, TEAM, name=SUBMITTER)
        finally:
            store.close()

    def cancel_active(self, timeout_s: float = 20.0) -> None:
        """Cancel every unfinished job and wait for it: the launcher leaves workloads running when
        the service stops (so it can re-attach), and a test must not leave processes behind."""
        with self.api() as client:
            active = [
                j["id"]
                for j in client.get("/v1/jobs", params={"limit": 200}).json()["data"]
                if j["phase"] not in ("SUCCEEDED", "FAILED", "CANCELLED")
            ]
            for job_id in active:
                client.post(f"/v1/jobs/{job_id}/cancel")
        for job_id in active:
            self.wait_for_phase(job_id, "CANCELLED", timeout_s)

    def stop(self) -> None:
        if self._running is not None:
            self._running.stop()

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)

    def submit(self, name: str, *, total_steps: int = 10, **grpo: object) -> dict[str, Any]:
        spec = {
            "name": name,
            "model": {"name": "llama3.1-8b", "source": "meta-llama/Llama-3.1-8B-Instruct"},
            "grpo": {"num_batches": total_steps, **grpo},
            "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
            "output": str(self.runs_dir),
        }
        with self.api() as client:
            response = client.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        return cast(dict[str, Any], response.json())

    def job(self, job_id: str) -> dict[str, Any]:
        with self.api() as client:
            return cast(dict[str, Any], client.get(f"/v1/jobs/{job_id}").raise_for_status().json())

    def wait_for_phase(self, job_id: str, phase: str, timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["phase"] == phase:
                return job
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} is {job['phase']}, not {phase}, after {timeout_s}s")

    def emit(self, job_id: str, type: str, **fields: object) -> None:
        """Append one trainer event to the job's events.jsonl, exactly as the trainer writes it."""
        seq = self._seq.get(job_id, 0)
        self._seq[job_id] = seq + 1
        raw = {"type": type, "seq": seq, "time": datetime.now(UTC).isoformat(), "job_id": job_id, **fields}
        event = parse_event(json.dumps(raw))  # validated against the trainer contract
        path = Path(RunLayout(str(self.runs_dir), job_id).events)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(dump_event(event) + "\n")

    def write_samples(self, job_id: str, step: int, samples: list[dict[str, Any]], *, groups: int = 2, with_signal: int = 1) -> None:
        """Write a step's samples file into the run directory, as the trainer does (trainer/contract/run/samples.py)."""
        body = StepSamples(
            step=step,
            time=datetime.now(UTC),
            num_generations=2,
            groups=groups,
            groups_with_signal=with_signal,
            completions=2 * groups,
            samples=[Sample(**s) for s in samples],
        )
        path = Path(RunLayout(str(self.runs_dir), job_id).samples_file(step))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body.model_dump_json())

    def finish_process(self, job_id: str, exit_code: int) -> None:
        """Let the held trainer process exit with `exit_code` (see held_trainer.py)."""
        path = Path(RunLayout(str(self.runs_dir), job_id).root) / "exit_code"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(exit_code))
