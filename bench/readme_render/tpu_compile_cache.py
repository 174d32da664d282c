"""bench/chip/README.md's compilation-cache block (bench/results/tpu_compile_cache.json, bench/chip/tpu_compile_cache.py):
the first train step of a job that found the compilation cache new against one that found it filled."""

from __future__ import annotations

from typing import Any

PART_NAMES = {"rollout": "rollout", "logprobs": "log-probs", "update": "update", "weight_sync": "weight sync", "other": "unnamed"}


def _job_row(name: str, job: dict[str, Any]) -> str:
    parts = ", ".join(f"{PART_NAMES.get(p, p)} {s:.1f}" for p, s in job["warmup_by_part"].items() if s >= 0.05)
    return (
        f"| {name} (`{job['job_id']}`) | {job['cache']} | {job['first_step']['elapsed_s']:.1f} s | {job['steady_step_s']:.2f} s | "
        f"{job['warmup_s']:.1f} s ({parts}) |"
    )


def _warm(machine: dict[str, Any]) -> dict[str, Any]:
    return next(job for job in machine["jobs"].values() if job["cache"] == "filled")


def _machine(machine: dict[str, Any]) -> str:
    return (
        f"On the machine of `{machine['record']}` (commit `{(machine.get('commit') or '?')[:10]}`), with the cache filled the "
        f"first step's warmup was {machine['warm_over_cold_warmup']:.2f}x the empty cache's and train_rl reached its first "
        f"step's end in {machine['warm_over_cold_first_step']:.2f}x the time; of the filled cache's warmup, "
        f"{_warm(machine)['warmup_by_part'].get('other', 0):.1f} s is time before and in the first step that no part names "
        "(loading the models among it; not split further here)."
    )


def render_tpu_compile_cache(result: dict[str, Any]) -> str:
    machines = result["machines"]
    rows = [
        "| job | compilation cache | train_rl to its first step's end | steady step | warmup (s by part) |",
        "|---|---|---|---|---|",
        *(_job_row(name, job) for m in machines for name, job in m["jobs"].items()),
    ]
    ratios = result["warm_over_cold_warmup"]
    spread = (
        f"Over {len(machines)} machines, a filled cache's warmup was {min(ratios):.2f}x to {max(ratios):.2f}x an empty one's "
        f"(one pair a machine; {len(machines)} pairs give a range, not an interval). "
        if len(machines) > 1
        else "One job each: no interval. "
    )
    return "\n".join([*rows, "", spread + " ".join(_machine(m) for m in machines) + f" Events: `{machines[0]['events']}`."])
