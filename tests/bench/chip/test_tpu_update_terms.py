"""bench/chip/tpu_update_terms.py on the committed GRPO bench: its terms account for the update's wall time only with
the reference model's forward where it ran (inside the update, or before it once the agreement's read waits for it),
and its 6N MFU is the bench's own."""

from __future__ import annotations

import copy
import json

from bench.chip import tpu_update_terms
from bench.chip.tpu_grpo import REPO, RESULT

GRPO = json.loads((REPO / "bench" / "results" / RESULT).read_text())
PROFILED = [s for s in GRPO["shapes"] if s.get("profile") and s.get("steady")]


def test_every_profiled_update_is_accounted_for_where_its_reference_forward_ran():
    """Inside the update's wall time without the agreement's host read, before it with one: each run's terms leave
    under 8% unexplained counted its way, and the other way would leave over 10% unexplained or over-explained. The
    rest is host time, which moves between runs of the same code: smollm2-135m's was 3.7% at e4531bd's trainer and
    5.7% at 4b647db's (its steady update 0.591 s, then 0.603 s, the device's terms within 1%)."""
    assert PROFILED
    for shape in PROFILED:
        terms = tpu_update_terms.update_terms(shape)
        rest = terms["shares"]["host and dispatch (the rest of the wall time)"]
        assert 0 <= rest < 0.08, (shape["shape"], rest)
        other = copy.deepcopy(shape)
        if terms["reference_forward_inside"]:
            other["agreement"] = {"sampler_trainer/train/logp_diff_mean": {"1": 0.0}}
        else:
            other.pop("agreement")
        flipped = tpu_update_terms.update_terms(other)["shares"]["host and dispatch (the rest of the wall time)"]
        assert abs(flipped) > 0.1, (shape["shape"], flipped)


def test_the_6n_figure_is_the_bench_s_update_mfu():
    for shape in PROFILED:
        assert tpu_update_terms.update_terms(shape)["mfu_6n"] == shape["steady"]["update_mfu"]


def test_the_goal_is_judged_on_the_largest_profiled_shape():
    result = copy.deepcopy(GRPO)
    assert tpu_update_terms.largest(result)["shape"] == max(PROFILED, key=lambda s: s["parameters"])["shape"]
    for shape in result["shapes"]:
        shape.pop("profile", None)
    assert tpu_update_terms.largest(result) is None
