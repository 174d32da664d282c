"""bench/estimate/tpu_held_out_setting.py: the committed result is what its committed inputs give (the estimates the
service made at submit, in the call record, and the jobs' own trainer events)."""

from __future__ import annotations

import json

from bench.estimate import tpu_held_out_setting


def test_the_committed_result_is_what_its_inputs_give():
    committed = json.loads(tpu_held_out_setting.RESULT.read_text())
    again = tpu_held_out_setting.measure(
        (tpu_held_out_setting.REPO / committed["events"]).resolve(), (tpu_held_out_setting.REPO / committed["record"]).resolve()
    )
    assert again == committed


def test_the_setting_is_one_no_rate_came_from():
    """Out of sample means no shape of the chip bench the rates are derived from ran this batch and these lengths."""
    committed = json.loads(tpu_held_out_setting.RESULT.read_text())
    grpo = json.loads((tpu_held_out_setting.REPO / "bench" / "results" / "tpu_grpo.json").read_text())
    keys = ("batch_size", "num_generations", "max_prefill_predict_length", "max_target_length")
    measured = {tuple(shape["settings"][k] for k in keys) for shape in grpo["shapes"]}
    for job in committed["jobs"].values():
        assert tuple(job["settings"][k] for k in keys) not in measured


def test_this_codes_estimate_holds_the_setting_within_a_quarter():
    """Issue 67 §4's bound on a setting the rates never saw: this code's rollout, update and step per step within 25%
    of the GSM8K jobs' measurement. The rollout and update rules predate these jobs; the step's log-prob term was added
    after they showed the step a third over without it (bench/estimate/README.md), so a later setting checks that
    term blind."""
    committed = json.loads(tpu_held_out_setting.RESULT.read_text())
    for name, job in committed["jobs"].items():
        for part, error in job["error_now"].items():
            assert abs(error) <= committed["tolerance"], (name, part, error)
