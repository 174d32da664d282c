"""bench/chip/tpu_update_terms.py on the committed GRPO bench: its terms account for the update's wall time only with
the reference model's forward where it ran (inside the update, or before it once the agreement's read waits for it),
and its 6N MFU is the bench's own."""

from __future__ import annotations

import copy
import json

import pytest

from bench.chip import tpu_update_terms
from bench.chip.tpu_grpo import REPO, RESULT

GRPO = json.loads((REPO / "bench" / "results" / RESULT).read_text())
PROFILED = [s for s in GRPO["shapes"] if s.get("profile") and s.get("steady")]


def test_every_profiled_update_is_accounted_for_where_its_reference_forward_ran():
    """Inside the update's wall time without the agreement's host read, before it with one: each run's terms leave
    under 10% and under 40 ms unexplained counted its way, and the other way would leave over 25% unexplained or
    over-explained. The rest is host time, which holds in milliseconds while the device's part shrinks:
    smollm2-135m's was 3.7% at e4531bd's trainer, 5.7% at 4b647db's (its steady update 0.603 s) and 8.4% at 6f98f53's
    (0.406 s, its layers kept in HBM), 34 ms in the last two."""
    assert PROFILED
    for shape in PROFILED:
        terms = tpu_update_terms.update_terms(shape)
        rest = terms["shares"]["host and dispatch (the rest of the wall time)"]
        assert 0 <= rest < 0.10 and rest * shape["steady"]["update_s"] < 0.040, (shape["shape"], rest)
        other = copy.deepcopy(shape)
        if terms["reference_forward_inside"]:
            other["agreement"] = {"sampler_trainer/train/logp_diff_mean": {"1": 0.0}}
        else:
            other.pop("agreement")
        flipped = tpu_update_terms.update_terms(other)["shares"]["host and dispatch (the rest of the wall time)"]
        assert abs(flipped) > 0.25, (shape["shape"], flipped)


def test_the_6n_figure_is_the_bench_s_update_mfu():
    # The bench's figure is from the unrounded update time, the terms' from the millisecond the result keeps: at a
    # 0.28 s update half a millisecond moves the third digit by up to 0.0007, beside each figure's own rounding.
    for shape in PROFILED:
        assert tpu_update_terms.update_terms(shape)["mfu_6n"] == pytest.approx(shape["steady"]["update_mfu"], abs=0.002)


def test_the_goal_is_judged_on_the_largest_profiled_shape():
    result = copy.deepcopy(GRPO)
    assert tpu_update_terms.largest(result)["shape"] == max(PROFILED, key=lambda s: s["parameters"])["shape"]
    for shape in result["shapes"]:
        shape.pop("profile", None)
    assert tpu_update_terms.largest(result) is None


def test_the_10n_figure_counts_the_forwards_time_beside_their_flops():
    """Outside the update, the forwards' 4N come with their device time: 10N over both is under 10/6 of the 6N figure
    by the forwards' share of the time."""
    for shape in PROFILED:
        terms = tpu_update_terms.update_terms(shape)
        if terms["reference_forward_inside"]:
            assert terms["mfu_10n_with_forwards"] is None
            continue
        wall, forwards = terms["wall_ms"], terms["forwards_before_update_ms"]
        assert terms["mfu_10n_with_forwards"] == pytest.approx(terms["mfu_6n"] * 10 / 6 * wall / (wall + forwards), abs=2e-3)
