"""The Cochran-Armitage trend test (service/domain/health/reward_trend.py) against a textbook example and
against scipy, and its degenerate cases."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from service.domain.health.reward_trend import StepCount, cochran_armitage, normal_upper_tail


def test_agrestis_malformation_example() -> None:
    """Agresti, Categorical Data Analysis (2nd ed., 2002), the trend test's worked example: infant
    malformation by the mother's alcohol consumption, scores 0, 0.5, 1.5, 4, 7; he reports
    M^2 = (N - 1) r^2 = 6.57, M = 2.56. A linear change of scores leaves the test alone, so they are
    doubled here to be step numbers."""
    present, absent, scores = [48, 38, 5, 1, 1], [17066, 14464, 788, 126, 37], [0, 1, 3, 8, 14]
    test = cochran_armitage([StepCount(s, p, p + a) for s, p, a in zip(scores, present, absent, strict=True)])
    assert test is not None
    total = sum(present) + sum(absent)
    assert round((total - 1) / total * test.z**2, 2) == 6.57
    assert round(test.z, 2) == 2.56 and round(test.p_rise, 4) == 0.0052
    assert (test.rewarded, test.completions, test.steps) == (93, 32574, 5)


@pytest.mark.parametrize("seed", range(5))
def test_equals_the_correlation_over_single_completions_as_scipy_computes_it(seed: int) -> None:
    """z = sqrt(N) r, with r Pearson's correlation of (step, rewarded or not) over all N completions."""
    rng = random.Random(seed)
    counts = []
    for step in range(1, rng.randint(3, 20)):
        n = rng.randint(1, 32)
        counts.append(StepCount(step, rng.randint(0, n), n))
    xs = [c.step for c in counts for _ in range(c.completions)]
    ys = [int(i < c.rewarded) for c in counts for i in range(c.completions)]
    test = cochran_armitage(counts)
    assert test is not None
    expected_z = math.sqrt(len(xs)) * stats.pearsonr(xs, ys).statistic
    assert test.z == pytest.approx(expected_z, rel=1e-9)
    assert test.p_rise == pytest.approx(stats.norm.sf(expected_z), rel=1e-9)


def test_the_normal_tail_matches_scipy() -> None:
    for z in (-3.0, -1.0, 0.0, 0.5, 1.6448536, 2.326348, 4.0):
        assert normal_upper_tail(z) == pytest.approx(stats.norm.sf(z), rel=1e-12)


def test_degenerate_counts_are_no_evidence() -> None:
    assert cochran_armitage([]) is None
    assert cochran_armitage([StepCount(1, 0, 0)]) is None  # a step without completions does not count
    for counts in (
        [StepCount(i, 0, 8) for i in range(1, 9)],  # nothing rewarded at all
        [StepCount(i, 8, 8) for i in range(1, 9)],  # everything rewarded
        [StepCount(4, 3, 8)],
    ):
        test = cochran_armitage(counts)
        assert test is not None and test.z == 0 and test.p_rise == 0.5


def test_halves_and_order() -> None:
    test = cochran_armitage([StepCount(3, 4, 4), StepCount(1, 0, 4), StepCount(2, 2, 4), StepCount(4, 4, 4)])
    assert test is not None
    assert (test.first_step, test.last_step, test.first_rate, test.last_rate) == (1, 4, 0.25, 1.0)
    assert test.z > 0
    falling = cochran_armitage([StepCount(i, 8 - 2 * i, 8) for i in range(1, 5)])
    assert falling is not None and falling.z < 0 and falling.p_rise > 0.5
