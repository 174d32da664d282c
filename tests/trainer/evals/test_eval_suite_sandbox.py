"""A user suite's reward functions run in the reward sandbox (trainer/evals/suite_rewards.py), never in the eval
job's process: a hostile reward finds no secret in its environment, the suite's module is never imported here, and a
failed call scores per the suite's reward_on_error (zero: incorrect and the evaluation goes on; fail: it stops)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from trainer.contract import JobSpec
from trainer.contract.spec.eval_suite import SuiteSpec
from trainer.evals.runner import load_suite
from trainer.evals.scoring import score_row
from trainer.evals.suite_rewards import SuiteRewardFailed

HOSTILE = """
import os

SECRETS = ("HF_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS", "RLJOB_BOOTSTRAP_TOKEN")


def leaks(prompts, completions, tmvp_config, **kw):
    # 1 per completion when any secret is in this process's environment: scored correct only if it leaked.
    return [float(any(os.environ.get(name) for name in SECRETS))] * len(completions)


def pid(prompts, completions, tmvp_config, **kw):
    return [float(os.getpid())] * len(completions)


def raises(prompts, completions, tmvp_config, **kw):
    raise RuntimeError("no reward today")


def raises_too(prompts, completions, tmvp_config, **kw):
    raise KeyError("answer")


def sleeps(prompts, completions, tmvp_config, **kw):
    import time

    time.sleep(3600)


def right(prompts, completions, tmvp_config, answer=None, **kw):
    return [1.0 if c.strip() == __import__("json").loads(a)[0] else 0.0 for c, a in zip(completions, answer)]
