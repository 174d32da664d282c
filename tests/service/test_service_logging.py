"""The service's own log lines reach the operator: `rljob serve` and the image's entrypoint write
JSON lines to stderr (not a terminal there), start-up recovery and re-attaches included, and never
a token. Formatting and masking are checked directly too."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest

from harness.live_server import serving_process
from service.free_port import free_port
from service.logging_config import REDACTED, ReadSampler, configure_logging
from tests.service.conftest import FAKE_TRAINER
from tests.service.service_helpers import spec_body, wait_until

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "rlj_logging-test-token-" + "0123456789abcdef" * 2


def _env(state_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    env.update(
        RLJOB_STATE_DIR=str(state_dir),
        RLJOB_BOOTSTRAP_TOKEN=TOKEN,
        RLJOB_BOOTSTRAP_TEAM="team-a",
        RLJOB_TRAINER_COMMAND=json.dumps([sys.executable, str(FAKE_TRAINER)]),
        RLJOB_LOCAL_POLL_INTERVAL_S="0.05",
        RLJOB_PROGRESS_POLL_INTERVAL_S="0.05",
        PYTHONPATH=str(ROOT),
    )
    return env


def _server(argv: list[str], env: dict[str, str], port: int, stderr_path: Path) -> AbstractContextManager[httpx.Client]:
    return serving_process(argv, env, port, stderr_path, TOKEN)


def _json_lines(path: Path) -> list[dict[str, object]]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is one JSON object, uvicorn's included


def _phase(client: httpx.Client, job_id: str) -> str:
    return client.get(f"/v1/jobs/{job_id}").json()["phase"]


def test_rljob_serve_logs_recovery_and_reattach_as_json_lines(tmp_path: Path) -> None:
    port, stderr_path = free_port(), tmp_path / "serve.stderr"
    argv = [
        sys.executable,
        "-m",
        "service.cli.main",
        "serve",
        "--port",
        str(port),
        "--state-dir",
        str(tmp_path / "state"),
    ]
    env = _env(tmp_path / "state")
    with _server(argv, env, port, stderr_path) as client:
        body = spec_body(tmp_path, labels={"fake-gate": "true", "fake-steps": "2"})
        submitted = client.post("/v1/jobs", json=body)
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["step"] == 1, timeout_s=30)
    # The service is down; its trainer is not. The next one re-attaches to it at start-up.
    with _server(argv, env, port, stderr_path) as client:
        (tmp_path / "runs" / job_id / "gate").touch()
        wait_until(lambda: _phase(client, job_id) == "SUCCEEDED", timeout_s=30)
    records = _json_lines(stderr_path)
    infos = [(r["logger"], r["message"]) for r in records if r["level"] == "INFO"]
    assert [m for lg, m in infos if lg == "service.supervisor"].count("recovery finished; accepting submissions") == 2
    assert any(lg == "service.adapters.local.launcher" and m.startswith(f"re-attached {job_id} to pid") for lg, m in infos)
    assert any(r["logger"] == "uvicorn.access" and r["path"] == f"/v1/jobs/{job_id}" for r in records)
    assert all(set(r) >= {"time", "level", "logger", "message"} for r in records)
    assert TOKEN not in stderr_path.read_text()


def test_the_images_factory_configures_logging_too(tmp_path: Path) -> None:
    port, stderr_path = free_port(), tmp_path / "uvicorn.stderr"
    uvicorn = str(Path(sys.executable).with_name("uvicorn"))
    argv = [uvicorn, "service.app:create_app_from_env", "--factory", "--host", "127.0.0.1", "--port", str(port)]
    with _server(argv, _env(tmp_path / "state"), port, stderr_path) as client:
        assert client.get("/v1/jobs").status_code == 200
    records = _json_lines(stderr_path)
    assert ("service.supervisor", "recovery finished; accepting submissions") in [(r["logger"], r["message"]) for r in records]
    assert any(r["logger"].startswith("uvicorn") and "startup complete" in str(r["message"]) for r in records)
    assert TOKEN not in stderr_path.read_text()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root, service, access = logging.getLogger(), logging.getLogger("service"), logging.getLogger("uvicorn.access")
    saved = (list(root.handlers), root.level, service.level, list(access.filters), access.level, access.disabled)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    service.setLevel(saved[2])
    access.filters[:] = saved[3]
    access.setLevel(saved[4])
    access.disabled = saved[5]


@pytest.mark.usefixtures("restore_logging")
def test_json_off_a_terminal_human_lines_on_one_and_tokens_masked() -> None:
    pipe, terminal = io.StringIO(), _Terminal()
    configure_logging(stream=pipe, secrets=["s3cret-bootstrap-value"])
    log = logging.getLogger("service.test")
    try:
        raise RuntimeError("auth Bearer abc.def failed for rlj_AbC-123_x")
    except RuntimeError:
        log.exception("token %s and s3cret-bootstrap-value seen", "rlj_AbC-123_x")
    logging.getLogger("some.library").info("library chatter below WARNING is not shown")
    (entry,) = [json.loads(line) for line in pipe.getvalue().splitlines()]
    assert entry["level"] == "ERROR" and entry["logger"] == "service.test"
    assert entry["message"] == f"token {REDACTED} and {REDACTED} seen"
    assert f"Bearer {REDACTED}" in entry["exception"] and "rlj_AbC" not in entry["exception"]

    configure_logging(stream=terminal)  # a second call replaces the first handler
    log.info("recovery finished")
    assert pipe.getvalue().count("\n") == 1
    (line,) = terminal.getvalue().splitlines()
    assert line.endswith("INFO    service.test: recovery finished") and not line.startswith("{")


@pytest.mark.usefixtures("restore_logging")
def test_the_access_log_keeps_every_write_and_refusal_and_a_bounded_count_of_reads() -> None:
    """At most N successful reads a second are written; the next one written says how many were left out, so a
    dashboard's polling neither floods the log nor goes uncounted."""
    pipe = io.StringIO()
    configure_logging(stream=pipe, access_log_reads_per_s=2)
    access = logging.getLogger("uvicorn.access")
    # As `rljob serve` has it: another test of this process may have run uvicorn with its own logging config.
    access.disabled = False
    access.setLevel(logging.INFO)
    (sampler,) = [f for f in access.filters if isinstance(f, ReadSampler)]
    now = [100.2]
    sampler.clock = lambda: now[0]

    def request(method: str, path: str, status: int) -> None:
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", method, path, "1.1", status)

    for _ in range(5):
        request("GET", "/v1/jobs/rl-aaaaaaaaaaaa", 200)
    request("POST", "/v1/jobs", 201)
    request("GET", "/v1/jobs/rl-bbbbbbbbbbbb", 404)
    request("HEAD", "/v1/jobs", 200)
    now[0] = 101.05  # the next second
    request("GET", "/v1/jobs", 200)
    lines = [json.loads(line) for line in pipe.getvalue().splitlines()]
    assert [(e["method"], e["status"], e.get("reads_not_logged")) for e in lines] == [
        ("GET", 200, None),
        ("GET", 200, None),
        ("POST", 201, None),
        ("GET", 404, None),
        ("GET", 200, 4),  # the three GETs and the HEAD of the first second
    ]
    configure_logging(stream=pipe, access_log_reads_per_s=0)  # every read, and one sampler, not two
    assert len([f for f in access.filters if isinstance(f, ReadSampler)]) == 1
    before = len(pipe.getvalue().splitlines())
    for _ in range(30):
        request("GET", "/v1/jobs", 200)
    assert len(pipe.getvalue().splitlines()) == before + 30
