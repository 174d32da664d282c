"""Bad specs are rejected before anything runs: exit 65, every bad field named, nothing written."""

from __future__ import annotations

import pytest

from tests.trainer.conftest import write_spec
from tests.trainer.spec_edit import with_field
from trainer.cli import main
from trainer.contract import ExitCode

BAD_FIELDS = [
    ("name", "Not_A_Label", "name"),
    ("model.name", "Llama 3", "model.name"),
    ("model.source", "relative/dir/x", "model.source"),
    ("model.revision", "main", "model"),  # a revision only applies to a hub source
    ("model.dims.base_num_kv_heads", 3, "model.dims"),
    ("grpo.num_generations", 1, "grpo.num_generations"),
    ("grpo.max_target_length", 64, "grpo"),
    ("grpo.epsilon", 1.5, "grpo.epsilon"),
    ("grpo.loss_algo", "ppo", "grpo.loss_algo"),
    ("grpo.kl_estimator", "low_var_kl", "grpo.kl_estimator"),  # Tunix's name, not the spec's
    ("grpo.loss_agg_mode", "sequence-mean", "grpo.loss_agg_mode"),
    ("grpo.epsilon_high", 0.1, "grpo"),  # below epsilon (0.2)
    ("grpo.rewards.functions", [], "grpo.rewards"),
    ("hardware.rollout_engine", "vllm", "hardware"),
    ("hardware.rollout_tensor_parallelism", 0, "hardware.rollout_tensor_parallelism"),
    ("dataset.train_files", ["/data/train.csv"], "dataset.train_files"),
    ("dataset.eval_files", [], "(spec)"),  # file data with num_test_batches > 0 needs eval files
    ("output", "runs/here", "output"),
    ("export.hub_repo", "not a repo", "export.hub_repo"),
]


@pytest.mark.parametrize(("field", "value", "named"), BAD_FIELDS, ids=[f for f, _, _ in BAD_FIELDS])
def test_each_bad_field_is_rejected_and_named(tmp_path, tiny_spec_dict, capsys, field, value, named):
    spec = write_spec(tmp_path / "spec.yaml", with_field(tiny_spec_dict, field, value))
    assert main(["run", "--spec", str(spec)]) == ExitCode.INVALID_SPEC
    err = capsys.readouterr().err
    assert f"  {named}" in err, err
    assert not (tmp_path / "runs").exists()


def test_every_bad_field_is_reported_at_once(tmp_path, tiny_spec_dict, capsys):
    data = with_field(with_field(with_field(tiny_spec_dict, "grpo.num_generations", 1), "grpo.beta", -1), "name", "BAD")
    spec = write_spec(tmp_path / "spec.yaml", data)
    assert main(["plan", "--spec", str(spec)]) == ExitCode.INVALID_SPEC
    err = capsys.readouterr().err
    for named in ("grpo.num_generations", "grpo.beta", "name"):
        assert f"  {named}:" in err
    assert "3 problems" in err


def test_missing_local_input_is_named_and_nothing_written(tmp_path, tiny_spec_dict, capsys):
    spec = write_spec(tmp_path / "spec.yaml", with_field(tiny_spec_dict, "model.source", str(tmp_path / "nope")))
    assert main(["run", "--spec", str(spec)]) == ExitCode.INVALID_SPEC
    assert "model.source:" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_unset_spec_variable_is_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("RLJOB_TINY_DIR", raising=False)
    from tests.trainer.conftest import TINY_EXAMPLE

    assert main(["plan", "--spec", str(TINY_EXAMPLE)]) == ExitCode.INVALID_SPEC
    assert "RLJOB_TINY_DIR is not set" in capsys.readouterr().err


def test_unknown_field_is_rejected(tmp_path, tiny_spec_dict, capsys):
    spec = write_spec(tmp_path / "spec.yaml", with_field(tiny_spec_dict, "grpo.learning_rate_typo", 1))
    assert main(["run", "--spec", str(spec)]) == ExitCode.INVALID_SPEC
    assert "grpo.learning_rate_typo" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"SYSTEM_PROMPT": "", "TEMPLATE": "{question} = {answer}"}', "TEMPLATE may use only {system_prompt}, {question}"),
        ('{"TEMPLATE": "{question}"}', "SYSTEM_PROMPT must be a string"),
        ("not json", "is not JSON"),
    ],
)
def test_a_prompt_template_maxtext_cannot_fill_is_refused_before_any_stage(tmp_path, tiny_spec_dict, capsys, content, reason):
    template = tmp_path / "template.json"
    template.write_text(content)
    spec = write_spec(tmp_path / "spec.yaml", with_field(tiny_spec_dict, "dataset.prompt_template", str(template)))
    assert main(["run", "--spec", str(spec), "--job-id", "rl-template0001"]) == ExitCode.INVALID_SPEC
    err = capsys.readouterr().err
    assert "dataset.prompt_template:" in err and reason in err, err
    assert not (tmp_path / "runs" / "rl-template0001" / "events.jsonl").exists()


def test_a_prompt_template_reaches_train_rl(tiny_spec_dict, tmp_path):
    from trainer.contract import JobSpec, RunLayout
    from trainer.sources import resolve_model
    from trainer.stages.train import build_train_command

    template = tmp_path / "t.json"
    spec = JobSpec.model_validate(with_field(tiny_spec_dict, "dataset.prompt_template", str(template)))
    command = build_train_command(spec, RunLayout("/out", "rl-x"), resolve_model(spec))
    assert f"data_template_path={template}" in command.args
