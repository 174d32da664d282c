"""Exploratory: rljob's default `loss_agg_mode` against `token-mean` on the learning bench's fold setting (issue 53 §3).

MaxText's PR 4025 found `sequence-mean-token-mean` (rljob's default) stalls Qwen3-1.7B GRPO with gradient norms
about 10x smaller than `token-mean`. This runs both on bench/learning/learning_folds.py's setting, one seed each, so it is
exploratory (chosen after the pre-registration): two `trained` jobs on fold A, each the pre-registered trained/A
spec (`learning_folds.job_spec`, the preregistration's grpo and steps) but for `grpo.loss_agg_mode`, run at once
through `rljob serve`; then each export is evaluated on fold B's suite only, by the same eval jobs the bench
uses (bench/learning/learning_folds_evals.py). The model and fold directories are the bench's (learning_folds.WORK); the
folds come from the base sampled rate recorded in bench/results/learning_folds.json (base is not rerun).

    python bench/learning/loss_agg_explore.py --steps 2   # a dry run: nothing written
    python bench/learning/loss_agg_explore.py             # the run: bench/results/loss_agg_explore.json
    python bench/learning/loss_agg_explore.py --jobs ID1 ID2   # evaluate two finished jobs (default's, token-mean's) again
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.learning import learning_folds as lf  # noqa: E402
from bench.learning import learning_folds_evals, learning_stats  # noqa: E402
from bench.learning.learning import arm_result, follow  # noqa: E402
from bench.learning.learning_folds_stats import SCORINGS, scored  # noqa: E402
from bench.result_meta import RESULTS, machine_facts, write_result  # noqa: E402
from trainer.contract import RunLayout  # noqa: E402
from trainer.contract.spec.rl_settings import OPTIMIZER_DEFAULTS  # noqa: E402
from trainer.progress.tensorboard_scalars import read_scalars  # noqa: E402

RESULT_NAME = "loss_agg_explore.json"
DEFAULT, CANDIDATE = "sequence-mean-token-mean", "token-mean"
MODES = (DEFAULT, CANDIDATE)
TRAIN_FOLD, EVAL_FOLD = "A", "B"
# Tunix's PeftTrainer logs optax.global_norm of the update's gradients beside the loss (actor/train/grad_norm).
GRAD_NORM_SUFFIX = "grad_norm"


def job_name(mode: str) -> str:
    return f"loss-agg-{mode}-{TRAIN_FOLD.lower()}"


def specs(folds: dict, grpo: dict) -> dict[str, dict]:
    """Per mode, the trained/A job spec with only loss_agg_mode (and the name, so the two jobs differ) changed."""
    out = {}
    for mode in MODES:
        spec = lf.job_spec("trained", TRAIN_FOLD, folds, {**grpo, "loss_agg_mode": mode})
        spec["name"] = job_name(mode)
        out[mode] = spec
    return out


def grad_norm_key(steps: list[dict]) -> str | None:
    keys = sorted({k for s in steps for k in s["values"] if k.endswith(GRAD_NORM_SUFFIX)})
    return keys[0] if keys else None


def train_steps(client: Any, job_id: str) -> list[dict]:
    """Every per-step value the service holds for the job (learning.arm_result keeps only four; the gradient norm
    is among the rest)."""
    points = client.request("GET", f"/v1/jobs/{job_id}/metrics")["points"]
    return [{"step": p["step"], "time": p["time"], "values": p["values"]} for p in points if p["kind"] == "train"]


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.fmean(kept) if kept else None


def clip_threshold(spec: dict) -> float:
    return float(spec["grpo"].get("gradient_clipping_threshold", OPTIMIZER_DEFAULTS["gradient_clipping_threshold"]))


def training_summary(steps: list[dict], clip: float) -> dict[str, Any]:
    """Per arm: which key carries the gradient norm (None: not logged), its mean and median over all steps, how many
    steps' norms were above the clipping threshold (the update then has the threshold's norm whatever the mode's scale),
    and the mean reward over the first and last five steps."""
    key = grad_norm_key(steps)
    norms = [s["values"][key] for s in steps if key and s["values"].get(key) is not None]
    rewards = [s["values"].get("reward_mean") for s in steps]
    return {
        "steps": len(steps),
        "grad_norm_key": key,
        "grad_norm_mean": statistics.fmean(norms) if norms else None,
        "grad_norm_median": statistics.median(norms) if norms else None,
        "clip_threshold": clip,
        "clipped_steps": sum(n > clip for n in norms) if clip > 0 and norms else None,
        "reward_first5": _mean(rewards[:5]),
        "reward_last5": _mean(rewards[-5:]),
    }


def decide(difference: dict[str, float]) -> str:
    """From token-mean - default's sampled strict bootstrap: the mode the data support, or 'cannot tell'."""
    if difference["low"] > 0:
        return CANDIDATE
    if difference["high"] < 0:
        return DEFAULT
    return "cannot tell"


