"""bench/chip/tpu_correctness.py's verdicts say false when the evidence is what the trainer without its patches gives, and
bench/readme_render/tpu_correctness.py shows each verdict. The evidence here is the shape the chip's run writes."""

from __future__ import annotations

import copy
from typing import Any

from bench.chip.tpu_correctness import engine_verdict
from bench.chip.tpu_correctness_step import TRAIN_RL_CALL, objective_verdict, stop_token_verdict
from bench.readme_render.tpu_correctness import render_tpu_correctness
from tests.trainer import grpo_learner_step
from tests.trainer.rollout.test_stop_token import STOP_TOKEN_COUNTED

# What Tunix's own learner step gives without stop_token.install() (test_stop_token.py's "own" test).
TUNIXS_OWN = {"completion_mask": [[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], "prompt_mask": [[0, 1, 1, 0]] * 4}


def _step(**changes: Any) -> dict[str, Any]:
    metrics = {"completions/empty_fraction": 0.25, "completions/stopped_fraction": 0.75}
    return {"module": "maxtext.trainers.post_train.rl.train_rl", **copy.deepcopy(STOP_TOKEN_COUNTED), "metrics": metrics, **changes}


def _probe(**changes: Any) -> dict[str, Any]:
    return {"is_tunix_subclass": True, "resolved": {**TRAIN_RL_CALL, "kl_loss_mode": "low_var_kl", "epsilon_high": 0.28, **changes}}


def _engine(dtype: str, diff: float, tokens_equal: bool = True, shortfall: float = 0.0) -> dict[str, Any]:
    first = None if tokens_equal else {"row": 1, "token": 6, "engine": 3, "maxtext": 4, "maxtext_top2_margin": shortfall}
    entry = {
        "shape": "tiny",
        "dtype": dtype,
        "rollout": {"max_abs_diff": diff, "logit_scale": 5.0, "argmax_agree": tokens_equal, "positions": [47, 22]},
        "greedy": {"tokens_equal": tokens_equal, "first_disagreement": first, "largest_logit_shortfall": shortfall, "generated": []},
    }
    return {**entry, "verdict": engine_verdict(entry)}


def test_the_stop_token_verdict_is_true_on_the_fixed_step_and_false_on_tunixs_own() -> None:
    assert stop_token_verdict(_step(), grpo_learner_step)["active"]
    assert not stop_token_verdict(_step(**TUNIXS_OWN), grpo_learner_step)["active"]
    assert not stop_token_verdict(_step(metrics={}), grpo_learner_step)["active"]  # masks right, metrics missing


def test_the_objective_verdict_needs_the_estimator_the_upper_clip_and_train_rls_arguments() -> None:
    assert objective_verdict(_probe())["active"]
    assert not objective_verdict(_probe(kl_loss_mode="kl"))["active"]  # Tunix's default: the patch not installed
    assert not objective_verdict({"is_tunix_subclass": True, "resolved": {**TRAIN_RL_CALL, "kl_loss_mode": "low_var_kl"}})["active"]
    assert not objective_verdict(_probe(beta=0.0))["active"]


def test_the_engine_verdict_holds_fp32_to_its_bound_and_lets_bf16_differ_only_by_near_ties() -> None:
    assert _engine("float32", 4e-4)["verdict"]["logits_within_tolerance"]
    assert not _engine("float32", 6e-4)["verdict"]["logits_within_tolerance"]  # 1e-4 x scale 5
    assert not _engine("float32", 1e-5, tokens_equal=False, shortfall=1e-6)["verdict"]["greedy_agrees"]
    assert _engine("bfloat16", 0.1, tokens_equal=False, shortfall=0.03)["verdict"]["greedy_agrees"]
    assert not _engine("bfloat16", 0.1, tokens_equal=False, shortfall=0.5)["verdict"]["greedy_agrees"]


def _result() -> dict[str, Any]:
    engine = [_engine("float32", 1e-5), _engine("bfloat16", 0.1, tokens_equal=False, shortfall=0.03)]
    stop, objective = stop_token_verdict(_step(), grpo_learner_step), objective_verdict(_probe())
    verdicts = {"stop_token_fix_active": stop["active"], "objective_patch_active": objective["active"]}
    return {
        "device_kind": "TPU v5 lite",
        "jax": "0.11.1",
        "trainer_commit": "abc",
        "machine": {"started_at": "2026-12-05T00:00:00+00:00"},
        "wall_s": 100.0,
        "torch_loaded": False,
        "tolerance_relative_to_logit_scale": {"float32": 1e-4, "bfloat16": 2**-4},
        "engine": engine,
        "stop_token": stop,
        "objective": objective,
        "verdicts": verdicts,
    }


def test_the_section_shows_each_verdict_and_a_false_one_as_false() -> None:
    text = render_tpu_correctness(_result())
    assert "stop-token fix active: true" in text and "objective patch active: true" in text
    assert "| tiny | bfloat16 | 0.1 | 5 | 0.312 | true | false | first differs at token 6" in text
    broken = _result()
    broken["verdicts"] = {"stop_token_fix_active": False, "objective_patch_active": False}
    assert "stop-token fix active: false" in render_tpu_correctness(broken)
    assert "objective patch active: false" in render_tpu_correctness(broken)
