"""bench/chip/tpu_agreement.py: the committed result is what the jobs' own events give, and a job whose engine and
trainer drift apart is reported with the service's warning, not as agreeing."""

from __future__ import annotations

import json
from pathlib import Path

from bench.chip import tpu_agreement
from bench.readme_render.tpu_agreement import render_tpu_agreement


def test_the_committed_result_is_what_its_events_give():
    committed = json.loads(tpu_agreement.RESULT.read_text())
    again = tpu_agreement.measure(
        (tpu_agreement.REPO / committed["events"]).resolve(), (tpu_agreement.REPO / committed["record"]).resolve()
    )
    assert again == committed


def _drifted_copy(source: Path, out: Path, by: float) -> None:
    lines = []
    for line in source.read_bytes().splitlines():
        event = json.loads(line)
        if event["type"] == "train_step" and tpu_agreement.PREFIX + "logp_diff_mean" in event["metrics"]:
            event["metrics"][tpu_agreement.PREFIX + "logp_diff_mean"] += by
        lines.append(json.dumps(event))
    out.write_text("\n".join(lines) + "\n")


def test_a_job_past_the_threshold_carries_the_services_warning(tmp_path: Path):
    committed = json.loads(tpu_agreement.RESULT.read_text())
    name, job = next(iter(committed["jobs"].items()))
    source = tpu_agreement.REPO / committed["events"] / f"{job['job_id']}.jsonl"
    drifted = tmp_path / source.name
    _drifted_copy(source, drifted, by=0.1)
    found = {"job_id": job["job_id"], **tpu_agreement.job_agreement(drifted)}
    assert found["steps_over_threshold"] == found["steps"]
    assert found["warning"] and "disagree on the sampled tokens' log-probabilities" in found["warning"]
    assert abs(found["logp_diff_mean"]["mean"] - job["logp_diff_mean"]["mean"] - 0.1) < 1e-9
    text = render_tpu_agreement({**committed, "jobs": {name: found}})
    assert "disagree on the sampled tokens' log-probabilities" in text and "no warning" not in text
