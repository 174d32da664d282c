"""bench/learning/README.md's passage on the pre-registered learning bench (bench/learning/learning_folds.py), from
bench/results/learning_folds.json and bench/preregistration/learning_folds.json. A partial result file
(an arm not yet run) renders as partial and says what is missing."""

from __future__ import annotations

import json
from typing import Any

from bench.learning.learning_folds_stats import DECISION_RULE, PREREGISTRATION
from bench.readme_render.common import duration, where

MODELS = ("base", "trained", "control", "peer_trl")
ABOUT = {
    "base": "SmolLM2-135M-Instruct (dequantised Q4_1), not trained",
    "trained": "rljob GRPO, reward arith_correct",
    "control": "rljob GRPO, random 0/1 reward at base's rate",
    "peer_trl": "TRL GRPOTrainer, reward arith_correct",
}


def _pct(d: dict[str, Any]) -> str:
    return f"{d['mean'] * 100:.1f}% [{d['low'] * 100:.1f}, {d['high'] * 100:.1f}]"


def _pts(d: dict[str, Any]) -> str:
    return f"{d['difference'] * 100:+.1f} [{d['low'] * 100:+.1f}, {d['high'] * 100:+.1f}]"


def _arm_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    for arm, record in results.get("arms", {}).items():
        parts = []
        for fold, run in record["folds"].items():
            train = run.get("train") or []
            first = [p["reward_mean"] for p in train[:5] if p.get("reward_mean") is not None]
            last = [p["reward_mean"] for p in train[-5:] if p.get("reward_mean") is not None]
            trend = (
                (f", mean reward {sum(first) / len(first):.2f} over its first 5 steps and {sum(last) / len(last):.2f} over its last 5")
                if first and last
                else ""
            )
            seconds = run.get("train_seconds")
            job = f"job `{run['job_id']}`, " if "job_id" in run else ""
            parts.append(f"fold {fold}: {job}{run['phase']}, {len(train)} steps{f' in {duration(seconds)}' if seconds else ''}{trend}")
        lines.append(f"- `{arm}` ({where(record.get('machine'))}): " + "; ".join(parts) + ".")
    return lines


def render_learning_folds(results: dict[str, Any]) -> str:
    pre = json.loads(PREREGISTRATION.read_text())
    grpo, summary = pre["grpo"], results.get("summary") or {}
    acc = summary.get("accuracy", {})
    present = [m for m in MODELS if m in acc.get("strict", {})]
    missing = [m for m in MODELS if m not in present]
    lines = [
        "Pre-registered in bench/preregistration/learning_folds.json (committed before the first job, with the "
        f"decision rule, fold and spec hashes and the re-run policy); base measured first "
        f"({where(results.get('machine', {}).get('base'))}). "
        f"Task: all 300 one-digit questions with +, - and *, two folds split by fact (bench/learning/arith_folds.py, folds "
        f"{', '.join(f'{f} `{h}`' for f, h in pre['fold_hashes'].items())}); every trained model is scored on the fold "
        "it did not train on. "
        f"GRPO: {pre['steps']} steps of {grpo['batch_size']} prompts x {grpo['num_generations']} completions, learning rate "
        f"{grpo['learning_rate']:g}, beta {grpo['beta']} ({grpo['kl_estimator']}), temperature {grpo['temperature']}, top-k "
        f"{grpo['top_k']}, at most {grpo['max_target_length'] - grpo['max_prefill_predict_length']} new tokens. Evaluation: "
        "greedy plus 8 samples per row at the training temperature from fixed seeds, every completion kept; 95% paired "
        "bootstrap CIs over the 300 rows, exact McNemar on greedy outcomes.",
        "",
        "| model | what | sampled strict | greedy strict | sampled lenient | sampled format |",
        "|---|---|---|---|---|---|",
    ]
    for m in present:
        lines.append(
            f"| `{m}` | {ABOUT[m]} | {_pct(acc['strict'][m]['sampled'])} | {_pct(acc['strict'][m]['greedy'])} | "
            f"{_pct(acc['lenient'][m]['sampled'])} | {_pct(acc['format'][m]['sampled'])} |"
        )
    diffs = summary.get("differences", {})
    if diffs.get("strict"):
        lines += [
            "",
            "| difference (points) | sampled strict | greedy McNemar p | sampled lenient | sampled format |",
            "|---|---|---|---|---|",
        ]
        for pair, d in diffs["strict"].items():
            lines.append(
                f"| {pair} | {_pts(d['sampled'])} | {d['mcnemar_greedy']['p']:.3g} | "
                f"{_pts(diffs['lenient'][pair]['sampled'])} | {_pts(diffs['format'][pair]['sampled'])} |"
            )
    lines += ["", "Decision rule as registered, and the verdict:"]
    decision = summary.get("decision", {})
    for key, rule in DECISION_RULE.items():
        verdict = decision.get(key)
        state = "not decided: a model it needs is missing" if verdict is None else ("**met**" if verdict["met"] else "**missed**")
        lines.append(f"- {rule}: {state}")
    if missing:
        lines += ["", f"Not measured yet: {', '.join(f'`{m}`' for m in missing)} (this file is partial)."]
    if results.get("arms"):
        lines += ["", "Runs:", *_arm_lines(results)]
        kl = _final_kl(results)
        lines += [
            "",
            "What the intervals cover: each model above is one training run per fold, so the intervals are over the 300 "
            "evaluation rows and leave out how much a second training run (another seed) would differ. A difference "
            "between two trained arms therefore cannot tell a defect in one of them from run-to-run variation; that "
            "needs several seeds per arm (not pre-registered, not run)."
            + (f" Mean KL to the reference over each arm's last 5 steps, both folds: {kl}." if kl else ""),
        ]
    return "\n".join(lines)


