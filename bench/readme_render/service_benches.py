"""README passages of the service's benches: schemathesis, the kill loop, SSE fan-out, replicas, idle CPU."""

from __future__ import annotations

from typing import Any

from bench.readme_render.common import count, duration, load_span, ratio, where, where_shared

# Issue 15's targets, as the README states them (targets, not measurements).
SSE_P99_TARGET_MS = {1: 100, 1000: 250}
IDLE_NO_JOBS_TARGET_PERCENT = 2.0


def _finding(finding: dict[str, Any]) -> str:
    example = finding.get("example") or {}
    request = example.get("request", "").split(" ", 1)[-1].split("/", 3)[-1]
    shown = f"`/{request}`" if request else "a request"
    return (
        f"{finding['check']} on {finding['operation']}: {shown} answered {finding['status']} "
        f"({finding['title'].lower()}, {finding['count']}x)"
    )


def render_schemathesis(result: dict[str, Any]) -> str:
    refused = result["schema_valid_refused"]
    findings = result["conformance_findings"]
    found = f" ({'; '.join(_finding(f) for f in findings)})" if findings else ""
    by_operation = ", ".join(f"{op} {n:,}" for op, n in sorted(refused["by_operation"].items(), key=lambda item: -item[1]))
    return (
        f"Last run (`bench/results/schemathesis.json`, {where(result.get('machine'))}; {count(result['requests'])} "
        f"requests in {duration(result['duration_s'])}, {result['rounds']} rounds, seed {result['seed']}): "
        f"{result['operations_exercised']} of {result['operations_declared']} operations exercised, "
        f"{result['server_errors_5xx']} 5xx, {len(findings)} schema-conformance finding{'s' if len(findings) != 1 else ''}"
        f"{found}, {len(result['service_log_errors'])} ERROR lines in the service log: "
        f"{'passed' if result['passed'] else '**failed**'}. {count(refused['count'])} schema-valid requests were "
        f"refused by rules JSON Schema cannot state ({by_operation}; cross-field spec rules, relative paths the "
        "location pattern admits, a TPU accelerator on a machine without one); the file lists them by field and reason."
    )


_BACKENDS = {"local-sqlite": "local+SQLite", "local-postgres": "local+PostgreSQL", "k8s-kmock": "Kubernetes on kmock"}


def _kill_loop_backend(entry: dict[str, Any]) -> str:
    unacknowledged = len(entry["created_without_acknowledgement"])
    extra = f" (+{unacknowledged} created without an acknowledgement)" if unacknowledged else ""
    return (
        f"{_BACKENDS.get(entry['backend'], entry['backend'])}: {entry['submitted_acknowledged']} jobs acknowledged{extra}, "
        f"{entry.get('kills_before_ready', 0)} of {entry['iterations']} lives killed during start-up, {entry['lost_count']} "
        f"lost, {entry['duplicated_submissions']} duplicated, {len(entry['phase_regressions_seen_by_poller'])} "
        f"regressions, {len(entry['wrong_final_phase'])} wrong final phases ("
        + ", ".join(filter(None, [duration(entry["wall_s"]), load_span(entry.get("machine"))]))
        + ")"
    )


def render_kill_loop(result: dict[str, Any]) -> str:
    entries = [result[name] for name in _BACKENDS if name in result]
    seeds = sorted({entry["seed"] for entry in entries})
    machines = where_shared([entry.get("machine") for entry in entries])
    return (
        f"Last run (`bench/results/kill_loop.json`, seed {', '.join(map(str, seeds))}; {machines}): "
        + "; ".join(_kill_loop_backend(entry) for entry in entries)
        + "."
    )


