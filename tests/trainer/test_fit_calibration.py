"""The fit estimate against every shape the v5e chip measured (bench/results/tpu_grpo.json, bench/fit_calibration_tpu.py):
a re-measurement or a formula change that breaks the calibration fails here.

The chip's `peak_bytes_in_use` counts JAX arrays, not XLA's program temporaries, so it is held against the estimate's
resident part plus the arrays of the phases the run reached, within 15%; the temporaries are held by the verdicts: a
shape that ran is not refused, and one that ran out of HBM is.
"""

from __future__ import annotations

import json

import pytest

from bench.fit_calibration_tpu import RESULT, TOLERANCE, compare, estimate_of, model_shape_of

SHAPES = json.loads(RESULT.read_text())["shapes"]


@pytest.mark.parametrize("entry", SHAPES, ids=[s["shape"] for s in SHAPES])
def test_the_estimate_is_within_15_percent_of_the_measured_peak(entry: dict) -> None:
    row = compare(entry)
    assert abs(row["ratio"] - 1) <= TOLERANCE, row


@pytest.mark.parametrize("entry", SHAPES, ids=[s["shape"] for s in SHAPES])
def test_what_ran_is_accepted_and_what_ran_out_of_memory_is_refused(entry: dict) -> None:
    estimate = estimate_of(entry)
    if entry["returncode"] == 0:
        assert estimate.verdict in ("fits", "tight"), estimate.message
    else:  # the 4x8 Qwen3-0.6B: RESOURCE_EXHAUSTED in its log-prob program
        assert estimate.verdict == "does-not-fit", estimate.message


def test_the_rebuilt_shapes_have_the_parameters_the_run_reported() -> None:
    for entry in SHAPES:
        assert model_shape_of(entry).parameters == entry["parameters"], entry["shape"]


def test_the_qwen3_batch_1_phases_by_hand() -> None:
    """Qwen3-0.6B (596,049,920 parameters, tied, 28 layers, 8 KV heads of 128, vocabulary 151,936) at 1x8, 256+512
    tokens, bf16, jax engine, one v5e chip: each phase worked out here from the shape alone."""
    [entry] = [s for s in SHAPES if s["shape"] == "qwen3-0.6b-b1"]
    w = 596_049_920 * 2  # bf16: params, each moment, gradients, reference, and the decode layout (tied: all of it)
    resident = w + 2 * w + w + w
    kv = 8 * (768 + 8) * 28 * 2 * 8 * 128 * 2
    tokens = 8 * 768
    layer = tokens * (3 * 1024 + 16 * 128 + 3 * 3072) * 2 + 8 * 16 * 768 * 768 * 4
    logits = tokens * 151_936 * 4
    phases = {p.name: (p.resident, p.arrays, p.program) for p in estimate_of(entry).phases}
    assert phases == {
        "rollout": (resident, kv, 0),
        "log-probs": (resident, 0, logits + layer),
        "optimizer sharding": (resident, 2 * w, 0),
        "update": (resident, w, w + logits + tokens * 151_936 * 2 + layer),
    }
    # The measured 8,459,915,776 is the moments' re-shard: 7 w = 8,344,698,880 in arrays.
    assert compare(entry)["estimated_in_use"] == resident + 2 * w == 8_344_698_880
