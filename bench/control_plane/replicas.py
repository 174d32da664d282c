"""One replica against two on one PostgreSQL, side by side in one run; then how long a failover takes.

Status reads (GET /v1/jobs/{id}, cycling over 1,000 stored jobs) at open-loop fixed rates
(bench/control_plane/open_loop.py), split evenly over the replicas as a Service would spread them. Reported per rate:
answered, timeouts, errors, p50/p99/max latency from the scheduled send, CPU ms per answered request
summed over the replica processes; then the two-replica figures as ratios to the one-replica ones. The
load generator shares the machine: on 2 cores two replicas compete with it and with PostgreSQL, so
read the ratios as this machine's, not as the scaling a cluster gets.

Failover: SIGKILL the leader, then measure until the other replica answers /readyz with role leader
and ready (it has taken the lock and re-attached the jobs), with status reads going to it meanwhile.

    python bench/control_plane/replicas.py [--quick] [--duration-s 10] [--json PATH]

writes bench/results/replicas.json with the machine's facts (--no-write: not).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repository's packages, bench among them

from bench.control_plane.app_server import uvicorn_app
from bench.control_plane.control_plane import REPO, TOKEN, _row, seed_store, settle
from bench.control_plane.open_loop import OpenLoopClient, RateResult
from bench.result_meta import machine_facts, write_result

RATES = (250, 500, 1000)


async def _split_load(ports: list[int], paths: list[str], rate: float, args: argparse.Namespace) -> RateResult:
    clients = [OpenLoopClient("127.0.0.1", port, TOKEN) for port in ports]
    try:
        parts = await asyncio.gather(
            *(c.run(paths[i :: len(ports)], rate / len(ports), args.duration_s, args.timeout_s) for i, c in enumerate(clients))
        )
    finally:
        for c in clients:
            c.close()
    merged = RateResult(offered_rps=rate, sent=0)
    for part in parts:  # every count and list of the parts, whatever counts RateResult keeps
        for field in dataclasses.fields(RateResult):
            if field.name != "offered_rps":
                setattr(merged, field.name, getattr(merged, field.name) + getattr(part, field.name))
    return merged


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def measure(servers: list[tuple[int, int]], paths: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    pids, ports = [pid for pid, _ in servers], [port for _, port in servers]
    asyncio.run(_split_load(ports, paths, 20, argparse.Namespace(duration_s=1.0, timeout_s=args.timeout_s)))
    rows = []
    for rate in RATES:
        for pid in pids:
            settle(pid)
        before = _cpu_s(pids)
        result = asyncio.run(_split_load(ports, paths, rate, args))
        rows.append(_row(result, _cpu_s(pids) - before))
    return rows


def _readyz(port: int) -> dict[str, Any] | None:
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
    except httpx.TransportError:
        return None
    return response.json() | {"status": response.status_code}


def failover_s(servers: list[tuple[int, int]]) -> dict[str, float]:
    pids, ports = [pid for pid, _ in servers], [port for _, port in servers]
    leader = next(i for i, port in enumerate(ports) if (_readyz(port) or {}).get("role") == "leader")
    survivor = ports[1 - leader]
    killed = time.monotonic()
    os.kill(pids[leader], signal.SIGKILL)
    took_lead = None
    while time.monotonic() - killed < 60:
        state = _readyz(survivor) or {}
        if took_lead is None and state.get("role") == "leader" or state.get("reason") == "recovering jobs":
            took_lead = took_lead or time.monotonic() - killed
        if state.get("role") == "leader" and state.get("status") == 200:
            return {"took_lock_s": round(took_lead or 0.0, 2), "ready_as_leader_s": round(time.monotonic() - killed, 2)}
        time.sleep(0.02)
    raise SystemExit("the surviving replica did not take the lead within 60 s")


def run(args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from harness.pg_server import postgres_url

    base_env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    report: dict[str, Any] = {"duration_s": args.duration_s, "rates": list(RATES)}
    with tempfile.TemporaryDirectory(prefix="rljob-bench-replicas-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        url = stack.enter_context(postgres_url())
        seed_store(url)
        env = {
            **base_env,
            "PYTHONPATH": str(REPO),
            "RLJOB_ENVIRONMENT": "dev",
            "RLJOB_LAUNCHER": "local",
            "RLJOB_STATE_DIR": str(work / "state"),
            "RLJOB_DATABASE_URL": url,
            "RLJOB_BOOTSTRAP_TOKEN": TOKEN,
            "RLJOB_BOOTSTRAP_TEAM": "bench",
            "RLJOB_TRAINER_COMMAND": '["true"]',
            "BENCH_ACCESS_LOG": "0",
            "RLJOB_LEADER_CHECK_INTERVAL_S": str(args.leader_check_interval_s),
        }
        paths = [f"/v1/jobs/rl-bench{i:07d}" for i in range(1000)]  # the ids seed_store gave
        with uvicorn_app("service.app:create_app_from_env", env, work, "one") as one:
            report["one_replica"] = measure([one], paths, args)
        with (
            uvicorn_app("service.app:create_app_from_env", env, work, "first") as first,
            uvicorn_app("service.app:create_app_from_env", env, work, "second") as second,
        ):
            report["two_replicas"] = measure([first, second], paths, args)
            report["failover"] = failover_s([first, second])
    return report


def print_report(report: dict[str, Any]) -> None:
    print(f"status reads, {report['duration_s']} s per rate, PostgreSQL, load split over the replicas")
    print(f"{'offered':>8} | {'replicas':>8} | {'ok':>6} {'t/o':>5} {'err':>4} | {'p50':>7} {'p99':>8} {'max':>8} ms | cpu ms/req")
    for one, two in zip(report["one_replica"], report["two_replicas"], strict=True):
        for name, row in (("1", one), ("2", two)):
            print(
                f"{row['offered_rps']:>8} | {name:>8} | {row['ok']:>6} {row['timeouts']:>5} {row['errors']:>4} | "
                f"{row['p50_ms']!s:>7} {row['p99_ms']!s:>8} {row['max_ms']!s:>8}    | {row['cpu_ms_per_request']}"
            )
        if one["p99_ms"] and two["p99_ms"]:
            print(f"{'':>8} | 2 vs 1   | p99 {two['p99_ms'] / one['p99_ms']:.2f}x, answered {two['ok'] / max(one['ok'], 1):.2f}x")
    f = report["failover"]
    print(f"failover after SIGKILL of the leader: lock taken after {f['took_lock_s']} s, ready as leader after {f['ready_as_leader_s']} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 s per rate")
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--timeout-s", type=float, default=10.0)
    parser.add_argument("--leader-check-interval-s", type=float, default=2.0, help="the service's default")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/replicas.json")
    args = parser.parse_args()
    if args.quick:
        args.duration_s = 2.0
    machine = machine_facts()
    report = run(args)
    report["leader_check_interval_s"] = args.leader_check_interval_s
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    if not args.no_write:
        write_result("replicas.json", report, machine)


if __name__ == "__main__":
    main()
