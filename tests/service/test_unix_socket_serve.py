"""`rljob serve --uds PATH`, a process of its own, with the CLI reaching it over the socket: submit, follow (SSE), list,
status, logs (a stream), the client file, RLJOB_URL, and the connection caps, with no TCP socket in the service at all
(issue 64: a TPU VM may have no TCP, not even loopback).

"No TCP socket" is read from the kernel: each socket the service's process holds (/proc/PID/fd, `socket:[INODE]`) is
looked up in this network namespace's /proc/net/tcp, tcp6 and unix. The service makes itself non-dumpable, so only
root may read its descriptors; CI runs as root, and elsewhere those two tests skip saying so.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from service.cli.client import CliExit
from service.cli.main import app as cli
from service.free_port import free_port
from service.process_stop import terminate_then_kill
from tests.service.service_helpers import spec_body, wait_until
from tests.service.test_service_logging import TOKEN, _env

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]
UNAUTHENTICATED_CAP = 4  # RLJOB_MAX_UNAUTHENTICATED_CONNECTIONS for the served process


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    socket: Path
    state: Path
    stderr: Path


def _start(argv: list[str], env: dict[str, str], stderr: Path, ready: httpx.Client) -> subprocess.Popen[bytes]:
    with stderr.open("ab") as err:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)

    def up() -> bool:
        assert process.poll() is None, stderr.read_text()[-3000:]
        try:
            return ready.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    wait_until(up, timeout_s=60, interval_s=0.2)
    return process


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with tempfile.TemporaryDirectory(prefix="rljob-uds-") as short:  # a socket path has at most 108 bytes
        path, state, stderr = Path(short) / "run" / "rljob.sock", tmp_path / "state", tmp_path / "serve.stderr"
        env = _env(state) | {"RLJOB_MAX_UNAUTHENTICATED_CONNECTIONS": str(UNAUTHENTICATED_CAP)}
        argv = [sys.executable, "-m", "service.cli.main", "serve", "--uds", str(path), "--state-dir", str(state)]
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), base_url="http://rljob", timeout=5) as ready:
            process = _start(argv, env, stderr, ready)
        try:
            yield Served(process, path, state, stderr)
        finally:
            terminate_then_kill(process, grace_s=30)


def _sockets(pid: int) -> set[int]:
    """The inodes of the sockets process `pid` holds."""
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        links = [os.readlink(fd) for fd in fd_dir.iterdir()]
    except PermissionError:
        pytest.skip("not root: cannot read /proc/PID/fd of the service, which makes itself non-dumpable")
    return {int(link[len("socket:[") : -1]) for link in links if link.startswith("socket:[")}


def _table(name: str, inode_column: int) -> dict[int, list[str]]:
    """/proc/net/NAME (this network namespace's sockets) by inode."""
    rows = [line.split() for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]]
    return {int(row[inode_column]): row for row in rows if len(row) > inode_column}


def _tcp_sockets(pid: int) -> set[int]:
    held = _sockets(pid)
    assert held, "the service holds no socket at all: this check could see nothing"
    return held & (_table("tcp", 9).keys() | _table("tcp6", 9).keys())


def _cli(*args: str, url: str | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
    """`rljob ARGS` in this process; the URL and token from `--url`/`--token`, or from `env`."""
    flags = ["--url", url, "--token", TOKEN] if url else []
    result = CliRunner().invoke(cli, [*flags, *args], env={"RLJOB_CONFIG": "", "RLJOB_URL": "", "RLJOB_TOKEN": "", **(env or {})})
    return result.exit_code, result.output


def _idle(path: Path, count: int) -> list[socket.socket]:
    conns = []
    for _ in range(count):
        conn = socket.socket(socket.AF_UNIX)
        conn.settimeout(5)
        conn.connect(str(path))
        conns.append(conn)
    return conns


def test_serve_on_a_unix_socket_opens_no_tcp_socket(served: Served, tmp_path: Path) -> None:
    found = os.lstat(served.socket)
    assert stat.S_ISSOCK(found.st_mode) and stat.S_IMODE(found.st_mode) == 0o600 and found.st_uid == os.geteuid()
    url = f"unix:{served.socket}"
    assert yaml.safe_load((served.state / "client.yaml").read_text()) == {"url": url, "token": TOKEN}

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_body(tmp_path, labels={"fake-steps": "2"})))
    code, output = _cli("submit", str(spec), "--follow", url=url)  # the follow reads the job's event stream (SSE)
    assert code == 0 and "SUCCEEDED" in output and "2/2" in output, output
    job_id = output.split("submitted ")[1].split()[0]
    code, output = _cli("list", env={"RLJOB_URL": url, "RLJOB_TOKEN": TOKEN})
    assert code == 0 and job_id in output, output
    code, output = _cli("status", job_id, "-o", "json", env={"RLJOB_CONFIG": str(served.state / "client.yaml")})
    assert code == 0 and json.loads(output)["phase"] == "SUCCEEDED", output
    code, output = _cli("logs", job_id, "-f", url=url)  # a streamed response, ending with the job's process
    assert code == 0 and "event run_finished" in output, output
    code, output = _cli("cancel", job_id, url=url)
    assert code == CliExit.FAILED and "already SUCCEEDED" in output, output

    # The connection caps work on peers without an address: one over the unauthenticated cap closes the oldest idle one.
    conns = _idle(served.socket, UNAUTHENTICATED_CAP + 1)
    try:
        assert conns[0].recv(100) == b""
        conns[-1].settimeout(0.5)
        with pytest.raises(TimeoutError):
            conns[-1].recv(100)
        # Requests made, connections open: its Unix socket is among the sockets it holds, and none is TCP.
        unix = _table("unix", 6)
        assert str(served.socket) in {row[7] for row in unix.values() if len(row) > 7}
        assert _sockets(served.process.pid) & unix.keys()
        assert _tcp_sockets(served.process.pid) == set()
    finally:
        for conn in conns:
            conn.close()
    code, output = _cli("list", url=url)
    assert code == 0 and job_id in output, output

    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(timeout=30) == 128 + signal.SIGTERM
    assert not served.socket.exists()  # removed on the way out: a client finds no socket rather than a dead one
    records = [json.loads(line) for line in served.stderr.read_text().splitlines() if line.startswith("{")]
    assert not [r for r in records if r["level"] in ("ERROR", "CRITICAL")], served.stderr.read_text()[-3000:]
    # uvicorn's access log: a peer on a Unix socket has no address.
    assert any(r["logger"] == "uvicorn.access" and r["client"] == "" and r["path"] == "/v1/jobs?limit=20" for r in records)


def test_the_tcp_check_sees_a_service_on_a_port(tmp_path: Path) -> None:
    """The check above is not blind: the same service on a port holds a TCP socket it finds."""
    port, state = free_port(), tmp_path / "state"
    argv = [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port), "--state-dir", str(state)]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as ready:
        process = _start(argv, _env(state), tmp_path / "serve.stderr", ready)
    try:
        assert _tcp_sockets(process.pid)
    finally:
        terminate_then_kill(process, grace_s=30)
