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
