"""bench/chip/tpu_update_terms.py on the committed GRPO bench: its terms account for the update's wall time only with
the reference model's forward inside it, and its 6N MFU is the bench's own."""

from __future__ import annotations

import copy
import json

from bench.chip import tpu_update_terms
from bench.chip.tpu_grpo import REPO, RESULT

GRPO = json.loads((REPO / "bench" / "results" / RESULT).read_text())
PROFILED = [s for s in GRPO["shapes"] if s.get("profile") and s.get("steady")]


def test_every_profiled_update_is_accounted_for_with_the_reference_forward_inside_it():
    assert PROFILED
    for shape in PROFILED:
        terms = tpu_update_terms.update_terms(shape)
        rest = terms["shares"]["host and dispatch (the rest of the wall time)"]
        assert 0 <= rest < 0.03, (shape["shape"], rest)
        without = terms["shares"]["reference model's forward"]
        assert rest + without > 0.1  # counted outside the update, the forward's time would leave this much unexplained


def test_the_6n_figure_is_the_bench_s_update_mfu():
    for shape in PROFILED:
        assert tpu_update_terms.update_terms(shape)["mfu_6n"] == shape["steady"]["update_mfu"]


def test_the_goal_is_judged_on_the_largest_profiled_shape():
    result = copy.deepcopy(GRPO)
    assert tpu_update_terms.largest(result)["shape"] == max(PROFILED, key=lambda s: s["parameters"])["shape"]
    for shape in result["shapes"]:
        shape.pop("profile", None)
    assert tpu_update_terms.largest(result) is None
