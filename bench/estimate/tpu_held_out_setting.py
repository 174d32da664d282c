"""Issue 67 §4, a setting the rates never saw: the run-time estimate the service made at submit for the GSM8K jobs on
the chip (bench/chip/tpu_job.py), against the steady steps those jobs then ran.

The rates (service/domain/cost/tpu_step_rates.json) come from bench/results/tpu_grpo.json's shapes, whose SmolLM2-135M
run sampled 4 prompts x 8 with 256 prompt and 512 new tokens; the GSM8K jobs sample 2 x 8 with 256 and 256, so their
estimate is out of sample in batch and lengths. Estimated: the job's `estimate.run_parts_s` (the whole train stage)
per step. Measured: the job's trainer events folded as the service folds them, the steps after the first (whose
compiling is its `warmup`), per step: rollout and update from their parts, the step from train_rl's elapsed time. Beside
the estimate made then, this code's (`predicted_now`; tests/bench/estimate/test_tpu_held_out_setting.py fails until
the result is made again after the estimate's code changes).

    .venv/bin/python bench/estimate/tpu_held_out_setting.py --events bench/results/tpu_job_gsm8k-events-20261207 \
        --record bench/results/tpu_job_gsm8k-call-20261207T1343.json
    .venv/bin/python bench/readme_sections.py      # bench/estimate/README.md's tpu-estimate-held-out-setting block
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

RESULT = REPO / "bench" / "results" / "tpu_estimate_held_out_setting.json"
# The model's config.json as `python -m trainer make-model smollm2-135m` writes it (the jobs' model, built on the chip's
# machine the same way): this code's prediction reads the model's shape from it, as the service does at submit.
MODEL_CONFIG = REPO / "bench" / "results" / "smollm2-135m-config.json"
TOLERANCE = 0.25  # issue 67's: within 25% of the measurement


def _per_step(view: dict[str, Any], steps: int) -> dict[str, float]:
    parts = view["estimate"]["run_parts_s"]
    rollout, logprobs, update, checkpoint = (parts.get(name, 0.0) for name in ("rollout", "logprobs", "update", "checkpoint"))
    return {"rollout": rollout / steps, "update": update / steps, "step": (rollout + logprobs + update + checkpoint) / steps}


def _as_run(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as its train stage ran it: a job submitted before `hardware.layer_activations` existed offloaded each
    layer's input and q/k/v as rl.yml does (there was no other policy), which today's spec says as `offload`; left to
    `auto`, this code would estimate the program it runs now, not the one measured."""
    if "layer_activations" in spec["hardware"]:
        return spec
    return {**spec, "hardware": {**spec["hardware"], "layer_activations": "offload"}}


def _predicted_now(view: dict[str, Any]) -> dict[str, float]:
    """This code's estimate for the job's spec (service/domain/cost/tpu_step_time.py), per step."""
    from service.domain.cost.tpu_step_time import tpu_train_time
    from trainer.contract import JobSpec
    from trainer.contract.accelerators.tpu import tpu_slice
    from trainer.sizing.job_shape import model_shape

    spec = JobSpec.model_validate(_as_run(view["spec"]))
    shape = model_shape(spec.model.name, None, json.loads(MODEL_CONFIG.read_text()))
    tpu = tpu_slice(spec.hardware.accelerator)
    assert shape is not None and tpu is not None
    return _per_step({"estimate": {"run_parts_s": tpu_train_time(spec, shape, tpu).parts}}, view["total_steps"])


def measure(events_dir: Path, record_file: Path) -> dict[str, Any]:
    record = json.loads(record_file.read_text())
    jobs = {}
    for name, found, events_file in recorded_jobs(events_dir, record_file):
        view, first_step = found["view"], job_first_step(events_file)
        first, last = first_step["first_step"], first_step["last_step"]
        steps = last["step"] - first["step"]
        measured = {
            "rollout": (last["parts"]["rollout"] - first["parts"]["rollout"]) / steps,
            "update": (last["parts"]["update"] - first["parts"]["update"]) / steps,
            "step": (last["elapsed_s"] - first["elapsed_s"]) / steps,
        }
        estimated = _per_step(view, view["total_steps"])
        now = _predicted_now(view)
        jobs[name] = {
            "job_id": found["job_id"],
            "settings": {
                k: view["spec"]["grpo"][k] for k in ("batch_size", "num_generations", "max_prefill_predict_length", "max_target_length")
            },
            "estimate_made_at": view["estimate"]["made_at"],
            "estimate_basis": view["estimate"]["basis"],
            "steady_steps": steps,
            "estimated_s_per_step": {k: round(v, 4) for k, v in estimated.items()},
            "measured_s_per_step": {k: round(v, 4) for k, v in measured.items()},
            "error": {k: round(estimated[k] / measured[k] - 1, 3) for k in measured},
            "predicted_now_s_per_step": {k: round(v, 4) for k, v in now.items()},
            "error_now": {k: round(now[k] / measured[k] - 1, 3) for k in measured},
        }
    return {
        "record": str(record_file.relative_to(REPO)),
        "events": str(events_dir.relative_to(REPO)),
        "commit": record.get("commit"),
        "tolerance": TOLERANCE,
        "jobs": jobs,
    }


def main() -> int:
    return write_from_call(
        __doc__ or "", measure, RESULT, lambda found: "; ".join(f"{name} {job['error']}" for name, job in found["jobs"].items())
    )


if __name__ == "__main__":
    sys.exit(main())
