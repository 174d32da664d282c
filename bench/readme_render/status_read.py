"""README passage of the status read against the minimal app at saturation (bench/control_plane/status_read.py; issue 54, section 4)."""

from __future__ import annotations

import statistics
from typing import Any

from bench.readme_render.common import where

# Issue 54's goal for one replica on SQLite (a target, not a measurement).
SERVED_X, P99_X = 0.7, 2.0


def _median(rounds: list[dict[str, Any]], server: str, window: str, field: str) -> float | None:
    values = [r[server][window][field] for r in rounds if r[server][window][field] is not None]
    return statistics.median(values) if values else None


def render_status_read_running(result: dict[str, Any]) -> str:
    """The same passage for `--running`: one RUNNING job's read (bench/control_plane/running_job.py), issue 68 section 6's goal."""
    return render_status_read(result, file="status_read_running.json", goal="Issue 68's goal (issue 54's, for a job under way)")


def render_status_read(result: dict[str, Any], file: str = "status_read.json", goal: str = "Issue 54's goal") -> str:
    rounds, at = result["rounds"], f"at_{result['p99_rps']}"
    job = result.get("job")
    jobs = (
        f"one RUNNING job with {job['steps']:,} train steps, their samples and {job['evaluations']} evaluations"
        if job
        else f"{result['jobs']:,} finished jobs"
    )
    servers = list(rounds[0])
    before = (
        f"; `--before {result['before']}`: rljob also ran from that commit, beside a minimal app serving its JSON"
        if result.get("before")
        else ""
    )
    lines = [
        f"Last run (`bench/results/{file}`, {len(rounds)} rounds alternating the servers, {result['duration_s']:g} s per "
        f"rate, {jobs}{before}; {where(result.get('machine'))}). Medians over rounds; served: answers "
        "(200) per second from the first send to the last answer:",
        "",
        f"| server | offered {result['saturation_rps']:,.0f} req/s: served req/s | shed (503) per round | CPU ms/req | "
        f"at {result['p99_rps']} req/s: p50 ms | p99 ms | CPU ms/req |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in servers:

        def cell(window: str, field: str, name: str = name) -> str:
            value = _median(rounds, name, window, field)
            if value is None:
                return "-"
            return f"{value:,.1f}" if field == "served_rps" else f"{value:,.0f}" if field == "shed" else f"{value:g}"

        lines.append(
            f"| {name} | {cell('saturation', 'served_rps')} | {cell('saturation', 'shed')} | {cell('saturation', 'cpu_ms_per_request')} "
            f"| {cell(at, 'p50_ms')} | {cell(at, 'p99_ms')} | {cell(at, 'cpu_ms_per_request')} |"
        )
    verdicts = []
    for rljob, x in result["ratios"].items():
        served = "met" if x["served_x"] >= SERVED_X else "**not met**"
        p99 = "met" if x["p99_x"] <= P99_X else "**not met**"
        verdicts.append(
            f"- {rljob} against `{result['pairs'][rljob]}`: served at saturation {x['served_x']:.2f}x (goal >= {SERVED_X:g}x: "
            f"{served}); p99 at {result['p99_rps']} req/s {x['p99_x']:.2f}x (goal <= {P99_X:g}x: {p99})."
        )
    return "\n".join([*lines, "", f"{goal}, as measured here:", "", *verdicts])
