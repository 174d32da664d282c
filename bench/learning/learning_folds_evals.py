"""The learning bench's evaluations as eval jobs through `rljob serve` (bench/learning/learning_folds.py; issue 36).

Every model the bench scores (base, trained, control, peer_trl) is evaluated by eval jobs submitted to the
service the rljob arms train through (POST /v1/evals), on two user suites of the bench's, one per fold:

- rows: the fold's questions (bench/learning/arith_folds.py), as JSON lines of question and GSM8K-style answer;
- rewards: bench/learning/rewards/learning_folds_scorings.py's three functions, strict first (the primary, which the
  service compares by default), so one eval job scores every completion strict, lenient and format;
- prompt template: the one the jobs train with (examples/templates/arith-one-shot.json);
- sampling: the pre-registered one (bench/preregistration/learning_folds.json): `evaluation.samples` samples
  at the jobs' temperature and top-k beside the greedy completion, at most max_target_length -
  max_prefill_predict_length new tokens, seed `evaluation.seed`.

Checkpoints: base is a location (the model directory), evaluated on both folds; a trained or control job's
weights are `<job-id>:export`, evaluated on the fold it did not train on; peer_trl's TRL export directory is a
location, likewise on the other fold. The bench reads each eval job's outcomes from its run directory (the bench
and the local launcher share this machine) and turns them into the rows bench/learning/learning_folds_stats.py reads.
Beside its own statistics it records what the service says: each eval's id, suite version, content hash and
usage, and GET /v1/evals/{a}/compare for each pair of models on each fold (pass@1 difference with its CI and
McNemar p, sampled accuracy, and the training job's cost per point).

What differs from the in-process evaluation that produced the published figures (bench/learning/README.md): a row's
sample seeds derive from the suite seed and the row's id (trainer/evals/runner.py), not from one generator per
batch of 50 rows, so the draws differ; the eval job stops a completion at every end token the checkpoint names,
not only the tokenizer's; and the service compares per fold suite, where the bench pools both folds.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from bench.learning.arith_folds import FOLDS, fold_rows
from bench.learning.learning import follow
from bench.learning.learning_folds_stats import PAIRS
from service.cli.client import RljobClient
from service.domain.records.phases import JobPhase
from trainer.contract import RunLayout
from trainer.contract.run.eval_report import RowOutcome

REPO = Path(__file__).resolve().parents[2]
SCORINGS_FILE = REPO / "bench" / "learning" / "rewards" / "learning_folds_scorings.py"
TEMPLATE = REPO / "examples" / "templates" / "arith-one-shot.json"
SUITE_NAMES = {"A": "learning-folds-a", "B": "learning-folds-b"}
# The bench's scorings (learning_folds_stats.SCORINGS) and the reward function scoring each; strict is the primary.
SCORING_FUNCTIONS = {"strict": "arith_correct", "lenient": "arith_lenient", "format": "arith_format"}
EVALUATION_PATH = "eval jobs: POST /v1/evals to rljob serve (local launcher), outcomes read from each eval job's run directory"
MAX_OUTCOMES_BYTES = 64 << 20  # a fold's ~150 rows x 9 completions of 32 tokens are ~0.5 MB
POLL_S = 5.0


def other(fold: str) -> str:
    return FOLDS[1 - FOLDS.index(fold)]


def eval_sampling(pre: dict) -> dict[str, Any]:
    """The pre-registered evaluation's sampling, as the suites' EvalSampling."""
    grpo, evaluation = pre["grpo"], pre["evaluation"]
    return {
        "samples": evaluation["samples"],
        "temperature": grpo["temperature"],
        "top_k": grpo["top_k"],
        "max_new_tokens": grpo["max_target_length"] - grpo["max_prefill_predict_length"],
        "seed": evaluation["seed"],
    }


def write_suites(out: Path, pre: dict) -> dict[str, dict[str, Any]]:
    """Each fold's suite files under `out` (its rows; the scorings and template, shared); per fold its SuiteSpec."""
    out.mkdir(parents=True, exist_ok=True)
    rewards, template = out / SCORINGS_FILE.name, out / TEMPLATE.name
    shutil.copyfile(SCORINGS_FILE, rewards)
    shutil.copyfile(TEMPLATE, template)
    suites = {}
    for fold, rows in fold_rows().items():
        data = out / f"{SUITE_NAMES[fold]}.jsonl"
        data.write_text("".join(json.dumps({"question": r["question"], "answer": r["answer"]}) + "\n" for r in rows))
        suites[fold] = {
            "name": SUITE_NAMES[fold],
            "data": str(data),
            "rewards_path": str(rewards),
            "rewards": list(SCORING_FUNCTIONS.values()),
            "prompt_template": str(template),
            "answer": "first-number",
            "sampling": eval_sampling(pre),
        }
    return suites


