"""An eval job for real on the tiny model (tests/conftest.py's tiny_dir): `python -m trainer run` on a Hugging
Face checkpoint and a small user suite, then its outcomes, report and events checked against an independent
re-scoring of the completions it wrote. Also on the tiny model: the KV-cache sampler's greedy text equals
transformers' own generate, a completion's draws do not depend on its batch, and eval prompts equal train_rl's
(MaxText's utils_rl.process_data)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainer.contract import RunLayout, Stage, parse_event
from trainer.contract.run.eval_report import EvalReport, RowOutcome, summarize
from trainer.evals.builtin_suites import builtin_suite
from trainer.evals.prompts import RL_TAGS, acceptable_answers, build_prompt

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]
# Scores some of the random model's completions right and some wrong, and fails on others (scored None).
REWARDS = """import json

def even_length(prompts, completions, tmvp_config, answer=None, **kwargs):
    return [float(len(c) % 2 == 0) for c in completions]

def picky(prompts, completions, tmvp_config, answer=None, **kwargs):
    if any(c.startswith("a") for c in completions):
        raise ValueError("picky")
    return [1.0 if json.loads(a)[0] in c else 0.0 for c, a in zip(completions, answer)]
"""


def _run_eval(tiny_dir: Path, out: Path, job_id: str, *, accelerator: str = "cpu", hide_torch: bool = False) -> dict:
    """An eval job of the tiny model on six rows, as `python -m trainer run` runs it; on a TPU accelerator its
    engine is the JAX one (here on the CPU: no TPU), and `hide_torch` runs it where torch cannot be imported."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in (tiny_dir / "data" / "test.jsonl").read_text().splitlines()][:6]
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "rewards.py").write_text(REWARDS)
    spec = {
        "name": "eval-tiny",
        "model": {"source": str(tiny_dir / "model"), "dtype": "float32"},
        "hardware": {"accelerator": accelerator, "chips_per_vm": 1, "rollout_engine": "jax"},
        "output": str(out / "runs"),
        "evaluation": {
            "suite": {
                "name": "tiny-suite",
                "data": str(out / "rows.jsonl"),
                "rewards_path": str(out / "rewards.py"),
                "rewards": ["even_length", "picky"],
                "sampling": {"samples": 3, "max_new_tokens": 12},
            },
            "checkpoint": {"format": "huggingface"},
        },
    }
    (out / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONPATH=str(REPO))
    runner = [sys.executable, "-m", "harness.no_torch"] if hide_torch else [sys.executable, "-m"]
    cmd = [*runner, "trainer", "run", "--spec", str(out / "spec.yaml"), "--job-id", job_id]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"layout": RunLayout(str(out / "runs"), job_id), "rewards": out / "rewards.py", "rows": rows}


@pytest.fixture(scope="module")
def eval_run(tiny_dir, tmp_path_factory) -> dict:
    return _run_eval(tiny_dir, tmp_path_factory.mktemp("eval"), "rl-evaltiny0001")


def _outcomes(layout: RunLayout) -> list[RowOutcome]:
    return [RowOutcome.model_validate_json(line) for line in Path(layout.eval_outcomes).read_text().splitlines()]


@pytest.mark.parametrize("accelerator", ["v5e-1", "cpu"])
def test_an_eval_job_without_torch_runs_the_jax_engine_and_greedy_agrees_with_transformers(eval_run, tiny_dir, tmp_path, accelerator):
    """A TPU eval job's host has no torch, nor may a TPU VM's cpu eval job's: either runs the JAX engine (on the chip,
    or on the CPU), whose greedy text is transformers' own row by row (here both on this machine's CPU)."""
    run = _run_eval(tiny_dir, tmp_path, "rl-evaltiny0002", accelerator=accelerator, hide_torch=True)
    jax_report = EvalReport.model_validate_json(Path(run["layout"].eval_report).read_text())
    torch_report = EvalReport.model_validate_json(Path(eval_run["layout"].eval_report).read_text())
    assert (jax_report.engine, torch_report.engine) == ("jax", "transformers")
    assert jax_report.suite == torch_report.suite  # one suite content: the engine is not part of it
    jax_rows, torch_rows = _outcomes(run["layout"]), _outcomes(eval_run["layout"])
    assert [o.greedy for o in jax_rows] == [o.greedy for o in torch_rows]
    assert all(len(o.samples) == 3 for o in jax_rows)


