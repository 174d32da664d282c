"""The control plane's read path against the framework's ceiling, side by side in one run.

Two servers, each started the way the image starts the service (`uvicorn ... --factory --workers 1`),
one at a time on this machine:
- minimal: a FastAPI app with a bearer check that answers from a dict the same JSON rljob answered
  (the jobs are read from rljob first, so the shape and size are identical);
- rljob: the real service (SQLite, or PostgreSQL with --db postgres) with 1,000 finished jobs stored,
  two labels each, and a bootstrap token.
Each gets open-loop fixed request rates (bench/open_loop.py) on GET /v1/jobs/{id} (cycling over all
jobs) and GET /v1/jobs?limit=50. Both run without uvicorn's access log unless --access-log (the image
logs every request, as JSON in rljob's case: that is the logging's cost, not the read path's).
Reported per rate: answered, timeouts, errors, p50/p90/p99/max latency from the scheduled send, and
the server process's CPU ms per answered request (psutil, over the rate's window and its drain, idle
work included); then rljob's ratios to the minimal app.

    python bench/control_plane.py [--quick] [--db sqlite,postgres] [--duration-s 10] [--access-log] [--json PATH]

--quick (1.5 s per rate, 2 s timeout, SQLite) takes about a minute. Numbers depend on the
machine and what else runs on it; compare ratios taken in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psutil
from open_loop import OpenLoopClient, RateResult

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TOKEN = "rlj_bench_" + "x" * 40
JOBS = 1000
GET_RATES = (100, 250, 500)
LIST_RATES = (25, 50, 100)


def create_minimal_app() -> Any:
    """The baseline: the framework, a bearer check and stored JSON, nothing else."""
    from fastapi import Depends, FastAPI, HTTPException, Query
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

    jobs: list[dict[str, Any]] = json.loads(Path(os.environ["BENCH_JOBS_FILE"]).read_text())
    by_id = {job["id"]: job for job in jobs}
    token = os.environ["BENCH_TOKEN"]
    bearer = HTTPBearer(auto_error=False)
    app = FastAPI()

    async def caller(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str:  # noqa: B008
        if credentials is None or credentials.credentials != token:
            raise HTTPException(401, "unknown token")
        return "bench"

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/jobs/{job_id}")
    async def get_job(job_id: str, _: str = Depends(caller)) -> dict[str, Any]:
        if job_id not in by_id:
            raise HTTPException(404, "no such job")
        return by_id[job_id]

    @app.get("/v1/jobs")
    async def list_jobs(limit: int = Query(50, ge=1, le=200), _: str = Depends(caller)) -> dict[str, Any]:
        page = jobs[:limit]
        return {"data": page, "count": len(page), "next_cursor": "djE6OTUx" if len(jobs) > limit else None}

    return app


def seed_store(database_url: str) -> None:
    """1,000 finished jobs with two labels each, written straight to the store before the service starts."""
    sys.path.insert(0, str(REPO))
    from service.adapters.store import SqlJobStore
    from service.domain.models import JobRecord
    from service.domain.phases import JobPhase
    from trainer.contract import JobSpec

    store = SqlJobStore(database_url)
    store.migrate()
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    with store.transaction() as tx:
        for i in range(JOBS):
            spec = JobSpec.model_validate({
                "name": f"bench-{i}", "team": "bench", "model": {"name": "llama3.1-8b", "source": "/models/tiny"},
                "hardware": {"accelerator": "cpu", "rollout_engine": "jax"}, "output": "/tmp/rljob-bench-runs",
                "labels": {"experiment": f"exp-{i % 7}", "owner": "bench"},
            })  # fmt: skip
            created = t0 + timedelta(minutes=i)
            tx.insert(JobRecord(
                id=f"rl-bench{i:07d}"[:15], team="bench", name=spec.name, labels=dict(spec.labels),
                spec=spec.model_dump(mode="json"), spec_hash=spec.content_hash(), phase=JobPhase.SUCCEEDED,
                created_at=created, updated_at=created + timedelta(minutes=30), started_at=created,
                finished_at=created + timedelta(minutes=30), stage="export", step=20, total_steps=20,
                latest_metrics={"loss": 0.12, "reward": 0.8, "kl": 0.01}, message="finished", exit_code=0,
                phase_entered_at=created + timedelta(minutes=30), submitted_by="bench",
            ))  # fmt: skip
    store.close()


def _uvicorn(app: str, port: int, env: dict[str, str], log: Path, app_dir: Path | None = None) -> subprocess.Popen[bytes]:
    argv = [str(BIN / "uvicorn"), app, "--factory", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--timeout-graceful-shutdown", "5", "--no-server-header"]  # fmt: skip
    if env.get("BENCH_ACCESS_LOG") != "1":
        argv.append("--no-access-log")
    if app_dir is not None:
        argv += ["--app-dir", str(app_dir)]
    with log.open("wb") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)


@contextmanager
def running(app: str, env: dict[str, str], work: Path, name: str, app_dir: Path | None = None) -> Iterator[int]:
    sys.path.insert(0, str(REPO))
    from service.free_port import free_port
    from service.process_stop import terminate_then_kill

    port = free_port()
    log = work / f"{name}.log"
    server = _uvicorn(app, port, env, log, app_dir)
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


def settle(pid: int) -> None:
    """Wait until the server is idle again (under a quarter of a core over 0.3 s): work queued by a
    saturating rate must not be billed to the next one."""
    server = psutil.Process(pid)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        before = server.cpu_times()
        time.sleep(0.3)
        after = server.cpu_times()
        if (after.user - before.user) + (after.system - before.system) < 0.075:
            return


def measure(pid: int, port: int, job_ids: list[str], args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    server = psutil.Process(pid)
    endpoints = {
        "GET /v1/jobs/{id}": ([f"/v1/jobs/{job_id}" for job_id in job_ids], GET_RATES),
        "GET /v1/jobs?limit=50": (["/v1/jobs?limit=50"], LIST_RATES),
    }
    rows: dict[str, list[dict[str, Any]]] = {}
    for endpoint, (paths, rates) in endpoints.items():
        client = OpenLoopClient("127.0.0.1", port, TOKEN)
        asyncio.run(client.run(paths, 20, 1.0, args.timeout_s))  # warm-up, not reported
        client.close()
        rows[endpoint] = []
        for rate in rates:
            settle(pid)
            client = OpenLoopClient("127.0.0.1", port, TOKEN)
            before = server.cpu_times()
            result = asyncio.run(client.run(paths, rate, args.duration_s, args.timeout_s))
            after = server.cpu_times()
            client.close()
            cpu_s = (after.user - before.user) + (after.system - before.system)
            rows[endpoint].append(_row(result, cpu_s))
    return rows


def idle_cpu_percent(pid: int, seconds: float) -> float:
    server = psutil.Process(pid)
    before = server.cpu_times()
    time.sleep(seconds)
    after = server.cpu_times()
    return 100 * ((after.user - before.user) + (after.system - before.system)) / seconds


def _row(result: RateResult, cpu_s: float) -> dict[str, Any]:
    def ms(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    return {
        "offered_rps": result.offered_rps, "sent": result.sent, "ok": result.ok, "timeouts": result.timeouts,
        "errors": result.errors, "p50_ms": ms(result.percentile(0.5)), "p90_ms": ms(result.percentile(0.9)),
        "p99_ms": ms(result.percentile(0.99)), "max_ms": ms(result.max_ms),
        "cpu_ms_per_request": round(1000 * cpu_s / result.ok, 2) if result.ok else None,
    }  # fmt: skip


def fetch_jobs(port: int) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    cursor = None
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        while True:
            params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
            page = client.get("/v1/jobs", params=params).raise_for_status().json()
            jobs += page["data"]
            cursor = page["next_cursor"]
            if cursor is None:
                return jobs


def database_urls(kinds: list[str], work: Path, stack: ExitStack) -> dict[str, str]:
    urls = {}
    for kind in kinds:
        if kind == "sqlite":
            urls[kind] = f"sqlite:///{work / 'rljob.db'}"
        elif kind == "postgres":
            sys.path.insert(0, str(REPO))
            from tests.pg_server import postgres_url

            urls[kind] = stack.enter_context(postgres_url())
        else:
            raise SystemExit(f"--db: unknown database {kind!r} (sqlite, postgres)")
    return urls


def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"duration_s": args.duration_s, "timeout_s": args.timeout_s, "jobs": JOBS, "servers": {}}
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    base_env["BENCH_ACCESS_LOG"] = "1" if args.access_log else "0"
    with tempfile.TemporaryDirectory(prefix="rljob-bench-cp-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        jobs: list[dict[str, Any]] = []
        for kind, url in database_urls(args.db, work, stack).items():
            seed_store(url)
            env = {**base_env, "PYTHONPATH": str(REPO), "RLJOB_ENVIRONMENT": "dev", "RLJOB_LAUNCHER": "local",
                   "RLJOB_STATE_DIR": str(work / f"state-{kind}"), "RLJOB_DATABASE_URL": url,
                   "RLJOB_BOOTSTRAP_TOKEN": TOKEN, "RLJOB_BOOTSTRAP_TEAM": "bench", "RLJOB_TRAINER_COMMAND": '["true"]'}  # fmt: skip
            with running("service.app:create_app_from_env", env, work, f"rljob-{kind}") as pid:
                port = _port_of(pid)
                jobs = jobs or fetch_jobs(port)
                idle = idle_cpu_percent(pid, args.idle_s)
                report["servers"][f"rljob-{kind}"] = {"idle_cpu_percent": round(idle, 1),
                                                      **measure(pid, port, [j["id"] for j in jobs], args)}  # fmt: skip
        (work / "jobs.json").write_text(json.dumps(jobs))
        env = {**base_env, "BENCH_JOBS_FILE": str(work / "jobs.json"), "BENCH_TOKEN": TOKEN}
        with running("control_plane:create_minimal_app", env, work, "minimal", app_dir=Path(__file__).parent) as pid:
            port = _port_of(pid)
            idle = idle_cpu_percent(pid, args.idle_s)
            report["servers"]["minimal"] = {"idle_cpu_percent": round(idle, 1), **measure(pid, port, [j["id"] for j in jobs], args)}
    return report


def _port_of(pid: int) -> int:
    listening = [c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN]
    return listening[0]


def print_report(report: dict[str, Any]) -> None:
    servers = report["servers"]
    baseline = servers["minimal"]
    print(f"{JOBS} jobs stored; {report['duration_s']} s per rate, timeout {report['timeout_s']} s; open loop")
    for name, server in servers.items():
        print(f"\n{name} (idle CPU {server['idle_cpu_percent']}% of a core)")
        print("| endpoint | offered req/s | ok/sent | timeouts | errors | p50 ms | p90 ms | p99 ms | max ms | CPU ms/req "
              "| CPU x minimal | p99 x minimal |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for endpoint in ("GET /v1/jobs/{id}", "GET /v1/jobs?limit=50"):
            for row, base in zip(server[endpoint], baseline[endpoint], strict=True):
                print(f"| {endpoint} | {row['offered_rps']} | {row['ok']}/{row['sent']} | {row['timeouts']} | "
                      f"{row['errors']} | {row['p50_ms']} | {row['p90_ms']} | {row['p99_ms']} | {row['max_ms']} | "
                      f"{row['cpu_ms_per_request']} | {_ratio(row['cpu_ms_per_request'], base['cpu_ms_per_request'])} | "
                      f"{_ratio(row['p99_ms'], base['p99_ms'])} |")  # fmt: skip


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1.5 s per rate, 2 s timeout: about a minute")
    parser.add_argument("--db", default="sqlite", help="comma-separated: sqlite,postgres")
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--timeout-s", type=float, default=10.0)
    parser.add_argument("--access-log", action="store_true", help="log every request in both servers (the image does)")
    parser.add_argument("--idle-s", type=float, default=3.0, help="how long idle CPU is measured")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    args.db = args.db.split(",")
    if args.quick:
        args.duration_s, args.timeout_s, args.idle_s = 1.5, 2.0, 1.0
    report = run(args)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