def checkpoints(model: str, *, model_dir: Path | None = None, arms: dict[str, dict] | None = None) -> dict[str, str]:
    """Per fold suite, the checkpoint a model is evaluated with there: base's model directory on both folds; a
    trained model's weights (trained and control: `<job-id>:export`; peer_trl: its export directory) on the fold
    it did not train on."""
    if model == "base":
        if model_dir is None:
            raise ValueError("base is evaluated from its model directory")
        return {fold: str(model_dir) for fold in FOLDS}
    if arms is None:
        raise ValueError(f"{model} is evaluated from its training runs")
    found = {}
    for fold, run in arms.items():
        if not run.get("export"):
            raise SystemExit(f"[{model}/{fold}] ended {run.get('phase')}: nothing to evaluate")
        found[other(fold)] = run["export"] if model == "peer_trl" else f"{run['job_id']}:export"
    return found


def eval_requests(model: str, checkpoints_by_fold: dict[str, str], suites: dict[str, dict], output: Path) -> dict[str, dict[str, Any]]:
    """Per fold suite, the POST /v1/evals body evaluating the model's checkpoint on it."""
    return {
        fold: {
            "checkpoint": checkpoint,
            "suite": suites[fold],
            "name": f"folds-{model.replace('_', '-')}-on-{fold.lower()}",
            "output": str(output),
        }
        for fold, checkpoint in checkpoints_by_fold.items()
    }


def read_outcomes(path: Path, rows: int) -> list[RowOutcome]:
    """An eval job's outcomes file, read as what a job wrote: a plain file (no link), bounded, one row per line,
    every suite row once."""
    if path.is_symlink() or not path.is_file():
        raise SystemExit(f"{path} is not a plain file: the eval job's outcomes are missing")
    if path.stat().st_size > MAX_OUTCOMES_BYTES:
        raise SystemExit(f"{path} is {path.stat().st_size} bytes, more than {MAX_OUTCOMES_BYTES}")
    outcomes = [RowOutcome.model_validate_json(line) for line in path.read_bytes().splitlines() if line.strip()]
    if len(outcomes) != rows or len({o.id for o in outcomes}) != rows:
        raise SystemExit(f"{path} holds {len(outcomes)} rows ({len({o.id for o in outcomes})} distinct); the suite has {rows}")
    return outcomes


def bench_row(outcome: RowOutcome) -> dict[str, Any]:
    """One eval-job row as learning_folds_stats reads it: `greedy`/`samples` strict 0/1 (pass@1 and each sample
    correct under arith_correct), `lenient` and `format` likewise, and the completions."""

    def scored(scoring: str) -> dict[str, Any]:
        function = outcome.functions[SCORING_FUNCTIONS[scoring]]
        return {"greedy": int(function.score("pass@1")), "samples": [int(s is not None and s > 0) for s in function.samples]}

    return {
        "id": outcome.id,
        "question": outcome.question,
        **scored("strict"),
        "lenient": scored("lenient"),
        "format": scored("format"),
        "completions": {"greedy": outcome.greedy, "samples": outcome.samples},
    }


def _eval_record(client: RljobClient, eval_id: str, checkpoint: str) -> dict[str, Any]:
    found = client.eval(eval_id)
    suite, usage = found.eval_job.suite, found.usage
    running = usage.phases.get(JobPhase.RUNNING.value)
    return {
        "eval_id": eval_id,
        "phase": found.phase.value,
        "message": found.message,
        "checkpoint": checkpoint,
        "model_source": found.eval_job.model_source,
        "suite": suite.model_dump(include={"name", "scope", "version", "content_hash", "rows"}),
        "n": found.eval_job.n,
        "k": found.eval_job.k,
        "generate_s": found.eval_job.generate_s,
        "usage": {
            "billed_chip_hours": usage.billed_chip_hours,
            "cost_usd": usage.cost_usd,
            "running_s": running.seconds if running else None,
        },
    }


