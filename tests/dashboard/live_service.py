"""The real control service (service.app.create_app) under uvicorn on 127.0.0.1, with SQLite and
the local launcher in a temp dir, plus the test's side of the progress channel: appending trainer
events to a job's events.jsonl, which the service tails (service/adapters/events_file.py)."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import uvicorn

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import load_settings
from service.domain.tokens import TokenService
from service.free_port import free_port
from trainer.contract import RunLayout, Sample, StepSamples, dump_event, parse_event

HELD_TRAINER = Path(__file__).with_name("held_trainer.py")
TEAM = "alpha"
TOKEN = "rlj_dashboard-test-token-0123456789abcdef"
SUBMITTER = "alice"
START_TIMEOUT_S = 30.0


@dataclass
class LiveService:
    root: Path
    url: str = ""
    port: int = 0  # kept across stop()/start() so an open page can find the service again
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None
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
        config = uvicorn.Config(
            create_app(settings), host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="rljob-service", daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if not self._thread.is_alive():
                raise RuntimeError("the service thread exited during start-up")
            time.sleep(0.1)
        raise TimeoutError(f"the service at {self.url} was not ready within {START_TIMEOUT_S}s")

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
            active = [j["id"] for j in client.get("/v1/jobs", params={"limit": 200}).json()["data"]
                      if j["phase"] not in ("SUCCEEDED", "FAILED", "CANCELLED")]
            for job_id in active:
                client.post(f"/v1/jobs/{job_id}/cancel")
        for job_id in active:
            self.wait_for_phase(job_id, "CANCELLED", timeout_s)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)

    def submit(self, name: str, *, total_steps: int = 10, **grpo: object) -> dict:
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
        return response.json()

    def job(self, job_id: str) -> dict:
        with self.api() as client:
            return client.get(f"/v1/jobs/{job_id}").raise_for_status().json()

    def wait_for_phase(self, job_id: str, phase: str, timeout_s: float = 30.0) -> dict:
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

    def write_samples(
        self, job_id: str, step: int, samples: list[dict], *, groups: int = 2, with_signal: int = 1
    ) -> None:
        """Write a step's samples file into the run directory, as the trainer does (trainer/contract/samples.py)."""
        body = StepSamples(
            step=step, time=datetime.now(UTC), num_generations=2, groups=groups, groups_with_signal=with_signal,
            completions=2 * groups, samples=[Sample(**s) for s in samples],
        )  # fmt: skip
        path = Path(RunLayout(str(self.runs_dir), job_id).samples_file(step))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body.model_dump_json())

    def finish_process(self, job_id: str, exit_code: int) -> None:
        """Let the held trainer process exit with `exit_code` (see held_trainer.py)."""
        path = Path(RunLayout(str(self.runs_dir), job_id).root) / "exit_code"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(exit_code))
