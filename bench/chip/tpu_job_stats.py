"""The chip learning bench's rule (bench/preregistration/tpu_learning_arith.json), implemented once.

A run's number is its export's sampled accuracy on arith-b (the primary reward function's `sampled` score of its
export eval, on the chip). Trained and control runs of one seed train on the same rows in the same order (the seed
sets the data order), so they pair by seed: c_s = trained_s - control_s; b_s = trained_s - base. Each mean gets a
95% t-interval over the seeds (bench/learning/learning_seeds_stats.py's t_interval).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.learning.learning_seeds_stats import t_interval

REPO = Path(__file__).resolve().parents[2]
PREREGISTRATION = REPO / "bench" / "preregistration" / "tpu_learning_arith.json"
CONFIDENCE = 0.95
INCOMPLETE = "incomplete"


def registered_seeds(result: dict[str, Any] | None = None) -> list[int]:
    """The seeds of the registration a result follows (the arithmetic task's where it names none)."""
    registration = REPO / result["registration"] if result and result.get("registration") else PREREGISTRATION
    seeds: list[int] = json.loads(registration.read_text())["seeds"]
    return seeds


def sampled(run: dict[str, Any] | None) -> float | None:
    """A run's export sampled accuracy, or None until its export eval SUCCEEDED."""
    scores = ((run or {}).get("export_eval") or {}).get("scores")
    return scores["sampled"]["value"] if scores and run and run.get("phase") == "SUCCEEDED" else None


def _words(low: float | None, high: float | None, ahead: str, behind: str) -> str:
    if low is not None and low > 0:
        return ahead
    if high is not None and high < 0:
        return behind
    return "cannot tell at this many seeds"


def decide(result: dict[str, Any]) -> dict[str, Any]:
    """Both comparisons of the rule, with the verdict 'incomplete' until every registered seed has both runs."""
    runs, seeds = result.get("runs") or {}, registered_seeds(result)
    base = ((result.get("base") or {}).get("scores") or {}).get("sampled", {}).get("value")
    trained = {s: sampled(runs.get(f"trained/{s}")) for s in seeds}
    control = {s: sampled(runs.get(f"control/{s}")) for s in seeds}
    paired = [s for s in seeds if trained[s] is not None and control[s] is not None]
    complete = len(paired) == len(seeds) and base is not None
    out: dict[str, Any] = {"seeds": seeds, "evaluated_pairs": paired, "base": base, "complete": complete}
    if paired:
        c = t_interval([trained[s] - control[s] for s in paired], CONFIDENCE)  # type: ignore[operator]
        out["vs_control"] = {**c, "verdict": _words(c["low"], c["high"], "learned beyond the control", "no better than the control")}
    for key, arm, ahead, behind in (
        ("vs_base", trained, "better than base", "worse than base"),
        ("control_vs_base", control, "the control better than base", "the control worse than base"),
    ):
        with_base = [s for s in seeds if arm[s] is not None] if base is not None else []
        if with_base:
            b = t_interval([arm[s] - base for s in with_base], CONFIDENCE)  # type: ignore[operator]
            out[key] = {**b, "verdict": _words(b["low"], b["high"], ahead, behind)}
    if not complete:
        for key in ("vs_control", "vs_base", "control_vs_base"):
            if key in out:
                out[key]["verdict"] = f"{INCOMPLETE} (exploratory: {out[key]['verdict']})"
    return out


def cost_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The registered summary: the trained runs' mean chip-seconds and dollars over mean(b) in points, or 'no gain
    established' while the vs_base interval's lower end is not above 0."""
    rows = cost_per_point(result)
    decided = decide(result)
    found = decided.get("vs_base")
    if not rows or found is None or found["low"] is None or found["low"] <= 0:
        return {"established": False, "why": "no gain established" if rows else "no trained run evaluated yet", "runs": len(rows)}
    points = 100 * found["mean"]
    chip_s = sum(r["chip_s"] for r in rows) / len(rows)
    usd = sum(r["cost_usd"] or 0.0 for r in rows) / len(rows)
    return {"established": True, "runs": len(rows), "points": points, "chip_s_per_point": chip_s / points, "usd_per_point": usd / points}


def cost_per_point(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per trained run: its training job's chip-seconds and dollars over its points gained on base."""
    base = ((result.get("base") or {}).get("scores") or {}).get("sampled", {}).get("value")
    rows = []
    for name, run in sorted((result.get("runs") or {}).items()):
        value = sampled(run)
        if run["arm"] != "trained" or value is None or base is None:
            continue
        points = 100 * (value - base)
        chip_s = 3600 * (run.get("chip_hours") or 0.0)
        gain = points > 0
        rows.append(
            {
                "run": name,
                "points": points,
                "chip_s": chip_s,
                "cost_usd": run.get("cost_usd"),
                "chip_s_per_point": chip_s / points if gain else None,
                "usd_per_point": (run["cost_usd"] / points) if gain and run.get("cost_usd") is not None else None,
            }
        )
    return rows
