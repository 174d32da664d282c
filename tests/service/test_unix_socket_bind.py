"""The Unix socket `rljob serve --uds` listens on (service/unix_socket.py) and what the CLI says when it cannot reach one
(service/cli/service_address.py), in this process; test_unix_socket_serve.py runs the real service on one.

Access to the service's socket is decided by the file's permissions, so the mode is the promise tested here: 0600
whatever the umask. Root passes every permission check, so as root (CI) the denied client is a child process that
becomes `nobody`; as another user, the owner is denied by a socket chmodded 000.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli.client import ClientConfig, CliError, CliExit, RljobClient
from service.cli.main import app as cli
from service.unix_socket import MAX_PATH_BYTES, SOCKET_MODE, UnixSocketRefused, bind_unix_socket

NOBODY = 65534
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: pytest's tmp_path can pass the 108 bytes a socket path may have."""
    with tempfile.TemporaryDirectory(prefix="rljob-uds-") as d:
        yield Path(d)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _cli(*args: str, home: Path) -> tuple[int, str]:
    """Exit code and output (lines joined: rich wraps them at the terminal's width)."""
    result = CliRunner().invoke(cli, list(args), env={"HOME": str(home), "RLJOB_CONFIG": "", "RLJOB_URL": "", "RLJOB_TOKEN": ""})
    return result.exit_code, " ".join(result.output.split())


def test_the_socket_is_0600_and_ours_whatever_the_umask(short_dir: Path) -> None:
    previous = os.umask(0)  # the most permissive: a socket bound without care would be 0777
    try:
        bound = bind_unix_socket(short_dir / "new" / "rljob.sock")
    finally:
        os.umask(previous)
    try:
        found = os.lstat(bound.path)
        assert stat.S_ISSOCK(found.st_mode) and _mode(bound.path) == SOCKET_MODE == 0o600
        assert found.st_uid == os.geteuid()
        assert _mode(short_dir / "new") == 0o700  # the missing directory, made private
    finally:
        bound.close()
    assert not bound.path.exists()


def test_a_path_that_is_not_a_socket_is_refused_and_left_untouched(short_dir: Path) -> None:
    kept = short_dir / "notes.txt"
    kept.write_text("keep me")
    with pytest.raises(UnixSocketRefused, match="exists and is not a socket; it was left untouched"):
        bind_unix_socket(kept)
    assert kept.read_text() == "keep me"
    # Through `rljob serve`: a message, exit 2, the file as it was, and no client file naming a socket that is not there.
    state = short_dir / "state"
    code, output = _cli("serve", "--uds", str(kept), "--state-dir", str(state), home=short_dir)
    assert code == CliExit.BAD_INPUT and "exists and is not a socket" in output and "Traceback" not in output, output
    assert kept.read_text() == "keep me" and not (state / "client.yaml").exists()


def test_a_stale_socket_is_replaced_and_a_live_one_refused(short_dir: Path) -> None:
    path = short_dir / "rljob.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: a service that was killed
    bound = bind_unix_socket(path)
    try:
        with pytest.raises(UnixSocketRefused, match="another rljob serve holds"):
            bind_unix_socket(path)  # a second service on the path: its lock is held, nothing is touched
        probe = socket.socket(socket.AF_UNIX)
        probe.connect(str(path))  # the running one still has its socket
        probe.close()
    finally:
        bound.close()
    other = socket.socket(socket.AF_UNIX)  # something listening that holds no lock (not an rljob serve)
    other.bind(str(path))
    other.listen(1)
    try:
        with pytest.raises(UnixSocketRefused, match="a service already listens on"):
            bind_unix_socket(path)
        assert path.exists()
    finally:
        other.close()


def test_the_lock_is_let_go_with_the_socket(short_dir: Path) -> None:
    path = short_dir / "rljob.sock"
    bind_unix_socket(path).close()
    bind_unix_socket(path).close()  # the first one's lock did not outlive it


def test_close_removes_only_the_file_it_bound(short_dir: Path) -> None:
    path = short_dir / "rljob.sock"
    bound = bind_unix_socket(path)
    os.unlink(path)
    path.write_text("someone else's")  # the path was taken over while the service ran
    bound.close()
    assert path.read_text() == "someone else's"


