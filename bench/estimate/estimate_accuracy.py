"""How far the submit-time estimates are from what the jobs took (issue 37): N tiny jobs in sequence through
`rljob serve` (local launcher, the real trainer on the tiny CPU model), each one's estimate recorded at its submit
(JobPublic.estimate) and its actuals once it has ended (JobPublic.estimate_actuals: wall, run, chip-hours).

The first job has no history, so its estimate is the formula (tokens per step at an assumed rate); the second
learns from one job (its time / 3 to x 3); from the third on, from every earlier one (a 95% prediction interval on
log(seconds), Student's t). Prints, per job, the basis, the estimate's wall range, the actual wall and the ratio
actual / expected, and how many actuals fell inside their range; writes bench/results/estimate_accuracy.json,
rendered into bench/estimate/README.md (section estimate-accuracy) by bench/readme_sections.py.

    python bench/estimate/estimate_accuracy.py [--jobs 4] [--steps 1] [--work DIR]

Each tiny job of one step without evaluation or export takes about a minute on two cores (the first converts the
tiny model; the later ones take it from the conversion cache of the shared output, as they would in real use).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.control_plane.app_server import until_healthy  # noqa: E402
from bench.result_meta import machine_facts, write_result  # noqa: E402
from service.cli.client import ClientConfig, RljobClient  # noqa: E402
from service.domain.records.phases import TERMINAL  # noqa: E402
from service.free_port import free_port  # noqa: E402

BIN = Path(sys.executable).parent
TOKEN = "bench-estimate-token-0123456789abcdef"
TINY_SPEC = REPO / "examples" / "tiny-cpu.yaml"
POLL_S = 2.0
JOB_TIMEOUT_S = 1800.0


def tiny_body(tiny: Path, output: Path, steps: int) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(
        TINY_SPEC.read_text().replace("${RLJOB_TINY_DIR}", str(tiny)).replace("${RLJOB_OUTPUT}", str(output))
    )
    body["name"] = "tiny-estimate-bench"
    body["grpo"] |= {"num_batches": steps, "num_test_batches": 0}
    body["dataset"].pop("eval_files")
    body["export"] = {"enabled": False}
    return body


def wait_ended(client: RljobClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.request("GET", f"/v1/jobs/{job_id}")
        if job["phase"] in TERMINAL:
            return job
        time.sleep(POLL_S)
    raise SystemExit(f"{job_id} did not end within {JOB_TIMEOUT_S:.0f} s")


def row_of(job: dict[str, Any]) -> dict[str, Any]:
    estimate, actuals = job["estimate"], job["estimate_actuals"]
    row: dict[str, Any] = {
        "job_id": job["id"],
        "phase": job["phase"],
        "basis": estimate["basis"],
        "history_jobs": len(estimate["history_job_ids"]),
    }
    for figure in ("wall_s", "run_s", "chip_hours"):
        expected = estimate[figure]
        actual = actuals[figure]["actual"]
        row[figure] = {
            "expected": expected["expected"],
            "low": expected["low"],
            "high": expected["high"],
            "actual": actual,
            "ratio": round(actual / expected["expected"], 3) if expected["expected"] else None,
            "within": actuals[figure]["within"],
        }
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4, help="tiny jobs to run, one after another")
    parser.add_argument("--steps", type=int, default=1, help="train steps of each tiny job")
    parser.add_argument("--work", type=Path, default=None, help="working directory (default: a new temporary one)")
    args = parser.parse_args()
    machine = machine_facts()
    work = args.work or Path(tempfile.mkdtemp(prefix="rljob-estimate-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    tiny = work / "tiny"
    if not (tiny / "model").exists():
        subprocess.run([sys.executable, "-m", "trainer", "make-tiny", "--out", str(tiny)], cwd=REPO, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    env |= {
        "RLJOB_ENVIRONMENT": "dev",
        "RLJOB_LAUNCHER": "local",
        "RLJOB_STATE_DIR": str(work / "state"),
        "RLJOB_BOOTSTRAP_TOKEN": TOKEN,
        "RLJOB_BOOTSTRAP_TEAM": "bench",
        "RLJOB_TRAINER_COMMAND": f'["{sys.executable}", "-m", "trainer"]',
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    port = free_port()
    argv = [str(BIN / "rljob"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    body = tiny_body(tiny, work / "runs", args.steps)
    rows = []
    with until_healthy(argv, env, work, work / "serve.log", "rljob serve", port):
        client = RljobClient(ClientConfig(url=f"http://127.0.0.1:{port}", token=TOKEN, config_file=None))
        for n in range(args.jobs):
            job = client.request("POST", "/v1/jobs", json=body)
            ended = wait_ended(client, job["id"])
            row = row_of(ended)
            rows.append(row)
            wall = row["wall_s"]
            print(
                f"job {n + 1}/{args.jobs} {row['job_id']} {row['phase']}: {row['basis']} ({row['history_jobs']} jobs), wall "
                f"{wall['expected']:.0f} s [{wall['low']:.0f}-{wall['high']:.0f}], actual {wall['actual']:.0f} s, "
                f"ratio {wall['ratio']}, {'inside' if wall['within'] else 'outside'}",
                flush=True,
            )
    inside = {figure: sum(1 for r in rows if r[figure]["within"]) for figure in ("wall_s", "run_s", "chip_hours")}
    print(f"wall inside its range: {inside['wall_s']} of {len(rows)}; run: {inside['run_s']} of {len(rows)}")
    report = {"bench": "estimate_accuracy", "jobs": len(rows), "steps_per_job": args.steps, "inside": inside, "rows": rows}
    write_result("estimate_accuracy.json", report, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
