"""The control plane's read path against the framework's ceiling, side by side in one run.

Servers, one at a time on this machine, each started the way its users start it:
- minimal: a FastAPI app with a bearer check that answers from a dict the same JSON rljob answered
  (the jobs are read from rljob first, so the shape and size are identical), under
  `uvicorn --factory --workers 1 --no-access-log`: the framework's ceiling;
- rljob serve: the CLI (`rljob serve --host --port`, settings in RLJOB_* variables), its logging and
  uvicorn's access log as it configures them;
- image: the service image's ENTRYPOINT, read from docker/service.Dockerfile (uvicorn on
  `service.app:create_app_from_env`, access log on), only the address changed;
each rljob server on SQLite (or PostgreSQL with --db postgres) with 1,000 finished jobs stored, two labels
each, and a bootstrap token. With --before REF the two rljob servers run a second time from that commit's
`service` and `trainer` (git archive; same interpreter and packages): before and after in one run.
Each gets open-loop fixed request rates (bench/control_plane/open_loop.py), sustained for --duration-s each, on
GET /v1/jobs/{id} (cycling over all jobs) and GET /v1/jobs?limit=50. Reported per rate: answered (200),
shed (503: not served), timeouts, other errors, p50/p90/p99/max latency of the answered ones from the
scheduled send, and the server process's CPU ms per answered request (psutil, over the rate's window and
its drain, idle work included). The result file also records the machine's cores, load average, the
commit and the command line; bench/control_plane/README.md's table is rendered from it (bench/readme_sections.py).

    python bench/control_plane/control_plane.py [--quick] [--before REF] [--servers 'rljob serve;image']
        [--db sqlite,postgres] [--json PATH]

--quick (1.5 s per rate, 2 s timeout, SQLite) takes about a minute per server. Numbers depend on the
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

REPO = Path(__file__).resolve().parents[2]
# Behind PYTHONPATH, not ahead of it: `--seed` runs under the PYTHONPATH of the code being measured (a `--before`
# commit's service and trainer), which must not be shadowed by this checkout's; `bench` is found here either way.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

from bench.control_plane.app_server import until_healthy  # noqa: E402
from bench.control_plane.open_loop import OpenLoopClient, RateResult  # noqa: E402
from bench.result_meta import machine_facts  # noqa: E402

BIN = Path(sys.executable).parent
TOKEN = "rlj_bench_" + "x" * 40
JOBS = 1000
GET_RATES = (100, 250, 400, 500)
LIST_RATES = (25, 50, 100)
GET, FIRST_READ = "GET /v1/jobs/{id}", "GET /v1/jobs/{id}, first read of each job"
FIRST_READ_RPS = 100
DOCKERFILE = REPO / "docker" / "service.Dockerfile"
RESULT_FILE = REPO / "bench" / "results" / "control_plane.json"


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
    from service.adapters.store import SqlJobStore
    from service.domain.records.models import JobRecord
    from service.domain.records.phases import JobPhase
    from service.domain.records.run_report import RunReport
    from trainer.contract import JobSpec, Stage

    store = SqlJobStore(database_url)
    store.migrate()
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    with store.transaction() as tx:
        for i in range(JOBS):
            spec = JobSpec.model_validate(
                {
                    "name": f"bench-{i}",
                    "team": "bench",
                    "model": {"name": "llama3.1-8b", "source": "/models/tiny"},
                    "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
                    "output": "/tmp/rljob-bench-runs",
                    "labels": {"experiment": f"exp-{i % 7}", "owner": "bench"},
                }
            )
            created = t0 + timedelta(minutes=i)
            tx.insert(
                JobRecord(
                    id=f"rl-bench{i:07d}"[:15],
                    team="bench",
                    name=spec.name,
                    labels=dict(spec.labels),
                    spec=spec,
                    spec_hash=spec.content_hash(),
                    phase=JobPhase.SUCCEEDED,
                    created_at=created,
                    updated_at=created + timedelta(minutes=30),
                    started_at=created,
                    finished_at=created + timedelta(minutes=30),
                    report=RunReport(stage=Stage.EXPORT, step=20, total_steps=20, latest_metrics={"loss": 0.12, "reward": 0.8, "kl": 0.01}),
                    message="finished",
                    exit_code=0,
                    phase_entered_at=created + timedelta(minutes=30),
                    submitted_by="bench",
                )
            )
    store.close()


def image_entrypoint(port: int) -> list[str]:
    """The service image's ENTRYPOINT as the Dockerfile writes it, on this machine's venv, on loopback."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith("ENTRYPOINT"))
    argv: list[str] = json.loads(line.removeprefix("ENTRYPOINT"))
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    return [str(BIN / argv[0]), *argv[1:]]


