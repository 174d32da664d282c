"""Reward workers in a container of their own: the pod's reward container serves them to the trainer's pool.

    python -m trainer.rewards_sandbox.host --socket /var/run/rljob-rewards/host.sock

With RLJOB_K8S_REWARD_CONTAINER, a trainer or eval pod whose job runs user reward code gets a native sidecar that
runs this (service/adapters/k8s/reward_container.py): no secret in its environment, no mount of the run directory
or the job's storage, a user of its own, no capabilities. It shares one emptyDir with the trainer, holding this
server's unix socket and the reward files the trainer copies there. The trainer's pool (pool.py, with
RLJOB_REWARD_HOST naming the socket) connects once per worker; the server starts a worker (worker.py, exactly as the
pool starts one locally: empty environment, its own directory, rlimits, the worker's own confinement) whose stdin and
stdout are that connection, and ends it (the worker's whole session) when the trainer closes the connection: a call
past its deadline, a worker retired, the trainer gone. What a worker prints goes to this container's log, at most
64 KiB a worker (output.py). So whatever a reward does, it does in this container: under gVisor, where a worker cannot
confine its own writes, it still cannot reach the trainer's files.

The pod has one network namespace: the worker's seccomp filter, not the container, is what keeps a reward off the
network. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from .link import WorkerLink
from .output import OutputRelay
from .reward_files import copy_reward_files
from .spawn import start_worker_process

HOST_ENV = "RLJOB_REWARD_HOST"  # the socket's path, in the trainer's container (the pod template sets it)
CONNECT_RETRY_S = 0.2


def serve(socket_path: str) -> None:
    """Accept the trainer's connections until killed (the kubelet ends this sidecar after the trainer's container)."""
    path = Path(socket_path)
    path.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    os.chmod(path, 0o666)  # the trainer's container runs as another user
    server.listen(16)
    print(f"rljob reward host: serving reward workers on {path}", file=sys.stderr, flush=True)
    while True:
        connection, _ = server.accept()
        threading.Thread(target=_worker_for, args=(connection,), name="rljob-reward-host-worker", daemon=True).start()


def _worker_for(connection: socket.socket) -> None:
    """One worker on `connection`; killed (its session) when the trainer closes it."""
    workdir = tempfile.mkdtemp(prefix="rljob-reward-")
    lifeline_read, lifeline_write = os.pipe()
    output_read, output_write = os.pipe()
    try:
        process = start_worker_process(
            sys.executable, workdir, lifeline_read, stdin=connection.fileno(), stdout=connection.fileno(), stderr=output_write
        )
    except OSError as e:
        print(f"rljob reward host: cannot start a worker: {e}", file=sys.stderr, flush=True)
        connection.close()
        for fd in (lifeline_read, lifeline_write, output_read, output_write):
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
        return
    os.close(lifeline_read)
    os.close(output_write)
    output = OutputRelay(output_read)  # never told of calls: one allowance for the worker's life
    try:
        _wait_for_hangup(connection, process)
    finally:
        os.close(lifeline_write)  # the keeper kills the server when it closes
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
        output.join(timeout_s=2)
        connection.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_for_hangup(connection: socket.socket, process: subprocess.Popen[bytes]) -> None:
    """Until the trainer closes its end (POLLRDHUP: the data itself is the worker's to read) or the worker ends."""
    poller = select.poll()
    poller.register(connection.fileno(), select.POLLRDHUP)
    while process.poll() is None:
        if poller.poll(1000):
            return


class RemoteRewardWorker(WorkerLink):
    """A worker in the reward container, reached through the host's socket. Killing it is closing the connection."""

    def __init__(self, socket_path: str, clock: Callable[[], float], connect_timeout_s: float):
        self.connection = _connect(socket_path, connect_timeout_s)
        super().__init__(self.connection.fileno(), self.connection.fileno(), clock)

    def _death(self) -> str:
        return "the reward container closed its connection"

    def kill(self) -> None:
        self.connection.close()


def _connect(socket_path: str, timeout_s: float) -> socket.socket:
    """The host's socket, waiting for the sidecar to bind it (it starts beside the trainer); OSError past the wait."""
    deadline = time.monotonic() + timeout_s
    while True:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(socket_path)
            return connection
        except OSError as e:
            connection.close()
            if time.monotonic() >= deadline:
                raise OSError(
                    e.errno, f"the reward container's socket {socket_path} ({HOST_ENV}) did not answer in {timeout_s:g} s: {e.strerror}"
                ) from e
            time.sleep(CONNECT_RETRY_S)


def share_reward_file(path: str, socket_path: str) -> str:
    """A copy of the reward's files (the file and the Python it may import: reward_files.py) beside the host's socket
    (the emptyDir both containers mount at the same path), for the reward container's workers: it has no mount of the
    trainer's files."""
    files = Path(socket_path).parent / "files"
    files.mkdir(mode=0o755, exist_ok=True)
    return copy_reward_files(path, files / uuid.uuid4().hex)  # 0644 and 0755: the reward container's user reads them


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.rewards_sandbox.host", description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", required=True, help="the unix socket to serve on (in the emptyDir shared with the trainer)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the kubelet's stop: the workers' lifelines close with us
    serve(args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
