"""The pre-registered learning bench: GRPO through rljob against a random-reward control and TRL, two folds.

Task (bench/learning/arith_folds.py): all 300 one-digit questions with +, - and *, split into folds A and B by
fact. Every trained model is trained on one fold and evaluated on the other, so each of the 300 rows is
held out for the model scored on it. Models, all from SmolLM2-135M-Instruct (dequantised Q4_1):

- `base`: not trained; measured first, on all 300 rows. Its sampled rate sets the control's reward rate;
- `trained`: two rljob jobs (one per fold) with examples/rewards/arith_correct.py, submitted over REST to
  `rljob serve` (the embedded default) and followed to their end;
- `control`: the same two jobs with arith_random_control.py at base's rate (blind to correctness);
- `peer_trl`: the same model, folds, prompts, reward, group size, learning rate, KL estimator, optimiser
  and steps through TRL's GRPOTrainer (bench/learning/peer_trl.py), two runs.

Evaluation (the same for every model): eval jobs submitted to the same `rljob serve` (POST /v1/evals;
bench/learning/learning_folds_evals.py), one user suite per fold: greedy plus the pre-registered 8 samples per row
at the training temperature and top-k from a fixed seed, every completion to its end token or the job's
new-token limit and kept, scored strict (arith_correct: the first number is the answer), lenient (any integer in it is)
and format (it starts with "The answer is", as the one-shot template asks) by the suite's three reward
functions (bench/learning/rewards/learning_folds_scorings.py, `score()` below function by function). The decision
rule and the settings are in bench/preregistration/learning_folds.json, committed before the first job;
bench/learning/learning_folds_stats.py applies it to the eval jobs' outcomes, and the service's own comparisons
(GET /v1/evals/{a}/compare) are recorded beside. The published figures were measured by the in-process
evaluation this replaced (bench/learning/README.md says which commit measured what).

    python bench/learning/learning_folds.py base        # measure base, write the fold directories
    python bench/learning/learning_folds.py timing      # a 5-step trial of both rljob fold jobs at once
    python bench/learning/learning_folds.py arm trained|control|peer_trl
    python bench/learning/learning_folds.py summary

Each step adds to bench/results/learning_folds.json; a step already recorded is not rerun unless asked.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.learning import learning_folds_evals, learning_folds_stats  # noqa: E402
from bench.learning.arith_folds import FOLDS, write_folds  # noqa: E402
from bench.learning.learning import arm_result, sample_stats  # noqa: E402
from bench.learning.learning_folds_stats import PREREGISTRATION  # noqa: E402
from bench.result_meta import machine_facts  # noqa: E402
from service.cli.client import ClientConfig, RljobClient  # noqa: E402
from service.cli.demo import _wait_ready  # noqa: E402
from service.domain.tokens import generate_token  # noqa: E402
from service.free_port import free_port  # noqa: E402
from service.process_stop import terminate_then_kill  # noqa: E402
from trainer.contract.spec.file import load_spec_file  # noqa: E402

RESULT = REPO / "bench" / "results" / "learning_folds.json"
EXAMPLE = REPO / "examples" / "smollm2-arith-cpu.yaml"
WORK = Path(os.environ.get("RLJOB_BENCH_WORK", "/tmp/rljob-learning-folds"))
REWARD_FUNCTIONS = {"trained": ("arith_correct.py", "arith_correct"), "control": ("arith_random_control.py", "arith_random_control")}
ANY_INTEGER = re.compile(r"-?[0-9]+")
FORMAT_PREFIX = "The answer is"


def score(completion: str, answer: str, rewards) -> dict[str, int]:
    """The bench's three scorings of one completion (`rewards`: examples/rewards/arith_correct.py); the eval
    suites' reward functions score the same way (tests/bench/learning/test_learning_folds_evals.py)."""
    golds = {int(g) for g in json.loads(answer)}
    strict = rewards.arith_correct([""], [completion], None, answer=[answer])[0] == 1.0
    lenient = any(int(n) in golds for n in ANY_INTEGER.findall(completion))
    return {"strict": int(strict), "lenient": int(lenient), "format": int(completion.lstrip().startswith(FORMAT_PREFIX))}


def load() -> dict:
    return json.loads(RESULT.read_text()) if RESULT.exists() else {}


def save(results: dict) -> None:
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(results, indent=1) + "\n")


def settings() -> dict:
    """The pre-registered settings (committed before the first job)."""
    return json.loads(PREREGISTRATION.read_text())


def model_dir(env: dict) -> Path:
    d = WORK / "smollm2"
    if not (d / "model.safetensors").exists():
        subprocess.run([sys.executable, "-m", "trainer", "make-model", "smollm2-135m", "--out", str(d)], check=True, env=env, cwd=REPO)
    return d


