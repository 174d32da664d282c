"""grpo.async_rollout (MaxText's rl.use_agentic_rollout, trainer/contract/spec/async_rollout.py): typed, bounded and refused
naming the field, on cpu and on TPU; and the reasons it is refused, checked against the installed MaxText and Tunix so
that an upgrade which removes them fails this file (then run it again on the tiny job: docs/trainer.md, Async rollouts)."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.trainer.spec_edit import with_field
from trainer.contract import JobSpec, RunLayout
from trainer.contract.spec.async_rollout import MAX_CONCURRENCY
from trainer.sources import resolve_model
from trainer.stages.train import build_train_command

TPU_HARDWARE = {"accelerator": "v6e-8", "chips_per_vm": 8, "rollout_engine": "vllm"}


def _errors(data: dict) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(data)
    return {".".join(str(p) for p in e["loc"]): e["msg"] for e in caught.value.errors()}


def test_on_cpu_it_is_refused_naming_the_field_and_what_fails(tiny_spec_dict):
    for value in ({}, {"off_policy_steps": 1, "max_concurrency": 8}):
        errors = _errors(with_field(tiny_spec_dict, "grpo.async_rollout", value))
        (message,) = errors.values()  # the refusal is the spec's, with the field in its message
        assert message.startswith("Value error, grpo.async_rollout (MaxText's rl.use_agentic_rollout) cannot run"), message
        assert "force_on_policy_ratio" in message and "jax rollout engine on cpu" in message and "hangs" in message


def test_on_tpu_it_is_refused_too_saying_what_rljob_would_lose(tiny_spec_dict):
    data = with_field(with_field(tiny_spec_dict, "hardware", TPU_HARDWARE), "grpo.async_rollout", {"off_policy_steps": 2})
    (message,) = _errors(data).values()
    assert "grpo.async_rollout" in message and "force_on_policy_ratio" in message
    assert "on v6e-8 rljob's per-step samples and grpo.kl_estimator reach only the synchronous learner" in message
    assert "cpu" not in message


BAD = [
    ({"off_policy_steps": -1}, "grpo.async_rollout.off_policy_steps", "greater than or equal to 0"),
    ({"off_policy_steps": 10**9}, "grpo.async_rollout.off_policy_steps", "less than or equal"),
    ({"max_concurrency": 0}, "grpo.async_rollout.max_concurrency", "greater than or equal to 1"),
    ({"max_concurrency": MAX_CONCURRENCY + 1}, "grpo.async_rollout.max_concurrency", "less than or equal"),
    ({"use_agentic_rollout": True}, "grpo.async_rollout.use_agentic_rollout", "Extra inputs"),
]


@pytest.mark.parametrize(("value", "field", "reason"), BAD, ids=[f for _, f, _ in BAD])
def test_bad_values_are_refused_naming_the_field(tiny_spec_dict, value, field, reason):
    errors = _errors(with_field(tiny_spec_dict, "grpo.async_rollout", value))
    assert field in errors and reason in errors[field], errors


def test_left_null_the_command_line_keeps_rl_yml_and_the_hash_is_unchanged(tiny_spec_dict):
    spec = JobSpec.model_validate(tiny_spec_dict)
    assert spec.grpo.async_rollout is None
    assert "async_rollout" not in json.loads(spec.canonical_json())["grpo"]
    explicit = JobSpec.model_validate(with_field(tiny_spec_dict, "grpo.async_rollout", None))
    assert explicit.content_hash() == spec.content_hash()
    args = build_train_command(spec, RunLayout(spec.output, "rl-asyncrollout1"), resolve_model(spec)).args
    assert not [a for a in args if a.split("=")[0] in {"rl.use_agentic_rollout", "rl.off_policy_steps", "rl.max_concurrency"}]


def _train_rl_source() -> str:
    found = importlib.util.find_spec("maxtext.trainers.post_train.rl.train_rl")
    assert found is not None and found.origin is not None
    return Path(found.origin).read_text()


def test_the_pinned_tunix_cannot_build_the_agentic_config_train_rl_asks_for():
    """Reason 1 (both accelerators): train_rl passes these keywords straight to Tunix's agentic GRPOConfig, not through
    its _kwargs_supported_by guard, and the installed Tunix's class has neither. When a Tunix pin adds them this fails:
    run the tiny job with rl.use_agentic_rollout=true again and revisit the refusal."""
    from tunix.rl.agentic.agentic_grpo_learner import GrpoConfig as AgenticGrpoConfig

    passed: set[str] = set()
    for node in ast.walk(ast.parse(_train_rl_source())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "AgenticGrpoConfig":
            passed |= {k.arg for k in node.keywords if k.arg}
    missing = {"force_on_policy_ratio", "log_sampler_trainer_agreement"}
    assert missing <= passed
    assert not missing & {f.name for f in dataclasses.fields(AgenticGrpoConfig)}
    with pytest.raises(TypeError, match="force_on_policy_ratio"):
        AgenticGrpoConfig(force_on_policy_ratio=False)


def test_rljobs_wrappers_hook_only_the_synchronous_learner():
    """Reason 3 (why TPU is refused too): the sample recorder wraps RLLearner._compute_rewards and the KL estimator is
    installed on tunix.rl.grpo's GRPOConfig (trainer/maxtext_entry/sample_recorder.py, grpo_objective.py); the agentic
    learner is neither an RLLearner nor built from that config."""
    from tunix.rl import rl_learner
    from tunix.rl.agentic import agentic_grpo_learner
    from tunix.rl.grpo import grpo_learner

    from trainer.maxtext_entry import grpo_objective, sample_recorder

    assert not issubclass(agentic_grpo_learner.GrpoLearner, rl_learner.RLLearner)
    assert not issubclass(agentic_grpo_learner.GrpoConfig, grpo_learner.GrpoConfig)
    assert grpo_objective.GRPO_LEARNER_MODULE == "tunix.rl.grpo.grpo_learner"
    assert "rl_learner.RLLearner._compute_rewards" in Path(sample_recorder.__file__).read_text()
