"""The fit estimate against every shape the v5e chip measured (bench/results/tpu_grpo.json, bench/estimate/fit_calibration_tpu.py):
a re-measurement or a formula change that breaks the calibration fails here.

Where the probe read libtpu's reservation (XLA's temporaries, in the same HBM as the arrays), what the chip held, arrays'
peak plus reservation at most the chip's limit, is held against the estimate's total; where it did not, JAX's arrays'
peak against the estimate's resident part plus the phases' arrays. Both within 15%, and the verdicts: a shape that ran
is not refused, and one that ran out of HBM is.
"""

from __future__ import annotations

import json

import pytest

from bench.estimate.fit_calibration_tpu import RESULT, TOLERANCE, compare, estimate_of, layers_in_hbm_of, model_shape_of

# TinyLlama's out-of-HBM run (at 2ca1695, the session before the engine's decode change: the layout refresh it ran out
# in did not change) is kept in a file of its own: later runs measure the largest shape the estimate accepts instead.
TINYLLAMA_OOM = json.loads((RESULT.parent / "tpu_grpo_tinyllama_oom.json").read_text())["shape"]
# SmolLM2-360M with each layer's input and q/k/v kept in HBM (at ce9e55b, beside the same shape offloading them).
LAYERS_IN_HBM = json.loads((RESULT.parent / "tpu_grpo_layers_in_hbm.json").read_text())
SHAPES = [
    *json.loads(RESULT.read_text())["shapes"],
    TINYLLAMA_OOM,
    {**LAYERS_IN_HBM["layers_in_hbm"], "shape": "smollm2-360m-b4-layers-in-hbm"},
]
# The float32 tiny test model's log-prob program reserved 3.15 GB where the estimate counts its fp32 logits whole,
# 4.20 GB (as it does, and matches within 1%, for Qwen3 and both SmolLM2 shapes): 27% over, shown part by part in
# bench/chip/README.md and not explained. No one trains it; the rates leave it out for its one steady step too.
EXPLAINED_MISSES = {"tiny-b4"}


def _shape(name: str) -> dict:
    [entry] = [s for s in SHAPES if s["shape"] == name]
    return entry


@pytest.mark.parametrize("entry", SHAPES, ids=[s["shape"] for s in SHAPES])
def test_the_estimate_is_within_15_percent_of_the_measured_peak(entry: dict) -> None:
    row = compare(entry)
    if entry["shape"] in EXPLAINED_MISSES:
        assert row["ratio"] > 1 + TOLERANCE, "the estimate now meets the measurement: drop the exception"
        return
    assert abs(row["ratio"] - 1) <= TOLERANCE, row


@pytest.mark.parametrize("entry", SHAPES, ids=[s["shape"] for s in SHAPES])
def test_what_ran_is_accepted_and_what_ran_out_of_memory_is_refused(entry: dict) -> None:
    estimate = estimate_of(entry)
    if entry["returncode"] == 0:
        assert estimate.verdict in ("fits", "tight"), estimate.message
    else:  # the 4x8 Qwen3-0.6B (its log-prob program) and TinyLlama-1.1B (step 3's layout refresh)
        assert estimate.verdict == "does-not-fit", estimate.message


def test_the_rebuilt_shapes_have_the_parameters_the_run_reported() -> None:
    for entry in SHAPES:
        assert model_shape_of(entry).parameters == entry["parameters"], entry["shape"]


