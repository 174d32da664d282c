"""The block for bench/results/tpu_agreement_logits.json (bench/chip/tpu_agreement_logits.py): a real model's
sampler-trainer agreement with the logits in float32 against the registered bf16 job of the same seed, step by step,
and what it cost. bench/readme_sections.py holds it once the chip has given a result."""

from __future__ import annotations

from typing import Any


def _corr(job: dict[str, Any]) -> str:
    corr = job["probs_pearson_corr_min"]
    return "-" if corr is None else f"{corr:.4f}"


def _row(name: str, job: dict[str, Any]) -> str:
    bf16, fp32, first, ratio = job["bfloat16"], job["float32"], job["first_step"], job["ratio"]
    return (
        f"| {name} (`{job['job_id']}`) against {job['against']} (`{bf16['job_id']}`) | {job['steps_paired']} | "
        f"{first['bfloat16']:.4f} -> {first['float32']:.4f} ({first['ratio']:.3f}x) | "
        f"{ratio['median']:.3f}x ({ratio['min']:.3f}-{ratio['max']:.3f}) | "
        f"{bf16['logp_diff_max']:.3f} -> {fp32['logp_diff_max']:.3f} | {_corr(bf16)} -> {_corr(fp32)} | "
        f"{bf16['steady_step_s']:.3f} -> {fp32['steady_step_s']:.3f} ({fp32['steady_step_s'] / bf16['steady_step_s']:.2f}x) | "
        f"{bf16['logprobs_s_per_steady_step']:.3f} -> {fp32['logprobs_s_per_steady_step']:.3f} |"
    )


def render_tpu_agreement_logits(result: dict[str, Any]) -> str:
    against = result["against"]
    return "\n".join(
        [
            "| job | steps paired | step 1: mean \\|Δ log p\\| per token, bf16 -> float32 logits | per-step ratio, median "
            "(range) | largest \\|Δ log p\\| | probabilities' correlation, lowest | steady step s | log-probs wait s |",
            "|---|---|---|---|---|---|---|---|",
            *(_row(name, job) for name, job in result["jobs"].items()),
            "",
            f"float32 logits: commit `{(result.get('commit') or '?')[:10]}`, `{result['record']}`, events `{result['events']}`; "
            f"bf16: commit `{(against.get('commit') or '?')[:10]}`, `{against['record']}`, events `{against['events']}`. "
            "Step 1 samples with the same weights on both sides; later steps share only their prompts.",
        ]
    )
