"""Issue 67 §3 on the chip: what JAX's persistent compilation cache (trainer/compile_cache.py) saves a job's first
step, read from jobs the GSM8K bench ran through the service (bench/chip/tpu_job.py).

Per machine, two jobs of one shape, one after the other on that freshly staged machine, under one output: the first found `_cache/`
new (its conversion cache missed: it converted) and so compiled everything; the next found what the first compiled.
Each job's trainer events are folded by the service's own reducer (service/domain/progress.py fold_report) and its
first step split as the job's goodput splits it (service/domain/cost/goodput.py `warmup`: the first step beyond a
steady step). The events are the jobs' own `events.jsonl`, copied off the machine after the calls.

    .venv/bin/python bench/chip/tpu_compile_cache.py --events bench/results/tpu_job_gsm8k-events-20261207 \
        --record bench/results/tpu_job_gsm8k-call-20261207T0145.json --record bench/results/tpu_job_gsm8k-call-20261207T0435.json \
        --record bench/results/tpu_job_gsm8k-call-20261207T1050.json --record bench/results/tpu_job_gsm8k-call-20261207T1343.json
    .venv/bin/python bench/readme_sections.py      # bench/chip/README.md's tpu-compile-cache block
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.chip.job_events import recorded_jobs  # noqa: E402
from service.domain.cost.goodput import first_step_excess  # noqa: E402
from service.domain.progress import fold_report  # noqa: E402
from service.domain.records.run_report import RunReport  # noqa: E402
from trainer.contract import StageFinished, parse_event  # noqa: E402

RESULT = REPO / "bench" / "results" / "tpu_compile_cache.json"


def job_first_step(events_file: Path) -> dict[str, Any]:
    """One job's first train step as its goodput sees it, and whether its output's caches were new."""
    report, convert = RunReport(), None
    for line in events_file.read_bytes().splitlines():
        event = parse_event(line)
        if isinstance(event, StageFinished) and event.stage.value == "convert":
            convert = {"skipped": event.skipped, "s": round(event.duration_s, 3), "reason": event.reason}
        folded = fold_report(report, event)
        if folded is not None:
            report = folded.report
    if len(report.first_goodput) != 1:
        raise SystemExit(f"{events_file}: {len(report.first_goodput)} attempts reported a first step; this reads one-attempt jobs")
    attempt, first = next(iter(report.first_goodput.items()))
    last = report.goodput[attempt]
    excess = first_step_excess(first, last)
    steps = last.step - first.step
    return {
        "convert": convert,
        # a missed conversion cache means `_cache/` under the output was new, the compilation cache with it
        "cache": "new" if convert and not convert["skipped"] else "filled",
        "first_step": {"step": first.step, "elapsed_s": round(first.elapsed_s, 3), "parts": first.parts},
        "last_step": {"step": last.step, "elapsed_s": round(last.elapsed_s, 3), "parts": last.parts},
        "steady_step_s": round((last.elapsed_s - first.elapsed_s) / steps, 3),
        "warmup_s": round(sum(excess.values()), 3),
        "warmup_by_part": {name: round(seconds, 3) for name, seconds in excess.items()},
    }


def measure(events_dir: Path, record_file: Path) -> dict[str, Any]:
    record = json.loads(record_file.read_text())
    jobs = {
        name: {"job_id": found["job_id"], "started_at": found["view"].get("started_at"), **job_first_step(events)}
        for name, found, events in recorded_jobs(events_dir, record_file)
    }
    order = sorted(jobs, key=lambda name: jobs[name]["started_at"] or "")
    cold = [name for name in order if jobs[name]["cache"] == "new"]
    warm = [name for name in order if jobs[name]["cache"] == "filled"]
    if not cold or not warm:
        raise SystemExit("need a job that found the cache new and one that found it filled")
    return {
        "record": str(record_file.relative_to(REPO)),
        "events": str(events_dir.relative_to(REPO)),
        "commit": record.get("commit"),
        "jobs": {name: jobs[name] for name in order},
        "warm_over_cold_warmup": round(jobs[warm[0]]["warmup_s"] / jobs[cold[0]]["warmup_s"], 3),
        "warm_over_cold_first_step": round(jobs[warm[0]]["first_step"]["elapsed_s"] / jobs[cold[0]]["first_step"]["elapsed_s"], 3),
    }


def measure_machines(events_dir: Path, record_files: list[Path]) -> dict[str, Any]:
    """One pair (a job that found the cache new, then one that found it filled) per freshly staged machine, each named
    by the call record that submitted its jobs."""
    machines = [measure(events_dir, record) for record in record_files]
    return {
        "machines": machines,
        "warm_over_cold_warmup": [m["warm_over_cold_warmup"] for m in machines],
        "warm_over_cold_first_step": [m["warm_over_cold_first_step"] for m in machines],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=Path, required=True, help="a folder of <job id>.jsonl trainer event files")
    parser.add_argument(
        "--record", type=Path, action="append", required=True, help="a tpu_job call record that submitted the jobs (one per machine)"
    )
    args = parser.parse_args()
    result = measure_machines(args.events.resolve(), [r.resolve() for r in args.record])
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULT}: warmup warm/cold {result['warm_over_cold_warmup']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