def server_argv(kind: str, port: int) -> list[str]:
    if kind == "minimal":
        return [
            str(BIN / "uvicorn"),
            "bench.control_plane.control_plane:create_minimal_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--no-access-log",
            "--no-server-header",
            "--app-dir",
            str(REPO),
        ]
    if kind == "rljob serve":
        return [str(BIN / "rljob"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    if kind == "image, no access log":  # what the access log costs, apart from the read path
        return [*image_entrypoint(port), "--no-access-log"]
    return image_entrypoint(port)


@contextmanager
def running(kind: str, env: dict[str, str], work: Path, name: str) -> Iterator[tuple[int, int]]:
    """(pid, port) of the server, once /healthz answers."""
    from service.free_port import free_port

    port = free_port()
    log = work / f"{name.replace(' ', '-').replace('/', '-')}.log"
    with until_healthy(server_argv(kind, port), env, work, log, name, port) as pid:
        yield pid, port


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
        GET: ([f"/v1/jobs/{job_id}" for job_id in job_ids], GET_RATES),
        "GET /v1/jobs?limit=50": (["/v1/jobs?limit=50"], LIST_RATES),
    }
    rows: dict[str, list[dict[str, Any]]] = {}
    # Each job read once, before anything else: what a job's first read costs (rljob reads it from the store
    # and renders it; later reads of an ended job are served from memory), apart from the rates below.
    settle(pid)
    client = OpenLoopClient("127.0.0.1", port, TOKEN)
    before = server.cpu_times()
    result = asyncio.run(client.run(endpoints[GET][0], FIRST_READ_RPS, len(job_ids) / FIRST_READ_RPS, args.timeout_s))
    after = server.cpu_times()
    client.close()
    rows[FIRST_READ] = [_row(result, (after.user - before.user) + (after.system - before.system))]
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
        "offered_rps": result.offered_rps,
        "sent": result.sent,
        "ok": result.ok,
        "shed": result.shed,
        "timeouts": result.timeouts,
        "errors": result.errors,
        "p50_ms": ms(result.percentile(0.5)),
        "p90_ms": ms(result.percentile(0.9)),
        "p99_ms": ms(result.percentile(0.99)),
        "max_ms": ms(result.max_ms),
        "cpu_ms_per_request": round(1000 * cpu_s / result.ok, 2) if result.ok else None,
    }


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
            from harness.pg_server import postgres_url

            urls[kind] = stack.enter_context(postgres_url())
        else:
            raise SystemExit(f"--db: unknown database {kind!r} (sqlite, postgres)")
    return urls


