"""The pre-registered learning bench's statistics and decision rule (bench/learning/learning_folds.py).

Rows are paired by id over the same 300 questions in every model; a row's `greedy` and `samples` are
strict outcomes, its `lenient` and `format` blocks the same for the other two scorings. Intervals are
bench/learning/learning_stats.py's paired percentile bootstrap over prompts (fixed seed), McNemar exact on the
greedy outcomes. The rule below is the one committed in bench/preregistration/learning_folds.json
before the first job; tests/bench/learning/test_learning_folds.py checks the two agree.
"""

from __future__ import annotations

from pathlib import Path

from bench.learning import learning_stats

PREREGISTRATION = Path(__file__).resolve().parents[1] / "preregistration" / "learning_folds.json"

SCORINGS = ("strict", "lenient", "format")
TARGET_GAIN = 0.10
TARGET_GAIN_LOW = 0.05
DECISION_RULE = {
    "trained_vs_base": "trained - base >= +10 points of sampled strict accuracy, with its 95% CI's lower bound > +5",
    "trained_vs_control": "trained - control (the one-sided test): its 95% CI's lower bound > 0",
    "trained_vs_peer": "trained's sampled strict accuracy lies inside the 95% CI of peer_trl's",
}
PAIRS = (("trained", "base"), ("control", "base"), ("trained", "control"), ("peer_trl", "base"), ("trained", "peer_trl"))


def scored(rows: list[dict], scoring: str) -> list[dict]:
    """The rows as learning_stats reads them (`id`, `greedy`, `samples`) under one scoring."""
    if scoring == "strict":
        return rows
    return [{"id": r["id"], **r[scoring]} for r in rows]


def decide(summary: dict) -> dict[str, dict]:
    acc, diff = summary["accuracy"]["strict"], summary["differences"]["strict"]
    out = {}
    if "trained-base" in diff:
        tb = diff["trained-base"]["sampled"]
        out["trained_vs_base"] = {"met": tb["difference"] >= TARGET_GAIN and tb["low"] > TARGET_GAIN_LOW}
    if "trained-control" in diff:
        out["trained_vs_control"] = {"met": diff["trained-control"]["sampled"]["low"] > 0}
    if "trained" in acc and "peer_trl" in acc:
        peer, mine = acc["peer_trl"]["sampled"], acc["trained"]["sampled"]["mean"]
        out["trained_vs_peer"] = {"met": peer["low"] <= mine <= peer["high"]}
    return {k: {"rule": DECISION_RULE[k], **v} for k, v in out.items()}


def summarize(models: dict[str, dict]) -> dict:
    summary: dict = {"accuracy": {}, "differences": {}}
    for scoring in SCORINGS:
        rows = {name: scored(m["rows"], scoring) for name, m in models.items()}
        summary["accuracy"][scoring] = {
            name: {
                "greedy": learning_stats.bootstrap_mean([r["greedy"] for r in rs]),
                "sampled": learning_stats.bootstrap_mean([learning_stats.sampled_score(r) for r in rs]),
            }
            for name, rs in rows.items()
        }
        summary["differences"][scoring] = {f"{a}-{b}": learning_stats.compare(rows, a, b) for a, b in PAIRS if a in rows and b in rows}
    summary["decision"] = decide(summary)
    return summary


def print_summary(summary: dict) -> None:
    for name, acc in summary["accuracy"]["strict"].items():
        s = acc["sampled"]
        print(f"  {name}: sampled strict {s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}] (n={s['n']})")
    for pair, d in summary["differences"]["strict"].items():
        s = d["sampled"]
        print(
            f"  {pair}: {s['difference'] * 100:+.1f} points [{s['low'] * 100:+.1f}, {s['high'] * 100:+.1f}], "
            f"greedy McNemar p={d['mcnemar_greedy']['p']:.3g}"
        )
    for criterion, verdict in summary["decision"].items():
        print(f"  {criterion}: {'MET' if verdict['met'] else 'MISSED'} ({verdict['rule']})")