def test_the_qwen3_batch_1_phases_by_hand() -> None:
    """Qwen3-0.6B (596,049,920 parameters, tied, 28 layers, 8 KV heads of 128, vocabulary 151,936) at 1x8, 256+512
    tokens, bf16, jax engine, one v5e chip: each phase worked out here from the shape alone."""
    entry = _shape("qwen3-0.6b-b1")
    w = 596_049_920 * 2  # bf16: params, each moment, reference, and the decode layout (tied: all of it)
    resident = w + 2 * w + w + w
    kv = 8 * (768 + 8) * 28 * 2 * 8 * 128 * 2
    logits = 8 * 768 * 151_936 * 4  # larger than a layer's recompute, so the programs hold the logits alone
    gate_up = 28 * 1024 * 2 * 3072 * 2
    # The train stage keeps each layer's input and q/k/v in HBM for this shape (it fits): 28 layers x 8x768 tokens x
    # (1024 + 16 x 128 + 2 x 8 x 128) bf16 wait beside the update's logits.
    saved = 28 * (8 * 768) * (1024 + 2048 + 2 * 1024) * 2
    phases = {p.name: (p.resident, p.arrays, p.program) for p in estimate_of(entry).phases}
    assert phases == {
        "layout refresh": (resident, w + w, gate_up),
        "rollout": (resident, kv, 0),
        "log-probs": (resident, 0, logits),
        "optimizer sharding": (resident, 2 * w, 0),
        "update": (resident, w, logits + saved),
    }
    # The chip: 8,453,194,240 of arrays at the moments' re-shard (7 w = 8,344,698,880), 5,508,546,560 reserved from
    # the update's program (the logits and the kept layers, 5,495,586,816), held together: 13.96e9 against the
    # update's 12.65e9.
    row = compare(entry)
    assert row["estimated"] == resident + w + logits + saved and row["measured"] == 8_453_194_240 + 5_508_546_560


def test_tinyllama_is_refused_at_the_layout_refresh_where_it_ran_out_of_memory() -> None:
    """TinyLlama-1.1B-shaped (1,170,302,976 parameters, untied): step 3 began its rollout with resident + one parameter
    copy in use and ran out of HBM deriving the fresh decoding layout; the estimate's largest phase is that one, and it
    is over what XLA may allocate of a v5e chip (16,909,336,064) though under its 16 GiB."""
    estimate = estimate_of(_shape("tinyllama-1.1b-b1"))
    w = 1_170_302_976 * 2
    layout = (1_170_302_976 - 49_152 * 2048) * 2  # every matrix but the untied input table
    gate_up = 22 * 2048 * 2 * 5632 * 2
    assert estimate.peak_phase == "layout refresh"
    assert estimate.total_bytes_per_chip == 4 * w + layout + w + layout + gate_up
    assert 16_909_336_064 < estimate.total_bytes_per_chip < 16 * 1024**3
    assert "XLA may allocate 15.7 of them" in estimate.message


def test_keeping_the_layers_in_hbm_costs_what_the_chip_reserved_for_it() -> None:
    """The same 360M shape in one session, offloading as rl.yml does and keeping the four tensors in HBM: the update's
    programs reserved 4,026,286,080 B more, and the estimate adds 32 layers x 4x8x768 tokens x (960 + 960 + 2 x 320)
    x 2 bytes = 4,026,531,840 B to the update's temporaries and nothing to its arrays."""
    kept, offloaded = LAYERS_IN_HBM["layers_in_hbm"], LAYERS_IN_HBM["offloaded"]
    assert layers_in_hbm_of(kept) and not layers_in_hbm_of(offloaded)
    reserved = kept["memory"]["peak_bytes_reserved"] - offloaded["memory"]["peak_bytes_reserved"]
    assert kept["memory"]["peak_bytes_in_use"] == offloaded["memory"]["peak_bytes_in_use"]
    counted = 32 * (4 * 8 * 768) * (960 + 960 + 2 * 320) * 2
    assert estimate_of(kept).per_chip.activations - estimate_of(offloaded).per_chip.activations == counted
    update = {p.name: p for p in estimate_of(kept).phases}["update"]
    update_offloaded = {p.name: p for p in estimate_of(offloaded).phases}["update"]
    assert update.program - update_offloaded.program == counted and update.arrays == update_offloaded.arrays
    assert abs(counted - reserved) / reserved < 0.001
    assert "kept in HBM" in estimate_of(kept).message and "kept in HBM" not in estimate_of(offloaded).message
