"""bench/estimate/estimate_accuracy.py's section: each tiny job's estimate at submit against what it took."""

from __future__ import annotations

from typing import Any

from .common import where


def render_estimate_accuracy(result: dict[str, Any]) -> str:
    rows = result["rows"]
    lines = [
        f"Last run (`bench/results/estimate_accuracy.json`, {where(result.get('machine'))}): {result['jobs']} tiny jobs of "
        f"{result['steps_per_job']} step(s) in sequence; the wall time fell inside its estimate's range for "
        f"**{result['inside']['wall_s']} of {result['jobs']}**, the run time for {result['inside']['run_s']}.",
        "",
        "| job | basis (history jobs) | wall estimate [range] | actual wall | actual / expected | inside |",
        "|---|---|---|---|---|---|",
    ]
    for n, row in enumerate(rows, 1):
        wall = row["wall_s"]
        ratio = f"{wall['ratio']:.2f}" if wall["ratio"] is not None else "-"
        lines.append(
            f"| {n} | {row['basis']} ({row['history_jobs']}) | {wall['expected']:.0f} s [{wall['low']:.0f}-{wall['high']:.0f}] "
            f"| {wall['actual']:.0f} s | {ratio} | {'yes' if wall['within'] else 'no'} |"
        )
    return "\n".join(lines)