def evaluate_model(client: RljobClient, token: str, requests: dict[str, dict[str, Any]]) -> tuple[list[dict], dict[str, dict]]:
    """Submit a model's eval jobs at once and follow each to its end (the local launcher runs two at a time);
    returns its rows on every suite, in fold order, and per fold the eval's record."""
    ids = {}
    for fold, body in requests.items():
        key = hashlib.sha256(f"{json.dumps(body, sort_keys=True)}{token}".encode()).hexdigest()[:16]
        ids[fold] = client.submit_eval(body, f"bench-folds-eval-{key}").id
        print(f"[{body['name']}] submitted eval {ids[fold]} ({body['checkpoint']} on {body['suite']['name']})", flush=True)
    rows, records = [], {}
    for fold in sorted(ids):
        job = follow(client, ids[fold], poll_s=POLL_S)
        records[fold] = _eval_record(client, ids[fold], requests[fold]["checkpoint"])
        if job["phase"] != "SUCCEEDED":
            raise SystemExit(f"eval {ids[fold]} ended {job['phase']}: {job.get('message')}")
        path = Path(RunLayout(output=requests[fold]["output"], job_id=ids[fold]).eval_outcomes)
        rows += [bench_row(o) for o in read_outcomes(path, records[fold]["suite"]["rows"])]
    return rows, records


def _comparison_record(found: Any) -> dict[str, Any]:
    comparison = found.comparison
    return {
        "a": found.a.eval_id,
        "b": found.b.eval_id,
        "suite": {"name": found.suite.name, "version": found.suite.version, "content_hash": found.suite.content_hash},
        "function": comparison.function,
        "n": comparison.n,
        "scores": {
            s.score: {"a": s.a, "b": s.b, "difference": s.difference, "ci95": list(s.ci95), "mcnemar_p": s.mcnemar_p}
            for s in comparison.scores
        },
        "cost_per_point": [
            {"score": c.score, "training_job_id": c.training_job_id, "usd_per_point": c.usd_per_point, "verdict": c.verdict}
            for c in found.cost_per_point
        ],
        "cost_note": found.cost_note,
    }


def service_comparisons(client: RljobClient, models: dict[str, dict]) -> dict[str, dict[str, dict]]:
    """The service's comparison (GET /v1/evals/{a}/compare?baseline={b}, on strict) of each pair of
    learning_folds_stats.PAIRS on each fold suite both models were evaluated on by eval jobs."""
    evals = {name: m.get("evaluation", {}).get("evals", {}) for name, m in models.items()}
    out: dict[str, dict[str, dict]] = {}
    for a, b in PAIRS:
        for fold in FOLDS:
            ea, eb = evals.get(a, {}).get(fold), evals.get(b, {}).get(fold)
            if ea and eb:
                found = client.eval_compare(ea["eval_id"], eb["eval_id"], SCORING_FUNCTIONS["strict"])
                out.setdefault(f"{a}-{b}", {})[fold] = _comparison_record(found)
    return out


def print_service_comparisons(comparisons: dict[str, dict[str, dict]]) -> None:
    for pair, by_fold in comparisons.items():
        for c in by_fold.values():
            p1, sampled = c["scores"]["pass@1"], c["scores"]["sampled"]
            cost = "; ".join(x["verdict"] for x in c["cost_per_point"]) or c["cost_note"]
            print(
                f"  service {pair} on {c['suite']['name']} v{c['suite']['version']} ({c['suite']['content_hash']}, n={c['n']}): "
                f"pass@1 {p1['difference'] * 100:+.1f} points [{p1['ci95'][0] * 100:+.1f}, {p1['ci95'][1] * 100:+.1f}] "
                f"McNemar p={p1['mcnemar_p']:.3g}, sampled {sampled['difference'] * 100:+.1f} "
                f"[{sampled['ci95'][0] * 100:+.1f}, {sampled['ci95'][1] * 100:+.1f}]; {cost}"
            )
