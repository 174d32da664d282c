"""bench/chip/tpu_agreement_logits.py: a float32-logits job pairs with the registered bf16 job of its seed step by
step, on the steps both logged, and a job without its registered twin is refused. The chip has not run one yet; here
the variant's events are the registered job's own with the agreement scaled, so every ratio is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.chip import tpu_agreement, tpu_agreement_logits
from bench.readme_render.tpu_agreement_logits import render_tpu_agreement_logits

REPO = tpu_agreement.REPO
COMMITTED = json.loads(tpu_agreement.RESULT.read_text())


def _variant_call(tmp_path: Path, name: str, scale: float, drop_first: bool = False) -> tuple[Path, Path]:
    """A call record naming one job `name` whose events are the registered trained/4's, agreement times `scale`."""
    base = COMMITTED["jobs"]["trained/4"]
    events_dir = tmp_path / "events"
    events_dir.mkdir(parents=True)
    lines = []
    for line in (REPO / COMMITTED["events"] / f"{base['job_id']}.jsonl").read_bytes().splitlines():
        event = json.loads(line)
        if event["type"] == "train_step" and tpu_agreement_logits.MEAN in event["metrics"]:
            if drop_first and event["step"] == 1:
                continue
            event["metrics"][tpu_agreement_logits.MEAN] *= scale
        lines.append(json.dumps(event))
    (events_dir / "rl-variant.jsonl").write_text("\n".join(lines) + "\n")
    record = tmp_path / "call.json"
    record.write_text(json.dumps({"commit": "f" * 40, "jobs": {name: {"job_id": "rl-variant", "view": {}}}}))
    return events_dir, record


@pytest.fixture
def in_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """measure() names its inputs relative to the repository, as the committed results do."""
    monkeypatch.setattr(tpu_agreement_logits, "REPO", tmp_path)
    (tmp_path / COMMITTED["events"]).parent.mkdir(parents=True)
    (tmp_path / COMMITTED["events"]).symlink_to(REPO / COMMITTED["events"])
    (tmp_path / COMMITTED["record"]).symlink_to(REPO / COMMITTED["record"])
    return tmp_path


def test_each_step_pairs_with_the_registered_jobs_same_step(in_repo: Path):
    events, record = _variant_call(in_repo / "call", "trained/4/logits-float32", 0.1)
    found = tpu_agreement_logits.measure(events, record)
    job = found["jobs"]["trained/4/logits-float32"]
    assert job["against"] == "trained/4" and job["steps_paired"] == COMMITTED["jobs"]["trained/4"]["steps"]
    assert job["first_step"]["step"] == 1 and job["first_step"]["ratio"] == pytest.approx(0.1)
    assert job["ratio"]["median"] == pytest.approx(0.1) and job["ratio"]["max"] == pytest.approx(0.1)
    assert job["bfloat16"] == COMMITTED["jobs"]["trained/4"]
    assert job["float32"]["logp_diff_mean"]["mean"] == pytest.approx(0.1 * job["bfloat16"]["logp_diff_mean"]["mean"])
    text = render_tpu_agreement_logits(found)
    first = job["first_step"]
    assert f"{first['bfloat16']:.4f} -> {first['float32']:.4f} (0.100x)" in text and "0.100x (0.100-0.100)" in text


def test_only_steps_both_logged_pair(in_repo: Path):
    events, record = _variant_call(in_repo / "call", "trained/4/logits-float32", 0.5, drop_first=True)
    job = tpu_agreement_logits.measure(events, record)["jobs"]["trained/4/logits-float32"]
    assert job["first_step"]["step"] == 2 and job["steps_paired"] == COMMITTED["jobs"]["trained/4"]["steps"] - 1
    # each step against the same step, not the n-th logged against the n-th
    assert (job["ratio"]["min"], job["ratio"]["max"]) == pytest.approx((0.5, 0.5))


def test_a_job_without_its_registered_twin_or_not_a_logits_job_is_refused(in_repo: Path):
    events, record = _variant_call(in_repo / "a", "trained/9/logits-float32", 0.1)
    with pytest.raises(SystemExit, match="no registered job trained/9"):
        tpu_agreement_logits.measure(events, record)
    events, record = _variant_call(in_repo / "b", "trained/4", 0.1)
    with pytest.raises(SystemExit, match="not a --logits-dtype float32 job"):
        tpu_agreement_logits.measure(events, record)