def _rewards_module(path: Path):
    spec = importlib.util.spec_from_file_location("independent_rewards", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_eval_job_writes_outcomes_report_and_events(eval_run):
    layout: RunLayout = eval_run["layout"]
    outcomes = [RowOutcome.model_validate_json(line) for line in Path(layout.eval_outcomes).read_text().splitlines()]
    report = EvalReport.model_validate_json(Path(layout.eval_report).read_text())
    assert [o.question for o in outcomes] == [r["question"] for r in eval_run["rows"]]
    assert all(len(o.samples) == 3 for o in outcomes) and report.n == 6 and report.k == 3
    events = [parse_event(line) for line in Path(layout.events).read_text().splitlines()]
    assert [e.type for e in events if e.type in ("stage_started", "stage_finished", "eval_report", "run_finished")] == [
        "stage_finished",  # export: skipped, a Hugging Face checkpoint
        "stage_started",
        "eval_report",
        "stage_finished",
        "run_finished",
    ]
    assert next(e for e in events if e.type == "eval_report").report == report
    assert Path(layout.stage_marker(Stage.EVALUATE)).exists() and events[-1].ok

    # Independent re-scoring of the written completions: each function called on them as train_rl would.
    module = _rewards_module(eval_run["rewards"])
    for outcome in outcomes:
        texts = [outcome.greedy, *outcome.samples]
        answer = [json.dumps(outcome.answers)] * len(texts)
        for name in ("even_length", "picky"):
            try:
                scores = getattr(module, name)([""] * len(texts), texts, None, answer=answer)
            except ValueError:
                scores = [None] * len(texts)
            recorded = outcome.functions[name]
            assert [recorded.greedy, *recorded.samples] == scores, (name, texts)
    even = [o.functions["even_length"] for o in outcomes]
    assert report.functions["even_length"].pass_at_1.value == sum(f.greedy == 1.0 for f in even) / 6
    assert report.functions["even_length"].sampled.value == pytest.approx(sum(sum(s == 1.0 for s in f.samples) / 3 for f in even) / 6)
    assert report.functions["even_length"] == summarize(outcomes, "even_length")
    assert 0 < report.functions["even_length"].sampled.value < 1  # the mix the re-scoring had to match


@pytest.fixture(scope="module")
def tiny_model(tiny_dir):
    from trainer.evals.hf_sampler import load_model

    return load_model(str(tiny_dir / "model"), str(tiny_dir / "model"), local=True)


def test_the_sampler_agrees_with_transformers_generate_and_draws_per_row(tiny_model):
    import torch

    from trainer.evals.hf_sampler import PrefixSampler

    model, tokenizer = tiny_model
    tokenizer.padding_side = "left"
    prompts = [build_prompt(f"What is {a} + 3?", builtin_suite("arith").template, tokenizer) for a in range(3)]
    sampler = PrefixSampler(model, tokenizer)
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=8, pad_token_id=tokenizer.pad_token_id)
    reference = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    assert [c[0] for c in sampler.sample(prompts, generations=1, temperature=None, top_k=1, new_tokens=8, seed=0)] == reference
    together = sampler.sample(prompts, generations=2, temperature=0.9, top_k=50, new_tokens=8, seed=[11, 12, 13])
    alone = sampler.sample(prompts[1:2], generations=2, temperature=0.9, top_k=50, new_tokens=8, seed=[12])
    assert together[1] == alone[0]  # a row's draws are its own, whatever shares its batch


def test_prompts_and_answers_equal_train_rls(tiny_model):
    import multiprocessing.pool  # noqa: F401  (maxtext 0.2.5's utils_rl needs it imported first)
    from types import SimpleNamespace

    from maxtext.trainers.post_train.rl import utils_rl

    _, tokenizer = tiny_model
    rows = [{"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}, {"question": "Tom has {x} apples", "answer": "1,080"}]
    for suite in (builtin_suite("arith"), builtin_suite("gsm8k")):
        for row in rows:
            dataset = "openai/gsm8k" if "####" in row["answer"] else "plain"
            theirs = utils_rl.process_data(dataset, tokenizer, suite.template, SimpleNamespace(**RL_TAGS), row)
            assert build_prompt(row["question"], suite.template, tokenizer) == theirs["prompts"]
            assert acceptable_answers(row["answer"]) == json.loads(theirs["answer"])
