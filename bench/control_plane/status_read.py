"""The status read (GET /v1/jobs/{id}) at saturation and at 400 req/s, beside a minimal FastAPI app in the same run
(issue 54, section 4: served at 0.7x or more of the minimal app's rate at saturation, p99 at 400 req/s within 2x).

Servers, one at a time, each as bench/control_plane/control_plane.py starts it: `rljob serve` on SQLite with 1,000 finished jobs
(two labels each), and the minimal app (the same uvicorn, a bearer check, the very JSON rljob answered, from a dict).
With --before REF, `rljob serve` also runs from that commit's `service` and `trainer`, and the minimal app answers
that commit's JSON as well as this one's, so each rljob is compared with a minimal app serving its own bytes.
Rounds alternate the servers (--rounds, default 3) so a slow moment of the shared cores falls on all of them.

Per server and round, after each job is read once (its first read is not what is measured) and a warm-up:
- saturation: --saturation-rps offered (default 5,000: above what the minimal app serves on 2 cores, so both are
  saturated) for --duration-s; served = answers (200) per second from the first send to the last answer
  (bench/control_plane/open_loop.py's `served_rps`); the rest shed (503), timed out or failed;
- 400 req/s for --duration-s: p50/p99 of the answered ones, from the scheduled send (open loop).
Also the server's CPU ms per answered request over each window (psutil). Ratios are each rljob's median over rounds
against its minimal app's median.

With --running the job read is one RUNNING job with 1,000 train steps of progress, samples and evaluations
(bench/control_plane/running_job.py: the local launcher holds its workload alive; the service folds the trainer's events as it
would a real trainer's), the minimal app serving that job's answer as rljob gave it: the read a dashboard polls,
judged again at every request.

    python bench/control_plane/status_read.py [--before REF] [--rounds N] [--quick]   # writes bench/results/status_read.json
    python bench/control_plane/status_read.py --running [--rounds N]                  # writes bench/results/status_read_running.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.control_plane.control_plane import TOKEN, fetch_jobs, running, serve_env, settle, source_tree  # noqa: E402
from bench.control_plane.open_loop import OpenLoopClient, RateResult  # noqa: E402
from bench.control_plane.running_job import EVAL_EVERY, STEPS, release, running_env, start_running_job  # noqa: E402
from bench.result_meta import machine_facts, write_result  # noqa: E402

CONTROL_PLANE = Path(__file__).with_name("control_plane.py")
P99_RPS = 400
RESULT = "status_read.json"
RUNNING_RESULT = "status_read_running.json"


def _window(pid: int, port: int, paths: list[str], rate: float, duration_s: float, timeout_s: float) -> dict[str, Any]:
    server = psutil.Process(pid)
    settle(pid)
    client = OpenLoopClient("127.0.0.1", port, TOKEN)
    before = server.cpu_times()
    result: RateResult = asyncio.run(client.run(paths, rate, duration_s, timeout_s))
    after = server.cpu_times()
    client.close()
    cpu_s = (after.user - before.user) + (after.system - before.system)

    def ms(q: float) -> float | None:
        value = result.percentile(q)
        return None if value is None else round(value, 2)

    return {
        "offered_rps": rate,
        "sent": result.sent,
        "ok": result.ok,
        "shed": result.shed,
        "timeouts": result.timeouts,
        "errors": result.errors,
        "served_rps": round(result.served_rps, 1),
        "p50_ms": ms(0.5),
        "p99_ms": ms(0.99),
        "cpu_ms_per_request": round(1000 * cpu_s / result.ok, 3) if result.ok else None,
    }


def measure(pid: int, port: int, job_ids: list[str], args: argparse.Namespace) -> dict[str, Any]:
    paths = [f"/v1/jobs/{job_id}" for job_id in job_ids]
    for rate, duration_s in ((200, len(paths) / 200), (400, 1.0)):  # each job's first read, then a warm-up
        client = OpenLoopClient("127.0.0.1", port, TOKEN)  # a client's connections belong to one event loop
        asyncio.run(client.run(paths, rate, duration_s, args.timeout_s))
        client.close()
    return {
        "saturation": _window(pid, port, paths, args.saturation_rps, args.duration_s, args.timeout_s),
        f"at_{P99_RPS}": _window(pid, port, paths, P99_RPS, args.duration_s, args.timeout_s),
    }


def rljob_env(base_env: dict[str, str], source: Path, work: Path, name: str) -> dict[str, str]:
    url = f"sqlite:///{work / (name + '.db')}"
    subprocess.run([sys.executable, str(CONTROL_PLANE), "--seed", url], env={**base_env, "PYTHONPATH": str(source)}, check=True)
    return serve_env(base_env, source, work / f"state-{name}", url)


def _running_servers(base_env: dict[str, str], work: Path) -> tuple[dict[str, dict[str, str]], dict[str, str], str]:
    """The running-job setup: rljob serve with one RUNNING job fed its history, and the minimal app serving its answer."""
    runs = work / "runs"
    url = f"sqlite:///{work / 'rljob-running.db'}"
    env = running_env(serve_env(base_env, REPO, work / "state-running", url), runs)
    with running("rljob serve", env, work, "rljob-running-setup") as (_, port):
        job_id = start_running_job(port, TOKEN, runs)
        jobs = [job for job in fetch_jobs(port) if job["id"] == job_id]
    body = work / "jobs-running.json"
    body.write_text(json.dumps(jobs))
    minimal = {**base_env, "BENCH_JOBS_FILE": str(body), "BENCH_TOKEN": TOKEN}
    return {"rljob serve (running job)": env, "minimal": minimal}, {"rljob serve (running job)": "minimal"}, job_id


def run(args: argparse.Namespace) -> dict[str, Any]:
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_") and k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory(prefix="rljob-bench-status-") as tmp:
        work = Path(tmp)
        if args.running:
            envs, pairs, job_id = _running_servers(base_env, work)
            try:
                rounds = _rounds(envs, work, [job_id], args)
            finally:
                release(work / "runs", job_id)
            return _report(args, [job_id], pairs, rounds) | {"job": {"steps": STEPS, "evaluations": 1 + STEPS // EVAL_EVERY}}
        sources = {"": REPO} | ({args.before: source_tree(args.before, work)} if args.before else {})
        envs, bodies, pairs = {}, {}, {}
        for ref, source in sources.items():
            rljob = "rljob serve" + (f" (before {ref})" if ref else "")
            minimal = "minimal" + (f" (before {ref})" if ref else "")
            envs[rljob] = rljob_env(base_env, source, work, f"rljob-{ref or 'now'}")
            with running("rljob serve", envs[rljob], work, rljob) as (_, port):
                jobs = fetch_jobs(port)
            bodies[minimal] = work / f"jobs-{ref or 'now'}.json"
            bodies[minimal].write_text(json.dumps(jobs))
            envs[minimal] = {**base_env, "BENCH_JOBS_FILE": str(bodies[minimal]), "BENCH_TOKEN": TOKEN}
            pairs[rljob] = minimal
        job_ids = [job["id"] for job in json.loads(next(iter(bodies.values())).read_text())]
        rounds = _rounds(envs, work, job_ids, args)
    return _report(args, job_ids, pairs, rounds)


def _rounds(envs: dict[str, dict[str, str]], work: Path, job_ids: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        measured: dict[str, Any] = {}
        for name, env in envs.items():
            kind = "rljob serve" if name.startswith("rljob") else "minimal"
            with running(kind, env, work, name) as (pid, port):
                measured[name] = measure(pid, port, job_ids, args)
            print(f"round {number + 1}: {name} {json.dumps(measured[name])}", file=sys.stderr, flush=True)
        rounds.append(measured)
    return rounds


def _report(args: argparse.Namespace, job_ids: list[str], pairs: dict[str, str], rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "duration_s": args.duration_s,
        "timeout_s": args.timeout_s,
        "saturation_rps": args.saturation_rps,
        "p99_rps": P99_RPS,
        "jobs": len(job_ids),
        "before": args.before,
        "pairs": pairs,
        "rounds": rounds,
        "ratios": ratios(rounds, pairs),
    }


def ratios(rounds: list[dict[str, Any]], pairs: dict[str, str]) -> dict[str, dict[str, float]]:
    """Per rljob server: its median served rate at saturation over its minimal app's, and the same for p99 at 400."""

    def median(name: str, window: str, field: str) -> float:
        return statistics.median(r[name][window][field] or float("nan") for r in rounds)

    return {
        rljob: {
            "served_x": round(median(rljob, "saturation", "served_rps") / median(minimal, "saturation", "served_rps"), 3),
            "p99_x": round(median(rljob, f"at_{P99_RPS}", "p99_ms") / median(minimal, f"at_{P99_RPS}", "p99_ms"), 3),
        }
        for rljob, minimal in pairs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="also run rljob serve from this commit, with a minimal app serving its JSON")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--saturation-rps", type=float, default=5000.0, help="above what the minimal app serves here")
    parser.add_argument("--duration-s", type=float, default=6.0, help="how long each rate is offered")
    parser.add_argument("--timeout-s", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="1 round, 2 s per rate")
    parser.add_argument("--running", action="store_true", help="read one RUNNING job with 1,000 steps (bench/control_plane/running_job.py)")
    parser.add_argument("--json", type=Path, help=f"write here instead of bench/results/{RESULT}")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.duration_s = 1, 2.0
    if args.running and args.before:
        parser.error("--running measures this checkout only: leave out --before")
    facts = machine_facts()
    report = run(args)
    for name, x in report["ratios"].items():
        print(f"{name}: served {x['served_x']:.2f}x the minimal app's at saturation, p99 at {P99_RPS} req/s {x['p99_x']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({**report, "machine": facts}, indent=2) + "\n")
    else:
        write_result(RUNNING_RESULT if args.running else RESULT, report, facts)


if __name__ == "__main__":
    main()