def render_sse_fanout(result: dict[str, Any]) -> str:
    settings, results = result["settings"], result["results"]
    points = []
    for n in settings["subscribers"]:
        before, now = results[f"before-{n}"], results[f"now-{n}"]
        subscribers = f"{count(n)} subscriber{'s' if n != 1 else ''}"
        delivered = (
            f"{now['delivered']:.0%} delivered"
            if before["delivered"] == now["delivered"]
            else f"delivered {before['delivered']:.0%} -> {now['delivered']:.0%}"
        )
        points.append(
            f"{subscribers}: lag p99 {before['lag_p99_ms']:,.0f} -> {now['lag_p99_ms']:,.0f} ms "
            f"({ratio(before['lag_p99_ms'], now['lag_p99_ms'])}), {delivered}"
        )
    targets = []
    for n, target in SSE_P99_TARGET_MS.items():
        if f"now-{n}" in results:
            met = "met" if results[f"now-{n}"]["lag_p99_ms"] <= target else "not met"
            targets.append(f"{count(n)} subscriber{'s' if n != 1 else ''} p99 <= {target} ms: {met}")
    return (
        f"Last run (`bench/results/sse_fanout.json`, {settings['seconds']:g} s per point, {settings['rate']:g} events/s, "
        f"{settings['client']} client; {where(result.get('machine'))}), before (per-stream polling) -> now (fan-out): "
        + "; ".join(points)
        + ". Issue 15's targets: "
        + ", ".join(targets)
        + "."
    )


def _ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def _replica_rate(one: dict[str, Any], two: dict[str, Any]) -> str:
    def side(row: dict[str, Any]) -> str:
        lost = [
            f"{row[key]} {label}"
            for key, label in (("shed", "shed with 503"), ("timeouts", "timed out"), ("errors", "other errors"))
            if row.get(key)
        ]
        return (
            f"{count(row['ok'])} of {count(row['sent'])} answered"
            + (f" ({', '.join(lost)})" if lost else "")
            + (f", p99 {_ms(row['p99_ms'])}" if row["p99_ms"] is not None else "")
        )

    return f"at {count(int(one['offered_rps']))} req/s one replica {side(one)}, two {side(two)}"


def render_replicas(result: dict[str, Any]) -> str:
    failover = result["failover"]
    rates = "; ".join(_replica_rate(one, two) for one, two in zip(result["one_replica"], result["two_replicas"], strict=True))
    return (
        f"Last run (`bench/results/replicas.json`, {result['duration_s']:g} s per rate; {where(result.get('machine'))}), "
        f"status reads split over the replicas: {rates}. SIGKILL of the leader: the other replica held the lock "
        f"{failover['took_lock_s']} s later and was ready as leader after {failover['ready_as_leader_s']} s (leader "
        f"check interval {result.get('leader_check_interval_s', 2.0):g} s)."
    )


def render_idle_cpu(earlier: dict[str, Any], result: dict[str, Any]) -> str:
    before, after = earlier["before"], earlier["after"]
    rows = result["idle_cpu_percent"]
    lines = [
        f"CPU of the server process over {result['idle_s']:g} s, % of one core. Before ({before['commit']}) and after "
        f"({after['commit']}) the progress path work: `bench/results/idle_cpu-4d5c520.json`, "
        f"{where(earlier.get('machine') if isinstance(earlier.get('machine'), dict) else None)}; now: "
        f"`bench/results/idle_cpu.json`, {where(result.get('machine'))}.",
        "",
        f"| server | before ({before['commit']}) | after ({after['commit']}) | now |",
        "|---|---|---|---|",
    ]
    for name, now in rows.items():
        lines.append(f"| {name} | {before['idle_cpu_percent'].get(name, '-')} | {after['idle_cpu_percent'].get(name, '-')} | {now} |")
    no_jobs = rows["rljob, 0 jobs"]
    met = "met" if no_jobs <= IDLE_NO_JOBS_TARGET_PERCENT else "not met"
    lines += ["", f"Target (issue 15): <= {IDLE_NO_JOBS_TARGET_PERCENT:g}% idle with no jobs: {met} ({no_jobs}% now)."]
    return "\n".join(lines)
