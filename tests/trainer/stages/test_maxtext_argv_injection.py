"""MaxText's own config loader on the trainer's real command lines: no spec string is interpreted.

Each stage's argv is built by the trainer's own builders (convert, train, export) and handed to
`maxtext.configs.pyconfig.initialize_pydantic`, the loader train_rl, to_maxtext and to_huggingface
call: it reads `key=value` arguments with OmegaConf.from_cli (YAML, then `${...}` interpolation).
Arguments starting with `--` are parsed by argparse or absl (to_maxtext, to_huggingface) and the
`--rljob_*` ones by our entry shims, never by OmegaConf, so they are left out here as the real
entry points leave them out.

Two halves: with validation bypassed, the loader really does resolve `${oc.env:...}` into an
environment variable's value (the threat is real) and retypes or truncates other values, and the
spec refuses each of those values; with validation on, every value the spec accepts (built from the
very characters it allows) reaches MaxText exactly as written. Importing MaxText takes ~15 s.
"""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from tests.trainer.conftest import TINY_HF_CONFIG
from tests.trainer.spec_edit import with_field
from trainer.contract import JobSpec, RunLayout
from trainer.contract.spec.values import LOCATION_PUNCTUATION
from trainer.runner import StageCommand
from trainer.sources import resolve_model
from trainer.stages.convert import build_convert_command
from trainer.stages.export import build_export_command
from trainer.stages.train import build_train_command

# MaxText's own config object warns about one of its enums when it logs itself; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

CANARY_ENV = "RLJOB_ARGV_CANARY"
CANARY = "canary-secret-9d41"
JOB_ID = "rl-argvcheck001"


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(CANARY_ENV, CANARY)
    return CANARY


def _commands(spec: JobSpec) -> dict[str, StageCommand]:
    layout, model = RunLayout(spec.output, JOB_ID), resolve_model(spec)
    return {
        "convert": build_convert_command(spec, layout, model),
        "train": build_train_command(spec, layout, model),
        "export": build_export_command(spec, layout, model, actor_step=3),
    }


def _key_values(command: StageCommand) -> dict[str, str]:
    pairs = (a.split("=", 1) for a in command.args if "=" in a and not a.startswith("--"))
    return {key: value for key, value in pairs}


def _read_back(config: BaseModel, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _as_written(written: str, read: Any) -> bool:
    if isinstance(read, bool):
        return written == str(read).lower()
    if isinstance(read, enum.Enum):
        return written == str(read.value)
    if isinstance(read, (int, float)):
        return float(written) == read
    return written == read


def _bypassing_validation(spec: BaseModel, dotted: str, value: Any) -> Any:
    """`spec` with one field replaced and no validator run: what a spec would be without the checks."""
    head, _, rest = dotted.partition(".")
    new = value if not rest else _bypassing_validation(getattr(spec, head), rest, value)
    return spec.model_copy(update={head: new})


# (spec field, hostile value, the key=value argument it becomes, stage)
HOSTILE = [
    ("dataset.subset", "${oc.env:" + CANARY_ENV + "}", "hf_subset", "train"),
    ("dataset.train_split", "train${oc.env:" + CANARY_ENV + "}", "train_split", "train"),
    ("dataset.eval_split", "${run_name}", "eval_split", "train"),  # another setting's value
    ("dataset.name", "org/${oc.env:" + CANARY_ENV + "}", "dataset_name", "train"),
    ("output", "/runs/${oc.env:" + CANARY_ENV + "}", "base_output_directory", "convert"),
    ("output", "/runs/a #note", "base_output_directory", "export"),  # YAML comment: the path is cut short
    ("model.tokenizer", "/tok/${oc.env:" + CANARY_ENV + "}", "tokenizer_path", "train"),
    ("dataset.prompt_template", "/t/${oc.env:" + CANARY_ENV + "}.json", "data_template_path", "train"),
    ("grpo.rewards.functions_path", "/r/${oc.env:" + CANARY_ENV + "}.py", "reward_functions_path", "train"),
    ("dataset.processor_path", "/p/${oc.env:" + CANARY_ENV + "}.py", "dataset_processor_path", "train"),
    ("dataset.subset", "on", "hf_subset", "train"),  # YAML: a boolean
    ("dataset.subset", "None", "hf_subset", "train"),  # MaxText: None
]


@pytest.mark.parametrize(("field", "value", "key", "stage"), HOSTILE, ids=[f"{f}={v}" for f, v, _, _ in HOSTILE])
def test_without_validation_maxtext_would_interpret_the_value_and_the_spec_refuses_it(
    maxtext_loader, canary, tiny_spec_dict, field, value, key, stage
):
    spec = JobSpec.model_validate(tiny_spec_dict)
    command = _commands(_bypassing_validation(spec, field, value))[stage]
    written = _key_values(command)[key]
    assert value in written  # the builders pass spec strings through untouched: validation is the only guard
    try:
        read = _read_back(maxtext_loader(command), key)
    except (ValidationError, ValueError) as e:  # retyped into something MaxText's own schema refuses
        read = e
    assert isinstance(read, Exception) or not _as_written(written, read), read
    if "oc.env" in value:
        assert read == written.replace("${oc.env:" + CANARY_ENV + "}", canary)  # the environment, read

    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate(with_field(tiny_spec_dict, field, value))
    assert field in {".".join(str(p) for p in e["loc"]) for e in refused.value.errors()}


def test_every_accepted_value_reaches_maxtext_as_written(maxtext_loader, canary, tiny_spec_dict, tmp_path):
    # Paths built from every character a location may hold: allowing one more that MaxText's loader
    # interprets would put it here and fail this test.
    odd = tmp_path / f"x{LOCATION_PUNCTUATION.replace('/', '')}y"
    model_dir = odd / "model"
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text(json.dumps(TINY_HF_CONFIG))
    data = with_field(tiny_spec_dict, "model.source", str(model_dir))
    data = with_field(data, "output", str(odd / "runs"))
    data = with_field(data, "dataset.prompt_template", str(odd / "template.json"))
    data = with_field(data, "grpo.rewards.functions_path", str(odd / "rewards.py"))
    data = with_field(data, "dataset.processor_path", str(odd / "process.py"))
    data = with_field(data, "dataset.train_files", [])
    data = with_field(data, "dataset.eval_files", [])
    data = with_field(data, "dataset.subset", "a1.b_c-d")
    data = with_field(data, "dataset.train_split", "train_v2.x")
    data = with_field(data, "dataset.eval_split", "e1")
    # Floats as Python writes them at the edges of their ranges (exponents, negatives, the limits).
    grpo = {**data["grpo"], "learning_rate": 1.5e-07, "beta": 1e-10, "temperature": 100.0, "top_p": 0.999999}
    rewards = {**grpo["rewards"], "exact_answer": -1000.0, "exact_format_match": 5e-324}
    data = with_field(data, "grpo", {**grpo, "rewards": rewards})
    spec = JobSpec.model_validate(data)

    for stage, command in _commands(spec).items():
        config = maxtext_loader(command)
        arguments = _key_values(command)
        assert len(arguments) > 10, stage
        read = {key: _read_back(config, key) for key in arguments}
        changed = {key: (value, read[key]) for key, value in arguments.items() if not _as_written(value, read[key])}
        assert not changed, (stage, changed)
        assert canary not in json.dumps(config.model_dump(mode="json"), default=str)
