"""The main-job demo: the embedded default end to end, through the REST API.

1. build the tiny model, tokenizer and data offline (`python -m trainer make-tiny`);
2. start `rljob serve` (SQLite, local launcher, local artifacts) as a subprocess on a Unix socket in a
   private temporary directory, with a fresh token: no port to find (and lose to another process in
   between), and it runs where there is no TCP at all (a TPU VM may have none, not even loopback);
3. submit examples/tiny-cpu.yaml over REST, follow it to SUCCEEDED, print where the artifacts are;
4. stop the service (also on failure or Ctrl-C).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from service.domain.tokens import generate_token
from service.process_stop import terminate_then_kill
from trainer.contract.spec.file import SpecFileError, read_spec_data

from .client import ClientConfig, CliError, CliExit, RljobClient
from .follow import follow_job
from .output import print_job
from .service_address import unix_url

READY_TIMEOUT_S = 60.0


def _wait_ready(client: RljobClient, server: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise CliError(f"the service exited with {server.returncode}; its log:\n{log_path.read_text()[-3000:]}")
        try:
            client.request("GET", "/readyz")
            return
        except CliError:
            time.sleep(0.2)
    raise CliError(f"the service was not ready within {READY_TIMEOUT_S:.0f}s; see {log_path}")


def run_demo(spec_path: Path, work_dir: Path, console: Console) -> int:
    work_dir = work_dir.expanduser().resolve()
    tiny_dir, runs_dir, state_dir = work_dir / "tiny", work_dir / "runs", work_dir / "service"
    for d in (tiny_dir, runs_dir, state_dir):
        d.mkdir(parents=True, exist_ok=True)

    console.rule("1. building the tiny model and data (offline)")
    made = subprocess.run([sys.executable, "-m", "trainer", "make-tiny", "--out", str(tiny_dir)], check=False)
    if made.returncode != 0:
        raise CliError(f"`python -m trainer make-tiny` failed with exit code {made.returncode}")
    os.environ.setdefault("RLJOB_TINY_DIR", str(tiny_dir))
    os.environ.setdefault("RLJOB_OUTPUT", str(runs_dir))
    try:
        body = read_spec_data(spec_path)
    except SpecFileError as e:
        raise CliError(f"cannot use {spec_path}: {e}", CliExit.BAD_INPUT) from e

    console.rule("2. starting the control service (SQLite, local launcher, local storage)")
    token = generate_token()
    env = {**os.environ, "RLJOB_BOOTSTRAP_TOKEN": token, "RLJOB_ENVIRONMENT": "dev", "RLJOB_LAUNCHER": "local"}
    for name in ("RLJOB_DATABASE_URL", "RLJOB_HOST", "RLJOB_PORT", "RLJOB_UDS"):
        env.pop(name, None)  # the demo's own SQLite and socket, never someone's production database or address
    socket_dir = Path(tempfile.mkdtemp(prefix="rljob-demo-"))  # 0700, and short: a socket path has at most 108 bytes
    url = unix_url(socket_dir / "rljob.sock")
    log_path = state_dir / "service.log"
    with log_path.open("ab") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "service.cli.main", "serve", "--uds", str(socket_dir / "rljob.sock"), "--state-dir", str(state_dir)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    client = RljobClient(ClientConfig(url=url, token=token, config_file=None))
    try:
        _wait_ready(client, server, log_path)
        console.print(f"service ready on {url} (log: {log_path})")
        console.rule("3. submitting the tiny CPU job over REST")
        job = client.submit(body, f"demo-{token[-12:]}")
        console.print(f"submitted {job.id}; following it")
        final = follow_job(client, job.id, console)
        print_job(final)
        if final.phase != "SUCCEEDED":
            console.print(f"[red]the job ended {final.phase}[/]; trainer output: rljob logs {job.id}")
            for line in client.log_tail(job.id, 40).splitlines():
                console.print(line, highlight=False, markup=False)
            return 1
        console.rule("4. artifacts")
        for artifact in final.artifacts:
            console.print(f"{artifact.name}: {artifact.uri}")
        console.print(f"run directory: {final.run_uri}")
        return 0
    finally:
        client.close()
        terminate_then_kill(server, grace_s=15)
        shutil.rmtree(socket_dir, ignore_errors=True)
