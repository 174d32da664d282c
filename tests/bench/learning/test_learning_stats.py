"""bench/learning/learning_stats.py: the paired bootstrap finds a difference planted in fabricated rows (and
covers it at about its nominal rate), exact McNemar agrees with scipy's binomial test, and the
decision rule says met/missed at its edges."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from bench.learning import learning_stats as ls


def _rows(p: float, n: int, rng: np.random.Generator, samples: int = 4) -> list[dict]:
    return [{"id": f"q{i}", "greedy": int(rng.random() < p), "samples": [int(rng.random() < p) for _ in range(samples)]} for i in range(n)]


def test_the_bootstrap_finds_a_planted_difference() -> None:
    rng = np.random.default_rng(1)
    models = {"base": _rows(0.3, 600, rng), "trained": _rows(0.5, 600, rng), "control": _rows(0.3, 600, rng)}
    summary = ls.summarize(models)
    gain = summary["differences"]["trained-base"]["sampled"]
    assert gain["low"] < 0.2 < gain["high"]
    assert gain["low"] > 0.1  # 600 prompts x 4 samples: far from zero
    null = summary["differences"]["control-base"]["sampled"]
    assert null["low"] < 0 < null["high"]
    assert summary["decision"]["trained_vs_control"]["met"]


def test_the_difference_is_the_paired_mean_and_identical_models_give_a_zero_width_interval() -> None:
    result = ls.paired_bootstrap([1, 1, 0, 1], [0, 1, 0, 0], resamples=2000)
    assert result["difference"] == pytest.approx(0.5)
    assert 0 <= result["low"] <= 0.5 <= result["high"] <= 1
    same = ls.paired_bootstrap([1, 0, 1], [1, 0, 1], resamples=2000)
    assert (same["difference"], same["low"], same["high"]) == (0, 0, 0)


def test_the_interval_covers_a_known_difference_at_about_its_nominal_rate() -> None:
    rng = np.random.default_rng(7)
    covered = 0
    trials = 200
    for _ in range(trials):
        a = (rng.random(200) < 0.55).astype(float)
        b = (rng.random(200) < 0.45).astype(float)
        ci = ls.paired_bootstrap(a, b, resamples=1000, seed=int(rng.integers(1 << 30)))
        covered += ci["low"] <= 0.10 <= ci["high"]
    assert 0.88 * trials <= covered <= 0.99 * trials


def test_the_bootstrap_is_fixed_by_its_seed() -> None:
    a, b = [1, 0, 1, 1, 0, 1], [0, 0, 1, 0, 0, 1]
    assert ls.paired_bootstrap(a, b) == ls.paired_bootstrap(a, b)
    assert ls.paired_bootstrap(a, b, seed=1) != ls.paired_bootstrap(a, b, seed=2)


@pytest.mark.parametrize(("a_only", "b_only", "both", "neither"), [(0, 0, 3, 4), (3, 0, 1, 1), (7, 2, 5, 5), (20, 31, 9, 40), (1, 1, 0, 0)])
def test_exact_mcnemar_is_scipys_binomial_test_on_the_discordant_pairs(a_only, b_only, both, neither) -> None:
    a = [1] * a_only + [0] * b_only + [1] * both + [0] * neither
    b = [0] * a_only + [1] * b_only + [1] * both + [0] * neither
    result = ls.mcnemar_exact(a, b)
    assert (result["a_only"], result["b_only"]) == (a_only, b_only)
    expected = 1.0 if a_only + b_only == 0 else binomtest(b_only, a_only + b_only, 0.5).pvalue
    assert result["p"] == pytest.approx(expected, rel=1e-12)


def test_rows_are_paired_by_id_and_must_cover_the_same_prompts() -> None:
    a = [{"id": "x", "greedy": 1, "samples": [1, 1]}, {"id": "y", "greedy": 0, "samples": [0, 0]}]
    b = [{"id": "y", "greedy": 1, "samples": [1, 1]}, {"id": "x", "greedy": 1, "samples": [1, 1]}]
    assert ls.compare({"a": a, "b": b}, "a", "b")["sampled"]["difference"] == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="different prompts"):
        ls.paired(a, [b[0], {**b[1], "id": "z"}])
    with pytest.raises(ValueError, match="duplicate"):
        ls.paired(a, [b[0], b[0]])


def _ci(difference: float, low: float, high: float) -> dict:
    return {"sampled": {"difference": difference, "low": low, "high": high}}


@pytest.mark.parametrize(
    ("gain", "met"), [((0.12, 0.06, 0.18), True), ((0.12, 0.05, 0.18), False), ((0.09, 0.06, 0.12), False), ((0.10, 0.051, 0.2), True)]
)
def test_the_gain_criterion_needs_the_target_and_the_lower_bound(gain, met) -> None:
    decision = ls.decide(_ci(*gain), _ci(0, -0.02, 0.02), _ci(0.1, 0.05, 0.15))
    assert decision["trained_vs_base"]["met"] is met


@pytest.mark.parametrize(
    ("control", "met"),
    [
        ((0.0, -0.02, 0.02), True),
        ((0.029, -0.001, 0.06), True),
        ((0.03, -0.01, 0.07), False),
        ((0.02, 0.001, 0.04), False),
        ((-0.025, -0.06, 0.01), True),
    ],
)
def test_the_control_criterion_needs_a_small_difference_whose_interval_covers_zero(control, met) -> None:
    decision = ls.decide(_ci(0.2, 0.1, 0.3), _ci(*control), _ci(0.1, 0.05, 0.15))
    assert decision["control_vs_base"]["met"] is met


@pytest.mark.parametrize(
    ("versus", "met"), [((0.1, 0.01, 0.2), True), ((-0.1, -0.2, -0.01), True), ((0.05, -0.01, 0.1), False), ((0.05, 0.0, 0.1), False)]
)
def test_trained_vs_control_needs_an_interval_that_excludes_zero(versus, met) -> None:
    decision = ls.decide(_ci(0.2, 0.1, 0.3), _ci(0, -0.02, 0.02), _ci(*versus))
    assert decision["trained_vs_control"]["met"] is met


def test_the_greedy_summary_pairs_each_model_with_the_baseline() -> None:
    base = [{"id": f"q{i}", "greedy": int(i < 10)} for i in range(40)]
    worse = [{"id": f"q{i}", "greedy": int(i < 4)} for i in range(40)]
    summary = ls.summarize_greedy({"base": base, "trained": worse})
    assert summary["accuracy"]["base"]["mean"] == pytest.approx(0.25)
    drop = summary["differences"]["trained-base"]
    assert drop["greedy"]["difference"] == pytest.approx(-0.15)
    assert (drop["mcnemar_greedy"]["a_only"], drop["mcnemar_greedy"]["b_only"]) == (0, 6)
    assert drop["greedy"]["high"] < 0
