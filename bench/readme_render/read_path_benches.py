"""README passages of the control plane's read path (bench/control_plane/control_plane.py) and the trainer's overhead on
MaxText (bench/pipeline/trainer_overhead.py): tables, ratios, verdicts and gaps computed from their result files."""

from __future__ import annotations

import statistics
from typing import Any

from bench.readme_render.common import load_span, where, where_shared

GET, LIST = "GET /v1/jobs/{id}", "GET /v1/jobs?limit=50"
FIRST_READ = "GET /v1/jobs/{id}, first read of each job"
# Issue 21's targets for one replica on SQLite (targets, not measurements).
STATUS_CPU_X, LIST_CPU_X, SERVED_RPS, P99_MS = 2.0, 3.0, 500, 10.0


def _x(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else value / base


def _served(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    labels = (("shed", "shed"), ("timeouts", "timed out"), ("errors", "errors" if row.get("errors") != 1 else "error"))
    lost = [f"{row[k]:,} {label}" for k, label in labels if row.get(k)]
    p99 = "-" if row["p99_ms"] is None else f"{row['p99_ms']:,} ms"
    return f"{row['ok']:,}/{row['sent']:,}" + (f" ({', '.join(lost)})" if lost else "") + f", p99 {p99}"


def _cpu(server: dict[str, Any], base: dict[str, Any], endpoint: str) -> tuple[str, list[float]]:
    """'cpu (x minimal)' per rate, and the ratios."""
    cells, ratios = [], []
    for row, ref in zip(server[endpoint], base[endpoint], strict=True):
        x = _x(row["cpu_ms_per_request"], ref["cpu_ms_per_request"])
        ratios += [] if x is None else [x]
        cells.append(f"{row['cpu_ms_per_request']} ({'-' if x is None else f'{x:.1f}x'})")
    return ", ".join(cells), ratios


def _target(what: str, worst: float, limit: float) -> str:
    if worst <= limit:
        return f"{what}: met (at most {worst:.2f}x)"
    return f"{what}: **not met** (up to {worst:.2f}x, {worst / limit:.2f} times the target)"


def _verdict(name: str, server: dict[str, Any], get_x: list[float], list_x: list[float], first_x: list[float]) -> str:
    at = next((row for row in server[GET] if row["offered_rps"] == SERVED_RPS), None)
    not_served_below = sum(row["shed"] + row["timeouts"] + row["errors"] for row in server[GET] if row["offered_rps"] < SERVED_RPS)
    served = at is not None and at["ok"] == at["sent"] and at["p99_ms"] is not None and at["p99_ms"] <= P99_MS
    p99_gap = "" if served or at is None or at["p99_ms"] is None else f", {at['p99_ms'] / P99_MS:.2f} times the p99 target"
    parts = [
        _target(f"status read CPU <= {STATUS_CPU_X:g}x the minimal app's", max(get_x), STATUS_CPU_X)
        + ("" if not first_x else f" (a job's first read: {max(first_x):.2f}x)"),
        f"{SERVED_RPS} req/s served at p99 <= {P99_MS:g} ms: " + ("met" if served else f"**not met** ({_served(at)}{p99_gap})"),
        "nothing shed below that rate: " + ("met" if not_served_below == 0 else f"**not met** ({not_served_below} not served)"),
        _target(f"list <= {LIST_CPU_X:g}x", max(list_x), LIST_CPU_X),
    ]
    return f"- {name}: " + "; ".join(parts) + "."


def _summary(name: str, server: dict[str, Any], base: dict[str, Any]) -> str:
    get_x, list_x = _cpu(server, base, GET)[1], _cpu(server, base, LIST)[1]
    at = {int(row["offered_rps"]): _served(row) for row in server[GET][-2:]}
    return (
        f"{name}: "
        + ", ".join(f"at {rate} req/s {text}" for rate, text in at.items())
        + f", status CPU {min(get_x):.1f}-{max(get_x):.1f}x, list {min(list_x):.1f}-{max(list_x):.1f}x"
    )


def render_earlier(result: dict[str, Any], name: str) -> str:
    """One line per rljob server of an earlier run of the same bench, beside the last run's table."""
    base = result["servers"]["minimal"]
    servers = [_summary(n, s, base) for n, s in result["servers"].items() if n != "minimal"]
    return (
        f"The run before it (`bench/results/{name}`, {result['duration_s']:g} s per rate; {where(result.get('machine'))}): "
        + "; ".join(servers)
        + "."
    )


def render_control_plane(result: dict[str, Any], earlier: dict[str, Any] | None = None, earlier_name: str = "") -> str:
    servers = result["servers"]
    base = servers["minimal"]
    get_rates = [int(row["offered_rps"]) for row in base[GET]]
    list_rates = [int(row["offered_rps"]) for row in base[LIST]]
    before = f"; `--before {result['before']}`: the rljob servers also ran from that commit" if result.get("before") else ""
    first = FIRST_READ in base
    lines = [
        f"Last run (`bench/results/control_plane.json`, {result['duration_s']:g} s per rate, {result['jobs']:,} jobs{before}; "
        f"{where(result.get('machine'))}). CPU: the server process's ms per answered request, and its ratio to the "
        "minimal app's at the same rate. "
        + (
            "Before the rates, each job is read once at the lowest rate (the first column: a job's first read):"
            if first
            else f"This run had no first-read pass: the {get_rates[0]} req/s window was each job's first read:"
        ),
        "",
        "| server | "
        + ("first read of each job: CPU ms | " if first else "")
        + f"GET a job: CPU ms at {', '.join(map(str, get_rates))} req/s | at {get_rates[-2]} req/s: answered "
        f"| at {get_rates[-1]} req/s | list 50: CPU ms at {', '.join(map(str, list_rates))} req/s | list at "
        f"{list_rates[-1]} req/s |",
        "|---|---|---|---|---|---|" + ("---|" if first else ""),
    ]
    verdicts = []
    for name, server in servers.items():
        get_cells, get_x = _cpu(server, base, GET)
        list_cells, list_x = _cpu(server, base, LIST)
        first_cells, first_x = _cpu(server, base, FIRST_READ) if first and FIRST_READ in server else ("-", [])
        lines.append(
            f"| {name} | " + (f"{first_cells} | " if first else "") + f"{get_cells} | {_served(server[GET][-2])} | "
            f"{_served(server[GET][-1])} | {list_cells} | {_served(server[LIST][-1])} |"
        )
        if name != "minimal" and "before" not in name:
            verdicts.append(_verdict(name, server, get_x, list_x, first_x))
    tail = ["", render_earlier(earlier, earlier_name)] if earlier is not None else []
    return "\n".join([*lines, "", "Issue 21's targets, as measured here:", "", *verdicts, *tail])


def render_control_plane_runs(result: dict[str, Any], earlier: dict[str, Any]) -> str:
    """The last run's table and verdicts, then the run before it in a line: on shared cores one run is not the rule."""
    return render_control_plane(result, earlier, "control_plane-5ebe387.json")


def render_trainer_overhead(result: dict[str, Any]) -> str:
    runs, target = result["runs"], result["target_ratio"]
    lines = [
        f"Last {len(runs)} runs (`bench/results/trainer_overhead.json`; {where_shared([run['machine'] for run in runs])}), "
        "seconds bare / trainer:",
        "",
        "| run | convert s | train s | export s | total s | ratio | load (1 min) |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, run in enumerate(runs, 1):
        bare, trainer = run["bare_s"], run["trainer_s"]
        stages = " | ".join(f"{bare.get(s, 0):.1f} / {trainer.get(s, 0):.1f}" for s in ("convert", "train", "export", "total"))
        lines.append(f"| {i} | {stages} | {run['ratio']:.3f} | {load_span(run['machine'])} |")
    ratios = [run["ratio"] for run in runs]
    met = sum(r <= target for r in ratios)
    median = statistics.median(ratios)
    verdict = "met" if met == len(runs) >= 3 else f"**not met**: {met} of {len(runs)}"
    gap = "" if median <= target else f", {(median - target) * 100:.1f} points over"
    worst = max(ratios)
    lines += ["", f"Target <= {target} in 3 of 3 runs: {verdict} (median {median:.3f}{gap}; worst {worst:.3f})."]
    return "\n".join(lines)
