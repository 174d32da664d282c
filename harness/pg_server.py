"""A throwaway PostgreSQL server on loopback, shared by the service and deploy tests' fixtures."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from service.free_port import free_port

PG_BIN_DIRS = ["/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"]


def _pg_tool(name: str) -> str | None:
    for d in PG_BIN_DIRS:
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return shutil.which(name)


@contextmanager
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server URL: RLJOB_TEST_POSTGRES_URL, or a throwaway cluster on loopback (skips if neither)."""
    if os.environ.get("RLJOB_TEST_POSTGRES_URL"):
        yield os.environ["RLJOB_TEST_POSTGRES_URL"]
        return
    initdb, pg_ctl = _pg_tool("initdb"), _pg_tool("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL not available: set RLJOB_TEST_POSTGRES_URL or install postgresql (initdb, pg_ctl)")
    # Not under pytest's basetemp: concurrent pytest sessions prune old numbered dirs there.
    base = Path(tempfile.mkdtemp(prefix="rljob-test-pg-"))
    data = base / "data"
    port = free_port()
    # initdb refuses to run as root: run the cluster as the postgres user then.
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start a throwaway PostgreSQL")
        prefix = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres")
        os.chmod(base, 0o755)
    subprocess.run([*prefix, initdb, "-A", "trust", "-U", "postgres", "--no-sync", "-D", str(data)], check=True, capture_output=True)
    subprocess.run(
        [
            *prefix,
            pg_ctl,
            "-D",
            str(data),
            "-l",
            str(data / "server.log"),
            "-w",
            "-o",
            f"-c listen_addresses=127.0.0.1 -p {port} -k {data} -c fsync=off",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
