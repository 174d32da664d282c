"""Whether the rate of rewarded completions rises over train steps: the Cochran–Armitage test.

Each step i contributes k_i rewarded completions out of n_i, scored by its step number t_i. The
statistic is T = sum t_i (k_i - n_i p), with p = sum k / sum n the pooled rate; under "the rate is
the same at every step", T has mean 0 and variance p (1 - p) (sum n_i t_i^2 - (sum n_i t_i)^2 / N)
(Armitage 1955, "Tests for linear trends in proportions and frequencies", Biometrics 11:375; the
form in Agresti, Categorical Data Analysis, 3rd ed., section 5.3.5). z = T / sqrt(var) is compared
with the standard normal, one-sided: only a rise counts as evidence of learning.

Pure Python (the service does not import scipy): the normal tail is math.erfc.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StepCount:
    step: int
    rewarded: int
    completions: int


@dataclass(frozen=True)
class TrendTest:
    z: float
    p_rise: float  # one-sided p-value of "the rate rises with the step"
    steps: int  # steps with completions that entered the test
    first_step: int
    last_step: int
    rewarded: int
    completions: int
    first_rate: float  # the rewarded rate of the first and the last half of those steps (for messages)
    last_rate: float


def normal_upper_tail(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def cochran_armitage(counts: Sequence[StepCount]) -> TrendTest | None:
    """The test over the steps that had completions; None when there are none. A pooled rate of 0
    or 1, or a single step, leaves no variance to test against: z = 0, p = 0.5 (no evidence)."""
    rows = sorted((c for c in counts if c.completions > 0), key=lambda c: c.step)
    if not rows:
        return None
    total = sum(r.completions for r in rows)
    rewarded = sum(r.rewarded for r in rows)
    rate = rewarded / total
    statistic = sum(r.step * (r.rewarded - r.completions * rate) for r in rows)
    spread = sum(r.completions * r.step**2 for r in rows) - sum(r.completions * r.step for r in rows) ** 2 / total
    variance = rate * (1 - rate) * spread
    z = statistic / math.sqrt(variance) if variance > 1e-12 else 0.0
    half = len(rows) // 2 or 1
    early, late = rows[:half], rows[-half:]
    return TrendTest(
        z=z,
        p_rise=normal_upper_tail(z),
        steps=len(rows),
        first_step=rows[0].step,
        last_step=rows[-1].step,
        rewarded=rewarded,
        completions=total,
        first_rate=sum(r.rewarded for r in early) / max(1, sum(r.completions for r in early)),
        last_rate=sum(r.rewarded for r in late) / max(1, sum(r.completions for r in late)),
    )
