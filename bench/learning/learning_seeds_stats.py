"""The seeds bench's statistics and decision rule (bench/learning/learning_seeds.py; issue 53 section 4).

The unit is a training run, not a row: each arm is trained once per seed, and what a seed changes (data order,
sampling) moves an arm's accuracy by more than the row-level intervals of bench/learning/learning_folds_stats.py show. So
each run gives one number, its sampled strict accuracy on fold B's rows (the mean over rows of the row's share
of correct samples), and rljob and peer_trl are compared paired by seed: the seed sets the same data order and
sampling seed on both sides, so a pair shares what the seed sets and nothing else.

Rule (bench/preregistration/learning_seeds.json, committed before any job): the 90% t-interval of the mean of
rljob - peer_trl over the registered seeds is read against a fixed margin of 5 points. The margin does not move
with the number of rows or runs, unlike "inside the peer's interval", which gets harder to meet as rows are added.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from scipy import stats as scipy_stats

from bench.learning import learning_stats

PREREGISTRATION = Path(__file__).resolve().parents[1] / "preregistration" / "learning_seeds.json"

ARMS = ("rljob", "peer_trl")
SEEDS = (1, 2, 3)
CONFIDENCE = 0.90
MARGIN = 0.05  # 5 points of accuracy, as a fraction
PLANNING_POWER = 0.80
MAX_SEEDS = 1000

MATCHED = "matched"
BEHIND = "rljob behind"
AHEAD = "rljob ahead"
CANNOT_TELL = "cannot tell at this many seeds"
INCOMPLETE = "incomplete"
VERDICTS = (MATCHED, BEHIND, AHEAD, CANNOT_TELL)

DECISION_RULE = (
    "d_s = rljob_s - peer_trl_s, the sampled strict accuracy on fold B of the two runs of seed s, for every registered seed; "
    "the 90% t-interval of mean(d) (t with n-1 degrees of freedom, n = the number of seeds). "
    "'matched' if the interval lies within [-5, +5] points (checked first: a difference inside the margin is matched "
    "even where the interval excludes 0, which the summary then says); 'rljob behind' if its upper end is below 0; "
    "'rljob ahead' if its lower end is above 0; otherwise 'cannot tell at this many seeds'"
)
SEEDS_NEEDED_RULE = (
    "with the measured sd of the per-seed differences (and of each arm) taken as the true one: half_width, the least n >= 2 "
    "with t(0.95, n-1) sd / sqrt(n) <= 5 points (fewer seeds can never give a 'matched'); matched_80, the least n with "
    "(t(0.95, n-1) + t(0.90, n-1)) sd / sqrt(n) <= 5 points (the interval then lies within +-5 with about 80% "
    "probability when the true difference is 0); null above 1000"
)


def run_accuracy(rows: Sequence[Mapping]) -> dict[str, float | int]:
    """One run's figures on its evaluated rows: sampled strict (the primary) and greedy strict."""
    if not rows:
        raise ValueError("a run with no evaluated rows has no accuracy")
    return {
        "sampled": sum(learning_stats.sampled_score(r) for r in rows) / len(rows),
        "greedy": sum(r["greedy"] for r in rows) / len(rows),
        "rows": len(rows),
    }


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided `confidence` quantile of Student's t with `df` degrees of freedom."""
    return float(scipy_stats.t.ppf(1 - (1 - confidence) / 2, df))


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, float | int | None]:
    """mean(values) and its t-interval; sd is the sample sd (n - 1). One value has no sd and no interval."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    if n < 2:
        return {"n": n, "mean": mean, "sd": None, "half_width": None, "low": None, "high": None}
    sd = statistics.stdev(values)
    half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "half_width": half, "low": mean - half, "high": mean + half}


def welch_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, float | int]:
    """mean(a) - mean(b) with Welch's t-interval: the arms read as unpaired samples (what a comparison that shares
    nothing between its arms can say), beside the paired rule's interval."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if va + vb > 0 else float(len(a) + len(b) - 2)
    mean = statistics.fmean(a) - statistics.fmean(b)
    half = float(scipy_stats.t.ppf(1 - (1 - confidence) / 2, df)) * se
    return {"n": min(len(a), len(b)), "mean": mean, "se": se, "df": df, "half_width": half, "low": mean - half, "high": mean + half}


def verdict(low: float, high: float, margin: float = MARGIN) -> str:
    if -margin <= low and high <= margin:
        return MATCHED
    if high < 0:
        return BEHIND
    if low > 0:
        return AHEAD
    return CANNOT_TELL


def seeds_needed(sd: float | None, margin: float = MARGIN, confidence: float = CONFIDENCE, power: float | None = None) -> int | None:
    """The least number of seeds (>= 2) whose t-interval's half-width is within `margin` (`power` None), or whose
    interval lies within +-margin with probability about `power` when the true difference is 0; None where more
    than MAX_SEEDS (or no sd)."""
    if sd is None or math.isnan(sd):
        return None
    for n in range(2, MAX_SEEDS + 1):
        width = t_quantile(confidence, n - 1) + (t_quantile(power, n - 1) if power is not None else 0.0)
        if width * sd / math.sqrt(n) <= margin:
            return n
    return None


