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


def _warm(result: dict[str, Any]) -> dict[str, Any]:
    return next(job for job in result["jobs"].values() if job["cache"] == "filled")


def render_tpu_compile_cache(result: dict[str, Any]) -> str:
    rows = [
        "| job | compilation cache | train_rl to its first step's end | steady step | warmup (s by part) |",
        "|---|---|---|---|---|",
        *(_job_row(name, job) for name, job in result["jobs"].items()),
    ]
    return "\n".join(
        [
            *rows,
            "",
            f"With the cache filled, the first step's warmup was {result['warm_over_cold_warmup']:.2f}x the empty cache's and "
            f"train_rl reached its first step's end in {result['warm_over_cold_first_step']:.2f}x the time (one job each, "
            f"commit `{(result.get('commit') or '?')[:10]}`; from `{result['events']}` and `{result['record']}`). Of the "
            f"filled cache's warmup, {_warm(result)['warmup_by_part'].get('other', 0):.1f} s is time before and in the first "
            "step that no part names (loading the models among it; not split further here).",
        ]
    )