def summarize(rows: dict[str, list[dict]], training: dict[str, dict]) -> dict[str, Any]:
    """Accuracy per mode and scoring, token-mean - default (paired by row) and the decision; the gradient norms'
    ratio (token-mean over default) when both arms logged one."""
    accuracy = {
        scoring: {
            mode: {
                "greedy": learning_stats.bootstrap_mean([r["greedy"] for r in scored(rs, scoring)]),
                "sampled": learning_stats.bootstrap_mean([learning_stats.sampled_score(r) for r in scored(rs, scoring)]),
            }
            for mode, rs in rows.items()
        }
        for scoring in SCORINGS
    }
    difference = learning_stats.compare(rows, CANDIDATE, DEFAULT)
    norms = [training[m]["grad_norm_mean"] for m in (CANDIDATE, DEFAULT)]
    return {
        "accuracy": accuracy,
        "difference": {"pair": f"{CANDIDATE} - {DEFAULT}", **difference},
        "grad_norm_ratio": norms[0] / norms[1] if None not in norms and norms[1] else None,
        "supported": decide(difference["sampled"]),
    }


def add_tensorboard(arms: dict[str, dict], jobs_clip: dict[str, float]) -> None:
    """Each arm's actor scalars per step from its TensorBoard files, merged into its steps' values, and its training
    summary from the merged values. The service's TrainStep events miss them for most steps: the trainer reports a
    step once actor/train/loss is read, and Tunix's other actor scalars (grad_norm, kl) often land in the file after
    it (the 40-step jobs here kept the gradient norm for 3 steps of 40)."""
    for mode, arm in arms.items():
        table = read_scalars(arm["run_uri"])
        actor = {tag: by_step for tag, by_step in table.items() if tag.startswith("actor/")}
        arm["tensorboard_actor"] = {tag: {str(k): v for k, v in sorted(by_step.items())} for tag, by_step in actor.items()}
        merged = []
        for step in arm["train_steps"]:
            from_file = {tag: by_step[step["step"]] for tag, by_step in actor.items() if step["step"] in by_step}
            kl = {"kl": from_file["actor/train/kl"]} if "actor/train/kl" in from_file else {}
            merged.append({**step, "values": {**step["values"], **from_file, **kl}})
        arm["train_steps_merged"] = merged
        arm["training"] = {**training_summary(merged, jobs_clip[mode]), "source": "service metrics + the job's TensorBoard actor scalars"}


def finished_eval(client: Any, eval_id: str, checkpoint: str) -> tuple[list[dict], dict[str, Any]]:
    job = follow(client, eval_id, poll_s=learning_folds_evals.POLL_S)
    record = learning_folds_evals._eval_record(client, eval_id, checkpoint)
    if job["phase"] != "SUCCEEDED":
        raise SystemExit(f"eval {eval_id} ended {job['phase']}: {job.get('message')}")
    path = Path(RunLayout(output=str(lf.WORK / "runs"), job_id=eval_id).eval_outcomes)
    return [learning_folds_evals.bench_row(o) for o in learning_folds_evals.read_outcomes(path, record["suite"]["rows"])], record


def evaluate_both(client: Any, token: str, arms: dict[str, dict], pre: dict, facts: dict, eval_ids: dict[str, str] | None = None) -> None:
    """Each arm's export on the held-out fold's suite, the two eval jobs at once (the local launcher runs two, and
    one after the other would not fit beside the training in the session). learning_folds.evaluate does one model
    and rewrites the suite files each call, which a concurrent submission could read half-written: here they are
    written once and the two models' evaluations follow in threads."""
    for mode, result in arms.items():
        if not result.get("export"):
            raise SystemExit(f"[{mode}] ended {result['phase']}: {result.get('message')}")
    suites = learning_folds_evals.write_suites(lf.WORK / "suites", pre)
    path = {"path": learning_folds_evals.EVALUATION_PATH, "commit": facts["commit"], "uncommitted_changes": facts["uncommitted_changes"]}

    def one(mode: str) -> dict[str, Any]:
        checkpoints = {EVAL_FOLD: f"{arms[mode]['job_id']}:export"}
        if eval_ids:  # eval jobs that ended after the bench lost its service: read, not resubmitted
            rows, record = finished_eval(client, eval_ids[mode], checkpoints[EVAL_FOLD])
            return {"rows": rows, "evaluation": {**path, "evals": {EVAL_FOLD: record}}}
        requests = learning_folds_evals.eval_requests(job_name(mode), checkpoints, suites, lf.WORK / "runs")
        rows, evals = learning_folds_evals.evaluate_model(client, token, requests)
        return {"rows": rows, "evaluation": {**path, "evals": evals}}

    with ThreadPoolExecutor(max_workers=len(arms)) as pool:
        for mode, model in zip(arms, pool.map(one, list(arms)), strict=True):
            arms[mode]["model"] = model


