"""The learning benchmark's statistics and decision rule: pure functions of per-prompt outcomes.

Each evaluated model has, per held-out prompt, a greedy outcome (0/1) and a few sampled outcomes
(0/1 each). Models are compared over the same prompts, paired by prompt id:

- `paired_bootstrap`: the mean per-prompt difference of two models' scores and its percentile
  bootstrap interval, resampling prompts (not samples) with replacement, from a fixed seed;
- `mcnemar_exact`: the exact (binomial) McNemar test on paired 0/1 outcomes: under "no difference"
  the discordant pairs split 50/50;
- `decide`: the decision rule, fixed before the run (see DECISION_RULE).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20261201
CONFIDENCE = 0.95
# The decision rule, in accuracy points (fractions here), written down before the bench was run.
TARGET_GAIN = 0.10  # trained - base must be at least this ...
TARGET_GAIN_LOW = 0.05  # ... with the CI's lower bound above this
CONTROL_BAND = 0.03  # |control - base| below this, with its CI covering 0
DECISION_RULE = {
    "trained_vs_base": f"trained - base >= +{TARGET_GAIN * 100:.0f} points (sampled accuracy) and its 95% CI's "
    f"lower bound > +{TARGET_GAIN_LOW * 100:.0f} points",
    "control_vs_base": f"control - base within ±{CONTROL_BAND * 100:.0f} points (exclusive) and its 95% CI covers 0",
    "trained_vs_control": "trained - control: its 95% CI excludes 0",
}


def sampled_score(row: dict) -> float:
    """A prompt's sampled accuracy: the mean of its sampled outcomes."""
    return sum(row["samples"]) / len(row["samples"])


def paired(a: Sequence[dict], b: Sequence[dict]) -> list[tuple[dict, dict]]:
    """The rows of two models paired by prompt id; both must cover the same prompts."""
    by_id = {row["id"]: row for row in b}
    if len(by_id) != len(b) or len({row["id"] for row in a}) != len(a):
        raise ValueError("duplicate prompt ids")
    if set(by_id) != {row["id"] for row in a}:
        raise ValueError("the two models were evaluated on different prompts")
    return [(row, by_id[row["id"]]) for row in a]


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> dict:
    """mean(a - b) over paired prompts and its percentile bootstrap interval over prompts."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if diff.ndim != 1 or len(diff) == 0 or len(a) != len(b):
        raise ValueError("need two equally long, non-empty sequences of per-prompt scores")
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(resamples, len(diff)))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return {"difference": float(diff.mean()), "low": float(low), "high": float(high), "n": len(diff), "resamples": resamples, "seed": seed}


def bootstrap_mean(values: Sequence[float], **kw) -> dict:
    """One model's mean score and its bootstrap interval (the difference from an all-zero model)."""
    result = paired_bootstrap(values, [0.0] * len(values), **kw)
    return {"mean": result.pop("difference"), **result}


def mcnemar_exact(a: Sequence[int], b: Sequence[int]) -> dict:
    """Exact two-sided McNemar test on paired 0/1 outcomes: b_only ~ Binomial(b_only + a_only, 1/2)."""
    if len(a) != len(b):
        raise ValueError("paired outcomes must be equally long")
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    n = a_only + b_only
    tail = sum(math.comb(n, k) for k in range(min(a_only, b_only) + 1)) / 2**n
    return {"a_only": a_only, "b_only": b_only, "p": min(1.0, 2 * tail)}


def compare(models: dict[str, list[dict]], first: str, second: str) -> dict:
    """first - second: the bootstrap of sampled accuracy and McNemar on greedy outcomes."""
    pairs = paired(models[first], models[second])
    return {
        "sampled": paired_bootstrap([sampled_score(x) for x, _ in pairs], [sampled_score(y) for _, y in pairs]),
        "greedy": paired_bootstrap([x["greedy"] for x, _ in pairs], [y["greedy"] for _, y in pairs]),
        "mcnemar_greedy": mcnemar_exact([x["greedy"] for x, _ in pairs], [y["greedy"] for _, y in pairs]),
    }


def decide(trained_base: dict, control_base: dict, trained_control: dict) -> dict[str, dict]:
    """Each criterion of DECISION_RULE met or not, from the sampled-accuracy bootstraps of `compare`."""
    tb, cb, tc = trained_base["sampled"], control_base["sampled"], trained_control["sampled"]
    return {
        "trained_vs_base": {
            "rule": DECISION_RULE["trained_vs_base"],
            "met": tb["difference"] >= TARGET_GAIN and tb["low"] > TARGET_GAIN_LOW,
        },
        "control_vs_base": {
            "rule": DECISION_RULE["control_vs_base"],
            "met": abs(cb["difference"]) < CONTROL_BAND and cb["low"] <= 0 <= cb["high"],
        },
        "trained_vs_control": {"rule": DECISION_RULE["trained_vs_control"], "met": tc["low"] > 0 or tc["high"] < 0},
    }


def summarize(models: dict[str, list[dict]]) -> dict:
    """Everything the README reports, from the rows of `base`, `trained` and `control` (those present)."""
    accuracy = {
        name: {"greedy": bootstrap_mean([r["greedy"] for r in rows]), "sampled": bootstrap_mean([sampled_score(r) for r in rows])}
        for name, rows in models.items()
    }
    wanted = [("trained", "base"), ("control", "base"), ("trained", "control")]
    differences = {f"{a}-{b}": compare(models, a, b) for a, b in wanted if a in models and b in models}
    summary = {"accuracy": accuracy, "differences": differences}
    if len(differences) == len(wanted):
        summary["decision"] = decide(*(differences[f"{a}-{b}"] for a, b in wanted))
    return summary


def summarize_greedy(models: dict[str, list[dict]], baseline: str = "base") -> dict:
    """Greedy-only accuracy per model and each model's paired difference from `baseline` (a
    no-regression check: rows need only `id` and `greedy`)."""
    differences = {}
    for name in (n for n in models if n != baseline):
        pairs = paired(models[name], models[baseline])
        a, b = [x["greedy"] for x, _ in pairs], [y["greedy"] for _, y in pairs]
        differences[f"{name}-{baseline}"] = {"greedy": paired_bootstrap(a, b), "mcnemar_greedy": mcnemar_exact(a, b)}
    return {"accuracy": {name: bootstrap_mean([r["greedy"] for r in rows]) for name, rows in models.items()}, "differences": differences}
