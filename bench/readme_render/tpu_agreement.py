"""bench/chip/README.md's tpu-agreement block (bench/results/tpu_agreement.json, bench/chip/tpu_agreement.py): the
sampler-trainer agreement a real model's jobs logged on the chip, and the step's wait for it."""

from __future__ import annotations

from typing import Any


def _row(name: str, job: dict[str, Any]) -> str:
    m = job["logp_diff_mean"]
    corr = job["probs_pearson_corr_min"]
    wait, step = job["logprobs_s_per_steady_step"], job["steady_step_s"]
    verdict = job["warning"] or f"no warning ({job['steps_over_threshold']} of {job['steps']} steps above {job['threshold']:g})"
    return (
        f"| {name} (`{job['job_id']}`) | {job['steps']} | {m['mean']:.4f} ({m['min']:.4f}-{m['max']:.4f}) | "
        f"{job['logp_diff_max']:.3f} | {'-' if corr is None else f'{corr:.4f}'} | {verdict} | "
        f"{wait:.3f} of {step:.3f} s ({wait / step:.0%}) |"
    )


def render_tpu_agreement(result: dict[str, Any]) -> str:
    model = result["model"]
    compute = model.get("compute_dtype") or "bfloat16 (MaxText's default)"
    rows = [
        "| job | steps | mean \\|Δ log p\\| per token, mean over steps (range) | largest \\|Δ log p\\| "
        "| probabilities' correlation, lowest | the service's health check | log-probs wait per steady step |",
        "|---|---|---|---|---|---|---|",
        *(_row(name, job) for name, job in result["jobs"].items()),
    ]
    return "\n".join(
        [
            *rows,
            "",
            f"SmolLM2-135M-Instruct, {model['dtype']} weights, compute {compute}, the {result['rollout_engine']} rollout engine; "
            f"commit `{(result.get('commit') or '?')[:10]}`; `{result['record']}`, events `{result['events']}`.",
        ]
    )
