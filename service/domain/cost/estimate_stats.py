"""The statistics of an estimate: a prediction interval for one new job's run time from the run times of
earlier jobs like it, on log(seconds) with Student's t.

Run times are positive and spread multiplicatively (a slow host is slow by a factor), so the interval is made
on their logarithms: mean m and sample standard deviation s of the n logs, and the interval for one more job
m +- t(1 - alpha/2, n - 1) x s x sqrt(1 + 1/n), back on seconds by exp. Few jobs give a wide range: with two,
t(0.975, 1) is 12.7. Student's t quantile is computed here (bisection on its CDF through the regularized
incomplete beta function) so the service needs no scipy; tests compare it with scipy.stats.t.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

PREDICTION_LEVEL = 0.95  # the share of new jobs like these the range is meant to hold
SINGLE_JOB_FACTOR = 3.0  # one earlier job says nothing of the spread: its time / 3 to x 3, stated as such
# The least spread assumed on log(seconds): a run's time varies by about 10% from host load alone (in one CI run,
# two cached tiny jobs 1.5% apart around 38.4 s, then one of 32.5 s), and two near-identical earlier jobs cannot
# rule that out. Without it, two jobs that happened to agree gave a range the next one fell outside (a 95% interval
# misses 1 in 20 by design, and the sample spread of two is itself a guess).
MIN_LOG_SD = 0.1


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (Lentz's method)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t (0 < p < 1), to 1e-10 relative."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


@dataclass(frozen=True)
class LogInterval:
    """A central figure and a range, in seconds, from the logs of earlier jobs' seconds."""

    expected: float  # exp(mean of the logs): the geometric mean
    low: float
    high: float
    n: int
    method: str  # in words, for the estimate's basis_detail


def prediction_interval(seconds: Sequence[float], level: float = PREDICTION_LEVEL) -> LogInterval:
    """The range one new job's seconds are expected in, from earlier jobs' (each > 0)."""
    logs = [math.log(max(s, 1e-3)) for s in seconds]
    n = len(logs)
    if n == 0:
        raise ValueError("prediction_interval needs at least one earlier job")
    mean = sum(logs) / n
    if n == 1:
        centre = math.exp(mean)
        method = f"one job: its time / {SINGLE_JOB_FACTOR:g} to x {SINGLE_JOB_FACTOR:g} (one job says nothing of the spread)"
        return LogInterval(centre, centre / SINGLE_JOB_FACTOR, centre * SINGLE_JOB_FACTOR, 1, method)
    sd = max(MIN_LOG_SD, math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1)))
    t = t_quantile(0.5 + level / 2.0, n - 1)
    half = t * sd * math.sqrt(1.0 + 1.0 / n)
    method = (
        f"{level:.0%} prediction interval on log(seconds), Student's t with {n - 1} degrees of freedom ({t:.2f}), "
        f"spread at least {MIN_LOG_SD:g}"
    )
    return LogInterval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, method)