def _seed_counts(sd: float | None) -> dict[str, int | None]:
    return {"half_width": seeds_needed(sd), "matched_80": seeds_needed(sd, power=PLANNING_POWER)}


def decide(per_seed: Mapping[str, Mapping[int, float]], seeds: Sequence[int] = SEEDS) -> dict:
    """The rule on each arm's per-seed primary figure (a fraction): the verdict over the registered `seeds`, the
    per-seed differences, each arm's spread and the seed counts that spread asks for."""
    missing = {arm: [s for s in seeds if s not in per_seed.get(arm, {})] for arm in ARMS}
    paired = [s for s in seeds if all(s not in m for m in missing.values())]
    diffs = {s: per_seed["rljob"][s] - per_seed["peer_trl"][s] for s in paired}
    out: dict = {
        "rule": DECISION_RULE,
        "seeds": list(seeds),
        "differences": diffs,
        "spread": {},
        "seeds_needed_rule": SEEDS_NEEDED_RULE,
    }
    for arm in ARMS:
        values = [per_seed[arm][s] for s in seeds if s in per_seed.get(arm, {})]
        if values:
            spread = t_interval(values)
            out["spread"][arm] = {**spread, "seeds_needed": _seed_counts(spread["sd"])}
    if len(diffs) >= 2:
        interval = t_interval(list(diffs.values()))
        out["difference"] = {**interval, "seeds_needed": _seed_counts(interval["sd"])}
        # reported beside, not decided on: the same seeds' runs read as if they shared nothing
        out["unpaired"] = welch_interval([per_seed["rljob"][s] for s in paired], [per_seed["peer_trl"][s] for s in paired])
    if any(missing.values()):
        out["verdict"] = INCOMPLETE
        out["missing"] = {arm: m for arm, m in missing.items() if m}
        return out
    d = out["difference"]
    out["verdict"] = verdict(d["low"], d["high"])
    out["interval_excludes_zero"] = d["low"] > 0 or d["high"] < 0
    return out


def summarize(results: Mapping, seeds: Sequence[int] = SEEDS) -> dict:
    """Per run its accuracy, base's, and the decision, from bench/results/learning_seeds.json's records."""
    base_rows = results.get("base", {}).get("rows")
    base_ids = sorted(r["id"] for r in base_rows) if base_rows else None
    runs: dict[str, dict[int, dict]] = {}
    for arm in ARMS:
        for seed, run in results.get("runs", {}).get(arm, {}).items():
            if not run.get("rows"):
                continue
            if base_ids is not None and sorted(r["id"] for r in run["rows"]) != base_ids:
                raise ValueError(f"{arm} seed {seed} was evaluated on other rows than base")
            runs.setdefault(arm, {})[int(seed)] = run_accuracy(run["rows"])
    summary: dict = {"base": run_accuracy(base_rows) if base_rows else None, "runs": runs}
    summary["decision"] = decide({arm: {s: a["sampled"] for s, a in by_seed.items()} for arm, by_seed in runs.items()}, seeds)
    extra = {arm: sorted(set(by_seed) - set(seeds)) for arm, by_seed in runs.items()}
    if any(extra.values()):
        summary["exploratory_seeds"] = {arm: s for arm, s in extra.items() if s}
    return summary


def _points(x: float | None, sign: str = "+") -> str:
    return "-" if x is None else f"{x * 100:{sign}.1f}"


def print_summary(summary: Mapping) -> None:
    if summary.get("base"):
        print(f"  base: sampled strict {summary['base']['sampled'] * 100:.1f}% on {summary['base']['rows']} rows")
    for arm, by_seed in summary["runs"].items():
        cells = ", ".join(f"seed {s} {a['sampled'] * 100:.1f}%" for s, a in sorted(by_seed.items()))
        print(f"  {arm}: {cells}")
    decision = summary["decision"]
    for arm, spread in decision["spread"].items():
        sd, needed = _points(spread["sd"], ""), spread["seeds_needed"]
        print(f"  {arm}: mean {spread['mean'] * 100:.1f}%, sd over seeds {sd} points, seeds for +-5: {needed}")
    if "difference" in decision:
        d = decision["difference"]
        print(
            f"  rljob - peer_trl: {_points(d['mean'])} points, 90% t-interval [{_points(d['low'])}, {_points(d['high'])}], "
            f"sd {_points(d['sd'], '')}, seeds for +-5: {d['seeds_needed']}"
        )
    excludes = " (the interval excludes 0)" if decision.get("interval_excludes_zero") and decision["verdict"] == MATCHED else ""
    print(f"  verdict: {decision['verdict']}{excludes}")