def _final_kl(results: dict[str, Any]) -> str:
    """How far each arm's policy had moved from the reference when training ended, as its trainer logged it."""
    parts = []
    for arm, record in results.get("arms", {}).items():
        values = [p["kl"] for run in record["folds"].values() for p in (run.get("train") or [])[-5:] if p.get("kl") is not None]
        if values:
            parts.append(f"`{arm}` {sum(values) / len(values):.3f}")
    return ", ".join(parts)


def render_learning_folds_eval_check(result: dict[str, Any]) -> str:
    """bench/learning/learning_folds_eval_check.py's comparison of one eval job with the recorded in-process evaluation."""
    agreement, evals = result["agreement"], result["eval_job"]["evals"]
    (fold, record), *_ = evals.items()
    suite = record["suite"]

    def pair(scoring: str, kind: str) -> str:
        c = agreement[scoring][kind]
        verdict = "each inside the other's 95% CI" if c["each_inside_the_others_ci"] else "**not** each inside the other's 95% CI"
        return f"{_pct(c['eval_job'])} vs {_pct(c['in_process'])}, {verdict}"

    lines = [
        "A by-hand check of the evaluation path (`bench/learning/learning_folds_eval_check.py`, "
        f"{where(result.get('machine'))}): `base` on "
        f"fold {fold} ({result['rows']} rows) in eval job `{record['eval_id']}` ({suite['name']} v{suite['version']}, content hash "
        f"`{suite['content_hash']}`, {duration(record['generate_s'])} generating) against the recorded in-process evaluation "
        f"(bench/results/learning_folds.json's `base`, below). Greedy completions identical: "
        f"{result['greedy_completions_identical']} of {result['rows']}. Eval job vs in process:"
    ]
    for scoring in ("strict", "lenient", "format"):
        d = agreement[scoring]["difference"]["sampled"]
        lines.append(
            f"- {scoring}: greedy {pair(scoring, 'greedy')}; sampled {pair(scoring, 'sampled')}; paired sampled difference {_pts(d)} points"
        )
    verdict = "agree" if result["agree_within_cis"] else "do **not** all agree"
    lines.append(f"\nBy that criterion (each accuracy inside the other path's interval) the two paths {verdict}.")
    return "\n".join(lines)
