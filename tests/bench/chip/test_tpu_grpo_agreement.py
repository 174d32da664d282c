"""The tpu-grpo block tells each shape's sampler-trainer agreement where its run logged it, and nothing where not."""

from __future__ import annotations

import copy
import json

from bench.chip.tpu_grpo import REPO, RESULT
from bench.readme_render.tpu_grpo import render_tpu_grpo

GRPO = json.loads((REPO / "bench" / "results" / RESULT).read_text())


def test_a_shape_that_logged_its_agreement_is_told_with_its_range():
    result = copy.deepcopy(GRPO)
    shape = result["shapes"][1]
    shape["agreement"] = {
        "sampler_trainer/train/logp_diff_mean": {"1": 0.012, "2": 0.015},
        "sampler_trainer/train/logp_diff_max": {"1": 0.4, "2": 0.9},
        "sampler_trainer/train/probs_pearson_corr": {"1": 0.999, "2": 0.998},
    }
    text = render_tpu_grpo(result)
    assert (
        f"{shape['shape']} (bfloat16) mean |Δ log p| 0.0120-0.0150 nats per token over 2 steps, largest 0.900, "
        "probabilities' correlation at least 0.9980" in text
    )


def test_runs_without_it_say_nothing_of_it():
    result = copy.deepcopy(GRPO)
    for shape in result["shapes"]:
        shape.pop("agreement", None)
    assert "Sampler-trainer agreement" not in render_tpu_grpo(result)
