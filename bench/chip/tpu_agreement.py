"""Issue 66 §2 on a real model: the sampler-trainer agreement the GSM8K jobs logged on the chip, read from their own
trainer events (bench/chip/tpu_job.py keeps them), beside what it cost each step.

The bench shapes of bench/chip/tpu_grpo.py run MaxText's random weights, whose logits are far larger than a trained
model's; these jobs run SmolLM2-135M-Instruct (float32 weights, MaxText computing in bfloat16, the jax rollout
engine). Per job, over the steps that logged it (trainer/maxtext_entry/logprob_agreement.py): the mean |Δ log p| per
sampled token (each step's, then their range and mean), the largest single token's, the probabilities' correlation,
and the service's own verdict on them (service/domain/health/sampler_agreement.py at its default threshold). The cost:
the steady steps' `logprobs` part per step, the step waiting on the reference's and the agreement's forwards.

    .venv/bin/python bench/chip/tpu_agreement.py --events bench/results/tpu_job_gsm8k-events-20261207 \
        --record bench/results/tpu_job_gsm8k-call-20261207T1050.json
    .venv/bin/python bench/readme_sections.py      # bench/chip/README.md's tpu-agreement block
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.chip.job_events import recorded_jobs, write_from_call  # noqa: E402
from bench.chip.tpu_compile_cache import job_first_step  # noqa: E402
from service.domain.health.learning_health import HealthPolicy  # noqa: E402
from service.domain.health.sampler_agreement import agreement_drift  # noqa: E402
from service.domain.records.train_step_summary import TrainStepSummary  # noqa: E402
from trainer.contract import TrainStep, parse_event  # noqa: E402

RESULT = REPO / "bench" / "results" / "tpu_agreement.json"
PREFIX = "sampler_trainer/train/"


def job_agreement(events_file: Path) -> dict[str, Any]:
    steps = [e for e in map(parse_event, events_file.read_bytes().splitlines()) if isinstance(e, TrainStep)]
    logged = [s for s in steps if PREFIX + "logp_diff_mean" in s.metrics]
    if not logged:
        raise SystemExit(f"{events_file}: no step logged the sampler-trainer agreement")
    means = [s.metrics[PREFIX + "logp_diff_mean"] for s in logged]
    corr = [s.metrics[PREFIX + "probs_pearson_corr"] for s in logged if PREFIX + "probs_pearson_corr" in s.metrics]
    policy = HealthPolicy()
    warning = agreement_drift(
        [TrainStepSummary.of_event(s) for s in steps], limit=policy.agreement_logp_diff_max, last=policy.agreement_steps
    )
    # steady: from the end of the first step (its compiling) to the last step's end, as the service folds them
    timing = job_first_step(events_file)
    first, last = timing["first_step"], timing["last_step"]
    waits = (last["parts"].get("logprobs", 0.0) - first["parts"].get("logprobs", 0.0)) / (last["step"] - first["step"])
    return {
        "steps": len(logged),
        "logp_diff_mean": {"min": min(means), "mean": sum(means) / len(means), "max": max(means)},
        "logp_diff_max": max(s.metrics[PREFIX + "logp_diff_max"] for s in logged),
        "prob_diff_mean": sum(s.metrics[PREFIX + "prob_diff_mean"] for s in logged) / len(logged),
        "probs_pearson_corr_min": min(corr) if corr else None,
        "threshold": policy.agreement_logp_diff_max,
        "steps_over_threshold": sum(m > policy.agreement_logp_diff_max for m in means),
        "warning": warning,
        "logprobs_s_per_steady_step": round(waits, 4),
        "steady_step_s": timing["steady_step_s"],
    }


def measure(events_dir: Path, record_file: Path) -> dict[str, Any]:
    record = json.loads(record_file.read_text())
    jobs = {name: {"job_id": found["job_id"], **job_agreement(events)} for name, found, events in recorded_jobs(events_dir, record_file)}
    if not jobs:
        raise SystemExit(f"{record_file}: none of its jobs has events in {events_dir}")
    spec = next(iter(record["jobs"].values()))["view"].get("spec") or {}
    return {
        "record": str(record_file.relative_to(REPO)),
        "events": str(events_dir.relative_to(REPO)),
        "commit": record.get("commit"),
        "model": {"dtype": (spec.get("model") or {}).get("dtype"), "compute_dtype": (spec.get("model") or {}).get("compute_dtype")},
        "rollout_engine": (spec.get("hardware") or {}).get("rollout_engine"),
        "jobs": jobs,
    }


def main() -> int:
    return write_from_call(
        __doc__ or "", measure, RESULT, lambda found: ", ".join(f"{n} {j['logp_diff_mean']['mean']:.4f}" for n, j in found["jobs"].items())
    )


if __name__ == "__main__":
    sys.exit(main())
