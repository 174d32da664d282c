"""An eval job through the pipeline with stand-ins for to_huggingface and the model: the stages it runs
(export only for a MaxText checkpoint), the conversion's command, the evaluated directory, the events, and a
deleted checkpoint failing for good with a message that says why."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.trainer.evals.test_eval_job_resume import EchoModel
from tests.trainer.test_pipeline_exit_codes import FakeMaxText
from trainer.contract import ExitCode, JobSpec, RunLayout, Stage, parse_event
from trainer.pipeline import describe_plan, run_pipeline
from trainer.progress.event_reporter import EventReporter
from trainer.sources import resolve_model
from trainer.stages.context import JobContext
from trainer.storage import store_for


@pytest.fixture
def eval_spec(tiny_spec_dict, tmp_path):
    rows = tmp_path / "suite.jsonl"
    rows.write_text("".join(json.dumps({"question": f"q{i}", "answer": f"#### {i % 3}"}) + "\n" for i in range(5)))
    rewards = tmp_path / "rewards.py"
    rewards.write_text(
        "import json\n\ndef exact(prompts, completions, tmvp_config, answer=None, **kw):\n"
        "    return [1.0 if c == json.loads(a)[0] else 0.0 for c, a in zip(completions, answer)]\n"
    )
    template = tmp_path / "template.json"
    template.write_text(json.dumps({"SYSTEM_PROMPT": "", "TEMPLATE": "Q: {question}"}))
    params = tmp_path / "train-run" / "checkpoints" / "4" / "model_params"

    def make(fmt: str) -> JobSpec:
        checkpoint = (
            {"format": fmt, "params": str(params), "job_id": "rl-train0000001", "label": "step-4"} if fmt == "maxtext" else {"format": fmt}
        )
        suite = {"name": "mine", "data": str(rows), "rewards_path": str(rewards), "rewards": ["exact"], "prompt_template": str(template)}
        data = {k: tiny_spec_dict[k] for k in ("name", "model", "hardware", "output")}
        return JobSpec.model_validate({**data, "evaluation": {"suite": suite, "checkpoint": checkpoint}})

    return make, params


def _run(spec: JobSpec, tmp_path: Path, monkeypatch) -> tuple[int, RunLayout, FakeMaxText, list[str]]:
    loaded: list[str] = []

    def fake_load(model, tokenizer, *, local, revision=None):
        loaded.append(model)
        return object(), object()

    monkeypatch.setattr("trainer.evals.hf_sampler.load_model", fake_load)
    monkeypatch.setattr("trainer.evals.hf_sampler.HfGenerator", lambda model, tokenizer: EchoModel())
    layout = RunLayout(str(tmp_path / "runs"), "rl-evaljob00001")
    fake = FakeMaxText(layout)
    reporter = EventReporter(store_for(layout.root), layout.events, layout.job_id, stdout=io.StringIO())
    ctx = JobContext(spec=spec, layout=layout, work_dir=Path(layout.root), reporter=reporter, run_command=fake, model=resolve_model(spec))
    Path(layout.root).mkdir(parents=True, exist_ok=True)
    return run_pipeline(ctx), layout, fake, loaded


def _events(layout: RunLayout):
    return [parse_event(line) for line in Path(layout.events).read_text().splitlines()]


def test_a_huggingface_checkpoint_is_evaluated_where_it_is(eval_spec, tmp_path, monkeypatch):
    make, _ = eval_spec
    spec = make("huggingface")
    code, layout, fake, loaded = _run(spec, tmp_path, monkeypatch)
    assert code == ExitCode.SUCCESS and fake.calls == [] and loaded == [spec.model.source]
    events = _events(layout)
    export = next(e for e in events if e.type == "stage_finished" and e.stage == Stage.EXPORT)
    assert export.skipped and export.reason == "a Hugging Face checkpoint needs no conversion"
    report = next(e for e in events if e.type == "eval_report").report
    assert report.n == 5 and report.primary == "exact" and report.model_source == spec.model.source
    assert Path(layout.stage_marker(Stage.EVALUATE)).exists() and events[-1].ok
    assert describe_plan(spec, layout, resolve_model(spec)) == []
    # A rerun finds the evaluate stage done and evaluates nothing again.
    code, _, _, loaded = _run(spec, tmp_path, monkeypatch)
    assert code == ExitCode.SUCCESS and loaded == []


def test_a_maxtext_checkpoint_is_converted_into_the_eval_jobs_own_run_first(eval_spec, tmp_path, monkeypatch):
    make, params = eval_spec
    params.mkdir(parents=True)
    (params / "data").write_bytes(b"x")
    spec = make("maxtext")
    code, layout, fake, loaded = _run(spec, tmp_path, monkeypatch)
    assert code == ExitCode.SUCCESS and len(fake.calls) == 1 and "to_huggingface" in fake.calls[0]
    assert loaded == [layout.export_dir]
    [(stage, command)] = describe_plan(spec, layout, resolve_model(spec))
    assert stage == Stage.EXPORT and f"load_parameters_path={params}" in command.args
    assert f"base_output_directory={layout.export_dir}" in command.args
    report = next(e for e in _events(layout) if e.type == "eval_report").report
    assert report.checkpoint.label == "step-4" and report.model_source == layout.export_dir


def test_a_deleted_checkpoint_fails_for_good_and_says_why(eval_spec, tmp_path, monkeypatch):
    make, params = eval_spec
    code, layout, fake, loaded = _run(make("maxtext"), tmp_path, monkeypatch)
    assert code == ExitCode.NON_RETRYABLE and fake.calls == [] and loaded == []
    finished = _events(layout)[-1]
    assert finished.failed_stage == Stage.EXPORT
    assert f"the checkpoint {params} of job rl-train0000001 has no files: it was deleted" in finished.message
    assert "keep_last_checkpoints" in finished.message


def test_an_eval_job_whose_reward_calls_mostly_failed_fails_for_good_and_reports_no_scores(eval_spec, tmp_path, monkeypatch):
    """5 rows, each call of `exact` raising (under reward_on_error: zero, too few to stop early): the job fails at the
    evaluation's end with the sandbox's count, and no eval report stands for answers nobody scored."""
    make, _ = eval_spec
    spec = make("huggingface")
    Path(spec.evaluation.suite.rewards_path).write_text("def exact(prompts, completions, **kw):\n    raise KeyError('answer')\n")  # type: ignore[union-attr, arg-type]
    code, layout, _, _ = _run(spec, tmp_path, monkeypatch)
    assert code == ExitCode.NON_RETRYABLE
    events = _events(layout)
    assert not any(e.type == "eval_report" for e in events)
    assert events[-1].failed_stage == Stage.EVALUATE and events[-1].message.startswith("5 of 5 reward calls failed, more than half")