def env() -> dict:
    return dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")


def evaluate(client: RljobClient, token: str, model: str, checkpoints: dict[str, str], pre: dict, facts: dict) -> dict:
    """A model's rows from its eval jobs (one per fold suite it is scored on), with the path, commit and evals
    that produced them."""
    suites = learning_folds_evals.write_suites(WORK / "suites", pre)
    requests = learning_folds_evals.eval_requests(model, checkpoints, suites, WORK / "runs")
    rows, evals = learning_folds_evals.evaluate_model(client, token, requests)
    path = {"path": learning_folds_evals.EVALUATION_PATH, "commit": facts["commit"], "uncommitted_changes": facts["uncommitted_changes"]}
    return {"rows": rows, "evaluation": {**path, "evals": evals}}


def record_comparisons(client: RljobClient, results: dict) -> None:
    """The service's comparisons of every pair evaluated so far, kept beside the bench's own statistics (main prints both)."""
    results["service_comparisons"] = learning_folds_evals.service_comparisons(client, results.get("models", {}))


def run_base(pre: dict) -> None:
    results, facts = load(), machine_facts()
    checkpoints = learning_folds_evals.checkpoints("base", model_dir=model_dir(env()))
    with rljob_service() as (client, token):
        base = evaluate(client, token, "base", checkpoints, pre, facts)
        results.setdefault("models", {})["base"] = base
        record_comparisons(client, results)
    rate = sum(sum(r["samples"]) for r in base["rows"]) / sum(len(r["samples"]) for r in base["rows"])
    results["base_sampled_rate"] = rate
    results.setdefault("machine", {})["base"] = facts
    save(results)
    print(f"base: sampled strict rate {rate:.4f} over {len(base['rows'])} rows x {pre['evaluation']['samples']}", flush=True)


def fold_dirs(results: dict) -> dict[str, dict]:
    """The fold directories (rebuilt from the seed and base's recorded rate; checked against the hashes)."""
    written = write_folds(WORK / "folds", results["base_sampled_rate"])
    recorded = results.get("folds")
    if recorded and any(recorded[f][k] != written[f][k] for f in FOLDS for k in ("train_hash", "control_reward_sha256")):
        raise SystemExit(f"the fold files differ from those recorded: {recorded} vs {written}")
    return written


def job_spec(arm: str, fold: str, folds: dict, grpo: dict) -> dict:
    d = Path(folds[fold]["dir"])
    os.environ.update(RLJOB_SMOLLM2_DIR=str(WORK / "smollm2"), RLJOB_ARITH_DIR=str(d), RLJOB_OUTPUT=str(WORK / "runs"))
    spec = json.loads(load_spec_file(EXAMPLE).model_dump_json())
    spec["name"] = f"folds-{arm}-{fold.lower()}"
    spec["grpo"].update(grpo)
    file, name = REWARD_FUNCTIONS[arm]
    spec["grpo"]["rewards"] = {**spec["grpo"]["rewards"], "functions_path": str(d / file), "functions": [name]}
    return spec


@contextlib.contextmanager
def rljob_service() -> Iterator[tuple[RljobClient, str]]:
    """A fresh `rljob serve` (local launcher) on this bench's state directory, and a client with its token; the
    jobs of earlier runs are in its store, so an eval can name `<job-id>:export` of a job trained before."""
    state = WORK / "service"
    state.mkdir(parents=True, exist_ok=True)
    port, token = free_port(), generate_token()
    server_env = {**env(), "RLJOB_BOOTSTRAP_TOKEN": token, "RLJOB_ENVIRONMENT": "dev", "RLJOB_LAUNCHER": "local"}
    server_env.pop("RLJOB_DATABASE_URL", None)
    with (state / "service.log").open("ab") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "service.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port), "--state-dir", str(state)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=server_env,
            cwd=REPO,
        )
    client = RljobClient(ClientConfig(url=f"http://127.0.0.1:{port}", token=token, config_file=None))
    try:
        _wait_ready(client, server, state / "service.log")
        yield client, token
    finally:
        client.close()
        terminate_then_kill(server, grace_s=15)


def run_jobs(client: RljobClient, token: str, specs: dict[str, dict], on_result) -> None:
    """Submit every job at once over REST and follow each to its end."""
    ids = {}
    for name, spec in specs.items():
        key = hashlib.sha256(f"{name}{token}".encode()).hexdigest()[:16]
        ids[name] = client.request("POST", "/v1/jobs", json=spec, headers={"Idempotency-Key": key})["id"]
        print(f"[{name}] submitted {ids[name]}", flush=True)
    for name, job_id in ids.items():
        on_result(name, arm_result(client, job_id, specs[name]))