"""


def _suite(tmp_path: Path, functions: list[str], **limits: object) -> SuiteSpec:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    rewards = tmp_path / "hostile_rewards.py"
    rewards.write_text(HOSTILE)
    template = tmp_path / "template.json"
    template.write_text(json.dumps({"SYSTEM_PROMPT": "", "TEMPLATE": "{system_prompt}Q: {question}"}))
    return SuiteSpec(name="hostile", data=str(data), rewards_path=str(rewards), rewards=functions, prompt_template=str(template), **limits)


def _score(suite, greedy: str = "5", samples: tuple[str, ...] = ("5", "4")):
    row = suite.rows[0]
    return score_row(
        suite.rewards.functions,
        prompt="p",
        question=row.question,
        answers=row.answers,
        greedy=greedy,
        samples=list(samples),
        extractor="last-number",
    )


def test_a_hostile_suite_reward_gets_no_secret_and_its_module_is_never_imported_here(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_of_the_eval_job")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
    monkeypatch.setenv("RLJOB_BOOTSTRAP_TOKEN", "service-token")
    spec = _suite(tmp_path, ["leaks", "pid", "right"])
    suite = load_suite(spec, tmp_path)
    try:
        scores = _score(suite).functions
        assert (scores["leaks"].greedy, scores["leaks"].samples) == (0.0, [0.0, 0.0])  # the environment held none of them
        assert scores["pid"].greedy not in (None, float(os.getpid()))  # another process computed it
        assert (scores["right"].greedy, scores["right"].samples) == (1.0, [1.0, 0.0])
        assert suite.rewards.sandbox is not None and suite.rewards.sandbox.pool.stats.totals["ok"] == 3
    finally:
        suite.rewards.close()
    path = str(Path(spec.rewards_path or ""))
    imported = [name for name, module in list(sys.modules.items()) if getattr(module, "__file__", None) == path]
    assert not imported and not any("hostile_rewards" in name for name in sys.modules), imported


def test_a_failed_call_scores_zero_by_default_and_the_next_call_is_served(tmp_path):
    suite = load_suite(_suite(tmp_path, ["raises", "sleeps", "right"], reward_timeout_s=0.5), tmp_path)
    try:
        first = _score(suite)
        assert first.functions["raises"].greedy is None and first.functions["sleeps"].samples == [None, None]
        assert first.functions["right"].greedy == 1.0 and first.unscored == 6  # 3 completions x 2 failed functions
        again = _score(suite, greedy="4").functions["right"]  # after a timeout killed the worker: a new one serves
        assert again.greedy == 0.0
        totals = suite.rewards.sandbox.pool.stats.totals  # type: ignore[union-attr]
        assert (totals["error"], totals["timeout"], totals["ok"]) == (2, 2, 2)
        summary = suite.rewards.sandbox.summary_line()  # type: ignore[union-attr]
        assert summary == "reward sandbox: 6 calls, 2 errors, 2 timeouts, 2 workers replaced", summary
    finally:
        suite.rewards.close()


def test_on_error_fail_stops_the_evaluation_naming_the_function(tmp_path):
    suite = load_suite(_suite(tmp_path, ["right", "raises"], reward_on_error="fail"), tmp_path)
    try:
        with pytest.raises(SuiteRewardFailed, match=r"reward function 'raises' failed \(error\): RuntimeError: no reward today"):
            _score(suite)
    finally:
        suite.rewards.close()


def test_a_suite_file_that_fails_to_load_in_the_sandbox_is_the_suites_error(tmp_path):
    from trainer.sources import DataError

    with pytest.raises(DataError, match="raised AttributeError: .* defines no function 'absent'"):
        load_suite(_suite(tmp_path, ["absent"]), tmp_path)


def _eval_spec(**suite: object) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "eval-mine",
            "model": {"source": "gs://example-bucket/export"},
            "hardware": {
                "accelerator": "cpu",
                "chips_per_vm": 1,
                "rollout_engine": "jax",
                "rollout_data_parallelism": 1,
                "rollout_tensor_parallelism": 1,
            },
            "output": "gs://example-bucket/rljob",
            "evaluation": {
                "suite": {
                    "name": "mine",
                    "data": "gs://example-bucket/rows.jsonl",
                    "rewards_path": "gs://example-bucket/r.py",
                    "rewards": ["f"],
                    **suite,
                },
                "checkpoint": {"format": "huggingface"},
            },
        }
    )


def test_the_suites_reward_limits_leave_the_spec_hash_at_their_defaults_and_are_refused_for_a_builtin():
    base = _eval_spec()
    assert "reward_timeout_s" not in base.canonical_json()
    assert _eval_spec(reward_on_error="zero", reward_timeout_s=30, reward_memory_mib=2048).content_hash() == base.content_hash()
    assert _eval_spec(reward_on_error="fail").content_hash() != base.content_hash()
    assert _eval_spec(reward_timeout_s=5).content_hash() != base.content_hash()
    with pytest.raises(ValidationError, match="reward limits are fixed"):
        SuiteSpec(name="arith", reward_timeout_s=5)
    with pytest.raises(ValidationError, match="reward_memory_mib"):
        SuiteSpec(
            name="mine", data="gs://example-bucket/rows.jsonl", rewards_path="gs://example-bucket/r.py", rewards=["f"], reward_memory_mib=1
        )


def test_an_evaluation_whose_reward_calls_mostly_fail_stops_rather_than_report_them_as_wrong_answers(tmp_path):
    """Under reward_on_error: zero: from the 10th failure, once more than half the calls failed (a long evaluation stops
    early), and at the end over all calls (trainer/stages/evaluate.py raises what mostly_failed says)."""
    suite = load_suite(_suite(tmp_path, ["right", "raises", "raises_too"]), tmp_path)
    try:
        for _ in range(4):  # a call per function and row: 2 of 3 fail, 8 failures so far
            assert _score(suite).functions["right"].greedy == 1.0
        assert suite.rewards.sandbox.mostly_failed().startswith("8 of 12 reward calls failed")  # type: ignore[union-attr]
        with pytest.raises(SuiteRewardFailed, match=r"^10 of 15 reward calls failed, more than half.*'raises_too' \(error\): KeyError"):
            _score(suite)
    finally:
        suite.rewards.close()
    half = load_suite(_suite(tmp_path, ["right", "raises"]), tmp_path)
    try:
        for _ in range(12):
            _score(half)
        assert half.rewards.sandbox.mostly_failed() is None  # type: ignore[union-attr]  # 12 of 24: not more than half
    finally:
        half.rewards.close()
