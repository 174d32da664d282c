"""The exploratory loss_agg_mode run's statistics, verdict and README rendering (bench/learning/loss_agg_explore.py,
bench/readme_render/loss_agg_explore.py), on synthetic rows."""

from __future__ import annotations

from typing import Any

import pytest

from bench.learning import loss_agg_explore as lae
from bench.readme_render.loss_agg_explore import render_loss_agg_explore


def _rows(correct_ids: set[int], n: int = 60) -> list[dict[str, Any]]:
    def block(ok: bool) -> dict[str, Any]:
        return {"greedy": int(ok), "samples": [int(ok)] * 4}

    return [
        {"id": f"r{i}", "question": f"q{i}", **block(i in correct_ids), "lenient": block(i in correct_ids), "format": block(True)}
        for i in range(n)
    ]


def _steps(norm: float | None) -> list[dict[str, Any]]:
    values = [
        {"reward_mean": 0.1 * s, "kl": 0.01 * s, **({"actor/train/grad_norm": norm * s} if norm is not None else {})} for s in range(1, 7)
    ]
    return [{"step": s, "time": "t", "values": v} for s, v in enumerate(values, 1)]


def _result(candidate_ids: set[int], default_ids: set[int], norms: tuple[float | None, float | None]) -> dict[str, Any]:
    rows = {lae.CANDIDATE: _rows(candidate_ids), lae.DEFAULT: _rows(default_ids)}
    steps = {lae.CANDIDATE: _steps(norms[0]), lae.DEFAULT: _steps(norms[1])}
    training = {m: lae.training_summary(s, 2.5) for m, s in steps.items()}
    arms = {
        m: {"job_id": f"rl-{i}", "phase": "SUCCEEDED", "train_seconds": 90.0, "training": training[m], "train_steps": steps[m]}
        for i, m in enumerate(lae.MODES)
    }
    return {"steps": 6, "arms": arms, "summary": lae.summarize(rows, training)}


def test_the_difference_is_token_mean_minus_the_default_paired_by_row() -> None:
    result = _result(set(range(30)), set(range(6)), (10.0, 1.0))
    d = result["summary"]["difference"]
    assert d["sampled"]["difference"] == pytest.approx(24 / 60)
    assert d["greedy"]["difference"] == pytest.approx(24 / 60)
    assert d["mcnemar_greedy"]["a_only"] == 24 and d["mcnemar_greedy"]["b_only"] == 0
    assert result["summary"]["grad_norm_ratio"] == pytest.approx(10.0)
    assert result["arms"][lae.CANDIDATE]["training"]["grad_norm_key"] == "actor/train/grad_norm"
    # norms 1..6 (default) and 10..60 (token-mean) against a threshold of 2.5
    assert result["arms"][lae.DEFAULT]["training"]["clipped_steps"] == 4
    assert result["arms"][lae.CANDIDATE]["training"]["clipped_steps"] == 6
    assert "above the clipping threshold 2.5 (so clipped to it) in 4 of 6 steps" in render_loss_agg_explore(result)


@pytest.mark.parametrize(
    ("candidate", "default", "supported"),
    [
        (set(range(30)), set(range(6)), lae.CANDIDATE),
        (set(range(6)), set(range(30)), lae.DEFAULT),
        (set(range(10)), set(range(1, 11)), "cannot tell"),
    ],
)
def test_the_verdict_follows_the_interval(candidate: set[int], default: set[int], supported: str) -> None:
    result = _result(candidate, default, (2.0, 1.0))
    assert result["summary"]["supported"] == supported
    text = render_loss_agg_explore(result)
    if supported == "cannot tell":
        assert "cannot tell" in text and "support" not in text.split("cannot tell")[-1]
    else:
        assert f"the data support `{supported}`" in text


def test_the_rendering_carries_the_figures_and_says_when_no_gradient_norm_was_logged() -> None:
    text = render_loss_agg_explore(_result(set(range(30)), set(range(6)), (None, None)))
    assert "sampled strict +40.0 points" in text
    assert "no gradient norm among the job's metrics" in text and "not available (no gradient norm logged)" in text
    assert "50.0% [" in text and "10.0% [" in text
    assert "mean reward 0.30 over the first 5 steps and 0.40 over the last 5; mean KL to the reference over the last 5 steps 0.040" in text


def test_the_tensorboard_actor_scalars_fill_the_steps_the_service_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"actor/train/grad_norm": {1: 0.05, 2: 3.0}, "actor/train/kl": {1: 0.0, 2: 0.2}, "rewards/train/mean": {0: 9.0}}
    monkeypatch.setattr(lae, "read_scalars", lambda root: table)
    steps = [{"step": 1, "time": "t", "values": {"reward_mean": 0.5}}, {"step": 2, "time": "t", "values": {"reward_mean": 0.25}}]
    arms = {lae.DEFAULT: {"run_uri": "/run", "train_steps": steps}}
    lae.add_tensorboard(arms, {lae.DEFAULT: 0.1})
    t = arms[lae.DEFAULT]["training"]
    assert (t["grad_norm_key"], t["grad_norm_mean"], t["clipped_steps"]) == ("actor/train/grad_norm", pytest.approx(1.525), 1)
    assert arms[lae.DEFAULT]["train_steps_merged"][1]["values"]["kl"] == 0.2
    assert arms[lae.DEFAULT]["train_steps"][1]["values"] == {"reward_mean": 0.25}  # the service's record is kept as it was
    assert t["reward_first5"] == pytest.approx(0.375)
