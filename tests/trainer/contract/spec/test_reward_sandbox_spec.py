"""grpo.rewards' sandbox fields (on_error, timeout_s, memory_mib): bounds, the spec's hash, what reaches the entry shim,
and the train stage's message when a reward failed under on_error: fail."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from trainer.contract import JobSpec, RunLayout
from trainer.contract.run.shim_config import pop_shim_config
from trainer.contract.spec.reward_sandbox import REWARD_FAILED_LINE_PREFIX, RewardFailure, RewardSandboxSettings
from trainer.progress.train_rl_events import EvalLineReader
from trainer.runner import StageFailed
from trainer.sources import resolve_model
from trainer.stages.train import build_train_command, report_train_line


def _spec(tiny_spec_dict: dict, **rewards: object) -> JobSpec:
    data = dict(tiny_spec_dict)
    data["grpo"] = {**data["grpo"], "rewards": {**data["grpo"].get("rewards", {}), **rewards}}
    return JobSpec.model_validate(data)


def test_the_sandbox_fields_at_their_defaults_leave_the_specs_hash_as_it_was(tiny_spec_dict):
    spec = _spec(tiny_spec_dict)
    assert '"timeout_s"' not in spec.canonical_json() and '"on_error"' not in spec.canonical_json()
    assert _spec(tiny_spec_dict, timeout_s=30, memory_mib=2048, on_error="zero").content_hash() == spec.content_hash()
    assert _spec(tiny_spec_dict, on_error="fail").content_hash() != spec.content_hash()
    assert _spec(tiny_spec_dict, timeout_s=5).content_hash() != spec.content_hash()


@pytest.mark.parametrize(
    ("field", "value"),
    [("timeout_s", 0), ("timeout_s", 3601), ("memory_mib", 255), ("memory_mib", 262_145), ("on_error", "retry")],
)
def test_out_of_bounds_sandbox_fields_are_refused_naming_the_field(tiny_spec_dict, field, value):
    with pytest.raises(ValidationError, match=field):
        _spec(tiny_spec_dict, **{field: value})


def test_sandbox_fields_without_reward_functions_are_refused(tiny_spec_dict):
    data = dict(tiny_spec_dict)
    data["grpo"] = {**data["grpo"], "rewards": {"on_error": "fail"}}
    with pytest.raises(ValidationError, match="on_error apply to your own reward functions"):
        JobSpec.model_validate(data)


def test_the_specs_limits_and_policy_reach_the_entry_shim(tiny_spec_dict):
    spec = _spec(tiny_spec_dict, timeout_s=7.5, memory_mib=1024, on_error="fail")
    command = build_train_command(spec, RunLayout("/out", "rl-x"), resolve_model(spec))
    settings = pop_shim_config(list(command.args))[0].reward_sandbox
    assert settings == RewardSandboxSettings(timeout_s=7.5, memory_mib=1024, on_error="fail")


def test_a_reward_failure_line_is_kept_for_the_stages_message_and_reports_no_event():
    failures: list[RewardFailure] = []
    failure = RewardFailure(function="judge", error="ZeroDivisionError: division by zero", outcome="error")

    class NoEvents:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"a reward failure line reported {name}")

    line = f"{REWARD_FAILED_LINE_PREFIX}{failure.model_dump_json()}"
    report_train_line(line, NoEvents(), RunLayout("/out", "rl-x"), EvalLineReader(start_step=0, total_steps=2), failures)  # type: ignore[arg-type]
    assert failures == [failure]
    assert "reward function 'judge' failed (error): ZeroDivisionError" in failure.message()
    # run_train re-raises train_rl's failure with it: the job's failure message names the function before the exit.
    stage_failed = StageFailed("trainer.maxtext_entry.train_rl_entry", 1, Path("/l/train.log"), "", message=failure.message())
    assert str(stage_failed).startswith("reward function 'judge' failed") and "exited with 1" in str(stage_failed)