def source_tree(ref: str, work: Path) -> Path:
    """The commit's `service` and `trainer` packages, for PYTHONPATH (ahead of the editable install)."""
    tree = work / f"src-{ref}"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", ref, "service", "trainer"], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def run(args: argparse.Namespace) -> dict[str, Any]:
    facts = machine_facts()
    report: dict[str, Any] = {"duration_s": args.duration_s, "timeout_s": args.timeout_s, "jobs": JOBS, "before": args.before}
    report["servers"] = {}
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_") and k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory(prefix="rljob-bench-cp-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        sources = {"": REPO} | ({f" (before {args.before})": source_tree(args.before, work)} if args.before else {})
        jobs: list[dict[str, Any]] = []
        seeded: set[str] = set()
        for kind, url in database_urls(args.db, work, stack).items():
            for suffix, source in sources.items():
                for server in args.servers:
                    if server == "minimal" or (suffix and server not in ("rljob serve", "image")):
                        continue  # the minimal app runs once, below; before the change, as users start it only
                    name = f"{server}{suffix}" + ("" if kind == "sqlite" else f" ({kind})")
                    if kind == "sqlite":  # each server its own database, seeded alike
                        url = f"sqlite:///{work / (name.replace(' ', '-').replace('/', '-') + '.db')}"
                    if url not in seeded:  # reads change nothing: one PostgreSQL seed serves every server
                        # by the server's own code: the store is migrated as far as that code knows
                        subprocess.run([sys.executable, __file__, "--seed", url], env={**base_env, "PYTHONPATH": str(source)}, check=True)
                        seeded.add(url)
                    env = serve_env(base_env, source, work / f"state-{name}", url)
                    with running(server, env, work, name) as (pid, port):
                        jobs = jobs or fetch_jobs(port)
                        idle = idle_cpu_percent(pid, args.idle_s)
                        report["servers"][name] = {"idle_cpu_percent": round(idle, 1), **measure(pid, port, [j["id"] for j in jobs], args)}
                        print(f"measured {name}", file=sys.stderr, flush=True)
                    if args.json:  # what is measured so far survives a later server's failure
                        args.json.write_text(json.dumps(report, indent=2) + "\n")
        (work / "jobs.json").write_text(json.dumps(jobs))
        env = {**base_env, "BENCH_JOBS_FILE": str(work / "jobs.json"), "BENCH_TOKEN": TOKEN}
        with running("minimal", env, work, "minimal") as (pid, port):
            idle = idle_cpu_percent(pid, args.idle_s)
            report["servers"]["minimal"] = {"idle_cpu_percent": round(idle, 1), **measure(pid, port, [j["id"] for j in jobs], args)}
    report["machine"] = {**facts, "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}
    return report


def print_report(report: dict[str, Any]) -> None:
    servers = report["servers"]
    baseline = servers["minimal"]
    print(
        f"{JOBS} jobs stored; {report['duration_s']} s per rate, timeout {report['timeout_s']} s; open loop; "
        f"{report['machine']['cpu_count']} cores, load {report['machine']['load_average']} -> "
        f"{report['machine']['load_average_at_end']}"
    )
    for name, server in servers.items():
        print(f"\n{name} (idle CPU {server['idle_cpu_percent']}% of a core)")
        print(
            "| endpoint | offered req/s | ok/sent | shed (503) | timeouts | errors | p50 ms | p90 ms | p99 ms | max ms "
            "| CPU ms/req | CPU x minimal |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for endpoint in (FIRST_READ, GET, "GET /v1/jobs?limit=50"):
            for row, base in zip(server[endpoint], baseline[endpoint], strict=True):
                print(
                    f"| {endpoint} | {row['offered_rps']} | {row['ok']}/{row['sent']} | {row['shed']} | {row['timeouts']} | "
                    f"{row['errors']} | {row['p50_ms']} | {row['p90_ms']} | {row['p99_ms']} | {row['max_ms']} | "
                    f"{row['cpu_ms_per_request']} | {_ratio(row['cpu_ms_per_request'], base['cpu_ms_per_request'])} |"
                )


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.1f}x"


def serve_env(base_env: dict[str, str], source: Path, state_dir: Path, url: str) -> dict[str, str]:
    """The environment `rljob serve` runs the benches under: the code at `source`, the embedded default, a bench token."""
    return {
        **base_env,
        "PYTHONPATH": str(source),
        "RLJOB_ENVIRONMENT": "dev",
        "RLJOB_LAUNCHER": "local",
        "RLJOB_STATE_DIR": str(state_dir),
        "RLJOB_DATABASE_URL": url,
        "RLJOB_BOOTSTRAP_TOKEN": TOKEN,
        "RLJOB_BOOTSTRAP_TEAM": "bench",
        "RLJOB_TRAINER_COMMAND": '["true"]',
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1.5 s per rate, 2 s timeout")
    parser.add_argument("--db", default="sqlite", help="comma-separated: sqlite,postgres")
    parser.add_argument(
        "--servers",
        default="rljob serve;image;image, no access log;minimal",
        help="semicolon-separated: rljob serve;image;image, no access log;minimal",
    )
    parser.add_argument("--before", help="also run the rljob servers from this commit (before/after in one run)")
    parser.add_argument("--duration-s", type=float, default=10.0, help="how long each rate is sustained")
    parser.add_argument("--timeout-s", type=float, default=10.0)
    parser.add_argument("--idle-s", type=float, default=3.0, help="how long idle CPU is measured")
    parser.add_argument("--seed", metavar="DATABASE_URL", help=argparse.SUPPRESS)  # run() seeds with each server's code
    parser.add_argument("--json", type=Path, help=f"also write the report here (the README's: {RESULT_FILE.relative_to(REPO)})")
    args = parser.parse_args()
    if args.seed:
        seed_store(args.seed)
        return
    args.db = args.db.split(",")
    args.servers = args.servers.split(";")
    if args.quick:
        args.duration_s, args.timeout_s, args.idle_s = 1.5, 2.0, 1.0
    report = run(args)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
