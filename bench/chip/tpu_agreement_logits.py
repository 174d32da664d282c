"""Issue 66 §2 on a real model with the logits in float32: the jobs of a `tpu_job.py run --logits-dtype float32` call
against the registered GSM8K jobs of the same seeds (the call bench/results/tpu_agreement.json reads), which trained on
the same prompts in the same order with the logits in bf16, step by step.

Step 1 samples with the same weights on both sides (none updated yet), so its difference is the logits' precision
alone. Later steps pair on their prompts only: each side's updates move its own policy. Per job: each step's mean
|Δ log p| per sampled token both ways, their ratio at step 1 and the per-step ratios over every step both logged
(median and range, no interval: successive steps of one run are not independent draws), the largest single token's
difference, the probabilities' correlation, and what it cost (the steady step and its log-probs wait, both ways).

    .venv/bin/python bench/chip/tpu_agreement_logits.py --events bench/results/tpu_agreement_logits-events-<date> \
        --record bench/results/tpu_agreement_logits-call-<time>.json
    .venv/bin/python bench/readme_sections.py      # bench/chip/README.md's block, once a result exists
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.chip import tpu_agreement  # noqa: E402
from bench.chip.job_events import recorded_jobs, write_from_call  # noqa: E402
from trainer.contract import TrainStep, parse_event  # noqa: E402

RESULT = REPO / "bench" / "results" / "tpu_agreement_logits.json"
VARIANT = "/logits-float32"  # tpu_job.py's name for a --logits-dtype float32 job: "<arm>/<seed>/logits-float32"
MEAN = tpu_agreement.PREFIX + "logp_diff_mean"


def step_means(events_file: Path) -> dict[int, float]:
    """Each train step's mean |Δ log p| per sampled token, by step, for the steps that logged it."""
    steps = [e for e in map(parse_event, events_file.read_bytes().splitlines()) if isinstance(e, TrainStep)]
    return {s.step: s.metrics[MEAN] for s in steps if MEAN in s.metrics}


def paired(variant_events: Path, base_events: Path) -> dict[str, Any]:
    """The float32-logits job's steps against the bf16 job's, on the steps both logged."""
    fp32, bf16 = step_means(variant_events), step_means(base_events)
    common = sorted(set(fp32) & set(bf16))
    if not common:
        raise SystemExit(f"{variant_events.name} and {base_events.name} logged the agreement at no common step")
    ratios = [fp32[s] / bf16[s] for s in common]
    first = common[0]
    return {
        "steps_paired": len(common),
        "first_step": {"step": first, "bfloat16": bf16[first], "float32": fp32[first], "ratio": fp32[first] / bf16[first]},
        "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
    }


def measure(events_dir: Path, record_file: Path) -> dict[str, Any]:
    against = json.loads(tpu_agreement.RESULT.read_text())
    base_events, base_record = REPO / against["events"], REPO / against["record"]
    bases = {name: events for name, _, events in recorded_jobs(base_events, base_record)}
    jobs: dict[str, Any] = {}
    for name, found, events in recorded_jobs(events_dir, record_file):
        if not name.endswith(VARIANT):
            raise SystemExit(f"{record_file.name}: {name} is not a --logits-dtype float32 job")
        base = name.removesuffix(VARIANT)
        if base not in bases:
            raise SystemExit(f"{record_file.name}: {name} has no registered job {base} with events in {against['events']}")
        jobs[name] = {
            "job_id": found["job_id"],
            "against": base,
            **paired(events, bases[base]),
            "float32": tpu_agreement.job_agreement(events),
            "bfloat16": against["jobs"][base],
        }
    if not jobs:
        raise SystemExit(f"{record_file}: none of its jobs has events in {events_dir}")
    record = json.loads(record_file.read_text())
    return {
        "record": str(record_file.relative_to(REPO)),
        "events": str(events_dir.relative_to(REPO)),
        "commit": record.get("commit"),
        "against": {"record": against["record"], "events": against["events"], "commit": against["commit"]},
        "jobs": jobs,
    }


def main() -> int:
    return write_from_call(
        __doc__ or "",
        measure,
        RESULT,
        lambda found: ", ".join(f"{n} step-1 ratio {j['first_step']['ratio']:.3f}" for n, j in found["jobs"].items()),
    )


if __name__ == "__main__":
    sys.exit(main())
