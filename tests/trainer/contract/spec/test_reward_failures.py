"""A job whose reward calls mostly fail does not end as if it trained (trainer/contract/spec/reward_sandbox.py's rule):
the train stage stops, early in a long job and at train_rl's end in a short one, with a message that says so, and
the job fails for good (a retry would fail the same way). Real sandbox workers; the train stage through the
pipeline's subprocess seam."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from trainer.contract import ExitCode, JobSpec, RunLayout, parse_event
from trainer.contract.spec.reward_sandbox import MIN_FAILED_CALLS_TO_STOP, REWARD_FAILED_LINE_PREFIX, RewardFailure, RewardSandboxSettings
from trainer.maxtext_entry.reward_sandbox import RewardSandbox
from trainer.pipeline import run_pipeline
from trainer.progress.event_reporter import EventReporter
from trainer.rewards_sandbox.proxy import RewardFunctionFailed, SandboxedReward
from trainer.sources import resolve_model
from trainer.stages.context import JobContext
from trainer.storage import store_for

REWARDS = """
def good(prompts, completions, **kwargs):
    return [1.0] * len(completions)

def broken(prompts, completions, **kwargs):
    raise KeyError("answer")
"""
BATCH = {"prompts": ["q"], "completions": ["a"]}
ZERO = RewardSandboxSettings(timeout_s=10, memory_mib=1024, on_error="zero")


@pytest.fixture
def sandbox(tmp_path):
    path = tmp_path / "rewards.py"
    path.write_text(REWARDS)
    box = RewardSandbox(str(path), ["good", "broken"], ZERO)
    yield box
    box.close()


def test_a_long_job_stops_at_the_tenth_failure_when_most_calls_failed(sandbox):
    lines: list[str] = []
    broken = SandboxedReward(sandbox.function("broken").pool, "broken", "zero", report_line=lines.append)
    for _ in range(MIN_FAILED_CALLS_TO_STOP - 1):
        assert broken(**BATCH) == [0.0]  # scored 0, as on_error: zero says, while too few have failed to judge
    with pytest.raises(RewardFunctionFailed, match=r"10 of 10 reward calls failed, more than 50%.*'broken'.*KeyError"):
        broken(**BATCH)
    failure = RewardFailure.model_validate_json(lines[-1].removeprefix(REWARD_FAILED_LINE_PREFIX))
    assert (failure.failed, failure.calls, failure.function) == (10, 10, "broken")


def test_failures_that_are_not_most_calls_are_scored_zero_and_training_goes_on(sandbox):
    good, broken = sandbox.function("good"), sandbox.function("broken")
    for _ in range(MIN_FAILED_CALLS_TO_STOP + 2):
        assert good(**BATCH) == [1.0]
        assert broken(**BATCH) == [0.0]  # half the calls failed: not more than half


def _report_lines(capfd) -> list[RewardFailure]:
    out = capfd.readouterr().out
    return [
        RewardFailure.model_validate_json(line.removeprefix(REWARD_FAILED_LINE_PREFIX))
        for line in out.splitlines()
        if line.startswith(REWARD_FAILED_LINE_PREFIX)
    ]


def test_a_short_job_whose_few_calls_mostly_failed_reports_it_when_train_rl_ends(sandbox, capfd):
    sandbox.function("good")(**BATCH)
    sandbox.function("broken")(**BATCH)
    sandbox.function("broken")(**BATCH)
    sandbox.close()
    (failure,) = _report_lines(capfd)
    assert (failure.failed, failure.calls, failure.function, failure.outcome) == (2, 3, "broken", "error")


def test_a_short_job_with_half_its_calls_failed_reports_nothing(sandbox, capfd):
    for name in ("good", "broken"):
        sandbox.function(name)(**BATCH)
    sandbox.close()
    assert _report_lines(capfd) == []


class TrainRlThatFinishedOnZeros:
    """train_rl ran to its end (a checkpoint, exit 0) while the sandbox's last line said most calls failed."""

    def __init__(self, layout: RunLayout):
        self.layout = layout

    def __call__(self, command, log_path: Path, *, on_line=None, **kwargs):
        if "to_maxtext" in command.module:
            out = next(a.split("=", 1)[1] for a in command.args if a.startswith("base_output_directory="))
            (Path(out) / "0" / "items").mkdir(parents=True, exist_ok=True)
            (Path(out) / "0" / "items" / "data").write_bytes(b"x")
        elif "train_rl" in command.module:
            params = Path(self.layout.actor_checkpoints) / "3" / "model_params"
            params.mkdir(parents=True, exist_ok=True)
            (params / "data").write_bytes(b"x")
            failure = RewardFailure.mostly_failed(12, 14, ("judge", "crash", "the reward worker died (exit status 1)"))
            assert failure is not None and on_line is not None
            on_line(REWARD_FAILED_LINE_PREFIX + failure.model_dump_json())
        elif "to_huggingface" in command.module:
            raise AssertionError("the export ran after a train stage whose rewards mostly failed")


def test_the_train_stage_fails_for_good_when_train_rl_finished_on_mostly_failed_rewards(tmp_path, tiny_spec_dict):
    layout = RunLayout(str(tmp_path / "runs"), "rl-test")
    Path(layout.root).mkdir(parents=True)
    spec = JobSpec.model_validate({**tiny_spec_dict, "dataset": {"name": "openai/gsm8k"}})
    reporter = EventReporter(store_for(layout.root), layout.events, layout.job_id, stdout=io.StringIO())
    fake = TrainRlThatFinishedOnZeros(layout)
    ctx = JobContext(spec=spec, layout=layout, work_dir=Path(layout.root), reporter=reporter, run_command=fake, model=resolve_model(spec))
    assert run_pipeline(ctx) == ExitCode.NON_RETRYABLE
    final = [parse_event(line) for line in Path(layout.events).read_text().splitlines()][-1]
    assert final.failed_stage == "train" and final.exit_code == ExitCode.NON_RETRYABLE
    assert "12 of 14 reward calls failed" in final.message and "'judge' (crash)" in final.message
    json.dumps(final.model_dump(mode="json"))