def run_peer(folds: dict, grpo: dict, steps: int) -> dict[str, dict]:
    """Both folds' TRL runs at once, as the rljob arms run their two jobs."""
    procs = {}
    for fold in FOLDS:
        d, out = Path(folds[fold]["dir"]), WORK / "peer_trl" / fold
        cmd = [
            sys.executable,
            str(REPO / "bench" / "learning" / "peer_trl.py"),
            "--model",
            str(WORK / "smollm2"),
            "--train",
            str(d / "train.jsonl"),
            "--template",
            str(d / "arith-one-shot.json"),
            "--rewards",
            str(d / "arith_correct.py"),
            "--function",
            "arith_correct",
            "--spec-json",
            json.dumps(grpo),
            "--steps",
            str(steps),
            "--out",
            str(out),
        ]
        out.mkdir(parents=True, exist_ok=True)
        # One thread each: two torch processes of two threads on two cores spin against each other in OpenMP.
        peer_env = {**env(), "OMP_NUM_THREADS": "1"}
        procs[fold] = (subprocess.Popen(cmd, stdout=(out / "log.txt").open("wb"), stderr=subprocess.STDOUT, env=peer_env, cwd=REPO), out)
    results = {}
    for fold, (proc, out) in procs.items():
        rc = proc.wait()
        metrics = json.loads((out / "metrics.json").read_text()) if rc == 0 else {}
        train = [
            {
                "step": e["step"],
                "reward_mean": e.get("reward"),
                "kl": e.get("kl"),
                "loss": e.get("loss"),
                "mean_length": e.get("completions/mean_length"),
                "signal_fraction": 1 - e.get("frac_reward_zero_std", 1),
            }
            for e in metrics.get("log", [])
            if "reward" in e
        ]
        results[fold] = {
            "phase": "SUCCEEDED" if rc == 0 else f"exit {rc}",
            "train": train,
            "train_seconds": metrics.get("train_seconds"),
            "export": str(out / "export") if rc == 0 else None,
        }
    return results


def run_arm(arm: str, pre: dict, steps: int | None = None, record: bool = True) -> dict:
    """Train the arm's two fold models, then (with `record`) evaluate each on the fold it did not train on:
    eval jobs on the same service once both have ended (an evaluation beside training slows both)."""
    results = load()
    folds = fold_dirs(results)
    results["folds"] = folds
    grpo = {**pre["grpo"], "num_batches": steps or pre["steps"]}
    facts = machine_facts()
    arms: dict[str, dict] = {}
    if arm == "peer_trl":  # before the service starts: nothing else runs beside training
        arms = run_peer(folds, grpo, grpo["num_batches"])
    with rljob_service() as (client, token):
        if arm != "peer_trl":
            specs = {fold: job_spec(arm, fold, folds, grpo) for fold in FOLDS}
            run_jobs(client, token, specs, lambda fold, result: arms.__setitem__(fold, result))
            for result in arms.values():
                run_dir = Path(result.get("run_uri") or "/nonexistent")
                if (run_dir / "samples").is_dir():
                    result["samples"] = sample_stats(run_dir)
        if not record:
            return arms
        results.setdefault("arms", {})[arm] = {"folds": arms, "machine": facts}
        save(results)
        checkpoints = learning_folds_evals.checkpoints(arm, arms=arms)
        model = evaluate(client, token, arm, checkpoints, pre, facts)
        results.setdefault("models", {})[arm] = {**model, "trained_on": "the other fold (bench/learning/arith_folds.py)"}
        record_comparisons(client, results)
    save(results)
    return arms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["base", "timing", "arm", "summary"])
    parser.add_argument("arm", nargs="?", choices=["trained", "control", "peer_trl"])
    args = parser.parse_args()
    pre = settings()
    WORK.mkdir(parents=True, exist_ok=True)
    if args.what == "base":
        run_base(pre)
    elif args.what == "timing":
        arms = run_arm(args.arm or "trained", pre, steps=5, record=False)
        for fold, result in arms.items():
            times = [p["time"] for p in result.get("train", [])]
            print(f"[timing {fold}] {result['phase']} train_seconds={result.get('train_seconds')} step times={times}")
    elif args.what == "arm":
        run_arm(args.arm, pre)
    results = load()
    if "models" in results:
        results["summary"] = learning_folds_stats.summarize(results["models"])
        save(results)
        learning_folds_stats.print_summary(results["summary"])
    if results.get("service_comparisons"):
        print("  the service's comparisons, per fold suite (GET /v1/evals/{a}/compare):")
        learning_folds_evals.print_service_comparisons(results["service_comparisons"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