def run(steps: int, dry_run: bool, job_ids: list[str] | None = None, eval_ids: list[str] | None = None) -> dict[str, Any]:
    pre = lf.settings()
    lf.WORK.mkdir(parents=True, exist_ok=True)
    lf.model_dir(lf.env())
    folds = lf.fold_dirs(lf.load())  # from learning_folds.json's base rate, checked against its fold hashes
    grpo = {**pre["grpo"], "num_batches": steps}
    if dry_run:  # the eval path is what a dry run checks, not its figures: one sample per row is enough
        pre = {**pre, "evaluation": {**pre["evaluation"], "samples": 1}}
    facts = machine_facts()
    jobs = specs(folds, grpo)
    arms: dict[str, dict] = {}
    with lf.rljob_service() as (client, token):
        if job_ids:  # jobs already run (by an earlier call that ended before its evaluations): followed, not resubmitted
            arms.update({mode: arm_result(client, job_id, jobs[mode]) for mode, job_id in zip(MODES, job_ids, strict=True)})
        else:
            lf.run_jobs(client, token, jobs, lambda mode, result: arms.__setitem__(mode, result))
        for mode, result in arms.items():
            result["train_steps"] = train_steps(client, result["job_id"])
            # the spec as the service stored it (defaults filled in), beside the one submitted (result["spec"])
            result["resolved_spec"] = client.request("GET", f"/v1/jobs/{result['job_id']}").get("spec")
            result["training"] = training_summary(result["train_steps"], clip_threshold(jobs[mode]))
        add_tensorboard(arms, {mode: clip_threshold(jobs[mode]) for mode in arms})
        for mode, result in arms.items():
            print(f"[{mode}] {result['phase']} {json.dumps(result['training'])}", flush=True)
        evaluate_both(client, token, arms, pre, facts, dict(zip(MODES, eval_ids, strict=True)) if eval_ids else None)
    summary = summarize({m: arms[m]["model"]["rows"] for m in MODES}, {m: arms[m]["training"] for m in MODES})
    report = {
        "what": "exploratory (one seed each, chosen after the pre-registration): trained/A with loss_agg_mode "
        f"{DEFAULT} and {CANDIDATE}, evaluated on fold {EVAL_FOLD}'s suite",
        "issue": "53 section 3: MaxText PR 4025",
        "steps": steps,
        "base_sampled_rate": lf.load()["base_sampled_rate"],
        "folds": folds,
        "arms": arms,
        "summary": summary,
    }
    print(json.dumps({"summary": {k: v for k, v in summary.items() if k != "accuracy"}}, indent=1), flush=True)
    if not dry_run:
        write_result(RESULT_NAME, report, facts)
    return report


def retrofit_tensorboard() -> None:
    """A result written before add_tensorboard existed: the same merge and summary, from the jobs' run directories."""
    path = RESULTS / RESULT_NAME
    report = json.loads(path.read_text())
    arms = report["arms"]
    add_tensorboard(arms, {mode: clip_threshold(arm["spec"]) for mode, arm in arms.items()})
    report["summary"] = summarize({m: arms[m]["model"]["rows"] for m in MODES}, {m: arms[m]["training"] for m in MODES})
    report["tensorboard_added"] = (
        "by `python bench/learning/loss_agg_explore.py --add-tensorboard` after the run (add_tensorboard's docstring says why)"
    )
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({m: arms[m]["training"] for m in MODES}, indent=1), json.dumps(report["summary"]["grad_norm_ratio"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="a dry run of this many steps (nothing written)")
    parser.add_argument(
        "--jobs", nargs=2, metavar=("DEFAULT_JOB", "TOKEN_MEAN_JOB"), help="evaluate these finished jobs instead of training"
    )
    parser.add_argument("--evals", nargs=2, metavar=("DEFAULT_EVAL", "TOKEN_MEAN_EVAL"), help="with --jobs: their finished eval jobs")
    parser.add_argument("--add-tensorboard", action="store_true", help="merge the jobs' TensorBoard actor scalars into the result file")
    args = parser.parse_args()
    if args.add_tensorboard:
        retrofit_tensorboard()
        return 0
    steps = args.steps or lf.settings()["steps"]
    run(steps, dry_run=args.steps is not None, job_ids=args.jobs, eval_ids=args.evals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