def test_a_path_too_long_for_a_socket_is_refused(short_dir: Path) -> None:
    path = short_dir / ("d" * 60) / ("s" * 60)
    with pytest.raises(UnixSocketRefused, match=f"at most {MAX_PATH_BYTES}"):
        bind_unix_socket(path)


def test_uds_with_host_or_port_is_refused(short_dir: Path) -> None:
    # With an invalid setting too: were the two not refused first, serve would stop at it rather than start serving.
    invalid = ["--max-concurrent-jobs", "0", "--state-dir", str(short_dir)]
    for extra in (["--port", "8799"], ["--host", "0.0.0.0"]):
        code, output = _cli("serve", "--uds", str(short_dir / "s.sock"), *extra, *invalid, home=short_dir)
        assert code == CliExit.BAD_INPUT and "cannot be given with it" in output, output
        assert not (short_dir / "s.sock").exists()


def test_the_cli_says_why_a_socket_cannot_be_reached(short_dir: Path) -> None:
    missing = short_dir / "missing.sock"
    code, output = _cli("--url", f"unix:{missing}", "--token", "t" * 40, "list", home=short_dir)
    assert code == CliExit.UNREACHABLE and "Traceback" not in output
    assert f"no such socket (is `rljob serve --uds {missing}` running?)" in output

    stale = short_dir / "stale.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(stale))
    sock.close()
    code, output = _cli("--url", f"unix:{stale}", "--token", "t" * 40, "list", home=short_dir)
    assert code == CliExit.UNREACHABLE and "nothing listens on the socket" in output, output

    regular = short_dir / "file"
    regular.write_text("")
    code, output = _cli("--url", f"unix:{regular}", "--token", "t" * 40, "list", home=short_dir)
    assert code == CliExit.UNREACHABLE and "is not a socket" in output, output

    code, output = _cli("--url", "unix:", "--token", "t" * 40, "list", home=short_dir)
    assert code == CliExit.BAD_INPUT and "names no socket" in output, output


# Run as root, the child imports and warms up the client first (every module its request path loads), then becomes
# `nobody` and makes the request that counts.
AS_NOBODY = f"""
import os, sys
from service.cli.client import ClientConfig, CliError, RljobClient
def request(timeout_s):
    try:
        RljobClient(ClientConfig(url=sys.argv[1], token="t" * 40, config_file=None), timeout_s=timeout_s).request("GET", "/v1/jobs")
        return "answered"
    except CliError as e:
        return e.message
request(0.2)  # root gets in; nobody accepts, so this ends in a timeout
os.setgid({NOBODY})
os.setuid({NOBODY})
print(request(1.0))
"""


def _request_as_another_user(path: Path) -> str:
    """What the CLI's client says to a request over the socket at `path` made as `nobody`."""
    done = subprocess.run(
        [sys.executable, "-c", AS_NOBODY, f"unix:{path}"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


def test_a_client_without_access_to_the_socket_is_told_so(short_dir: Path) -> None:
    path = short_dir / "rljob.sock"
    bound = bind_unix_socket(path)  # listening, never accepting: a client that gets in waits for its answer
    try:
        if os.geteuid() == 0:
            os.chmod(short_dir, 0o711)  # nobody may pass the directory: only the socket's own mode stands in its way
            denied = _request_as_another_user(path)
            os.chmod(path, 0o666)
            # Once the mode lets it in, the same child still sends nothing: the socket is another user's.
            admitted = _request_as_another_user(path)
            assert "belongs to uid 0, not to you" in admitted, admitted
        else:
            os.chmod(path, 0o000)
            client = RljobClient(ClientConfig(url=f"unix:{path}", token="t" * 40, config_file=None), timeout_s=1.0)
            with pytest.raises(CliError) as raised:
                client.request("GET", "/v1/jobs")
            denied = raised.value.message
        assert denied.startswith(f"permission denied on {path}"), denied
        assert "decided by its file permissions" in denied and "0600" in denied
    finally:
        bound.close()
