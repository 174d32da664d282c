"""Every network call of the CLI and of `rljob doctor` ends (issue 33): against an endpoint that accepts the
connection and never answers, each ends within its timeout with a message, not a hang or a traceback.

Before: a log read without follow and the event streams had no read timeout (a silent service held the
CLI for good), and doctor's storage probe listed the bucket with the client's default of 60 s per try
and two minutes of retries."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from service.cli import client as cli_client
from service.cli.client import ClientConfig, CliError, RljobClient
from service.cli.main import app as rljob_cli

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def silent() -> Iterator[str]:
    """A TCP endpoint that accepts, reads whatever is sent, and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.parametrize("argv", [["status", "rl-aaaaaaaaaaaa"], ["logs", "rl-aaaaaaaaaaaa"], ["list"]])
def test_a_silent_service_is_a_message_within_the_timeout(silent: str, argv: list[str]) -> None:
    started = time.monotonic()
    result = CliRunner().invoke(rljob_cli, ["--url", silent, "--token", "rlj_x", "--timeout", "0.5", *argv])
    took = time.monotonic() - started
    assert result.exit_code != 0 and result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "did not answer in time" in result.output and "--timeout 0.5 s" in result.output, result.output
    assert took < 0.5 * cli_client.LOG_READ_FACTOR + 3, took  # a log read waits three times the timeout


def test_a_silent_event_stream_reconnects_then_gives_up(silent: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_client, "SSE_MIN_READ_S", 0.5)  # in use it stays above the 15 s keepalive
    sleeps: list[float] = []
    client = RljobClient(ClientConfig(url=silent, token="rlj_x", config_file=None), timeout_s=0.25, sleep=sleeps.append)
    started = time.monotonic()
    with pytest.raises(CliError, match="did not answer in time"):
        list(client.sse("/v1/events", retries=2))
    assert sleeps == [2.0, 4.0] and time.monotonic() - started < 5  # two reconnects, each read bounded


def test_doctors_storage_probe_ends_at_its_deadline(silent: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.gcs_emulator import GCE_METADATA_ROOT
    from service.adapters.k8s_cluster import doctor
    from trainer.storage.gcs import reset_gcs_store

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", silent)
    monkeypatch.setenv("GCE_METADATA_ROOT", GCE_METADATA_ROOT)
    monkeypatch.setattr(doctor, "PROBE_REQUEST_TIMEOUT_S", 0.5)
    monkeypatch.setattr(doctor, "PROBE_DEADLINE_S", 1.5)
    # The process keeps one storage client; one an earlier test built would talk to its own emulator.
    reset_gcs_store()
    started = time.monotonic()
    try:
        with pytest.raises(Exception, match="[Tt]ime"):  # the storage client's timeout or its retry deadline
            doctor.gcs_probe("gs://rljob-runs/ml/")
    finally:
        reset_gcs_store()
    assert time.monotonic() - started < 6  # the client's defaults: 60 s a try, 120 s of retries
