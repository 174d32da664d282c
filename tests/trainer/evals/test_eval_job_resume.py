"""The evaluation run (trainer/evals/runner.py) with a stand-in model: outcomes written row by row in suite
order, a restart keeps the complete rows and generates only the rest (the same rows as an uninterrupted run),
outcomes of another suite content are discarded, a stop between batches keeps what was scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.contract import RunLayout
from trainer.contract.run.eval_report import EvalReport, RowOutcome
from trainer.contract.spec.eval_suite import EvalCheckpoint, EvalSampling
from trainer.evals.runner import Interrupted, evaluate_suite, progress_uri
from trainer.evals.suite import LoadedSuite, RewardFile, SuiteRow

CHECKPOINT = EvalCheckpoint(format="huggingface")


def exact(prompts, completions, tmvp_config, answer=None, **kwargs):
    return [1.0 if c == json.loads(a)[0] else 0.0 for c, a in zip(completions, answer, strict=True)]


class EchoModel:
    """Answers each question with a number derived from the row's seed: deterministic per row, whatever the batch."""

    def __init__(self):
        self.asked: list[str] = []

    def prompt(self, question, template):
        return template["TEMPLATE"].format(system_prompt="", question=question)

    def generate(self, prompts, seeds, sampling, settled):
        self.asked += prompts
        return [(str(seed % 3), [str((seed >> i) % 3) for i in range(sampling.samples)]) for seed in seeds]


def suite(rows: int = 10, answer: str = "1", samples: int = 3) -> LoadedSuite:
    return LoadedSuite(
        name="s",
        builtin=False,
        rows=tuple(SuiteRow(question=f"q{i}", answers=(answer, answer)) for i in range(rows)),
        rewards=RewardFile(source=b"exact", functions={"exact": exact}),
        template={"SYSTEM_PROMPT": "", "TEMPLATE": "Q: {question}"},
        answer="last-number",
        sampling=EvalSampling(samples=samples),
    )


def run(tmp_path: Path, job: str, s: LoadedSuite, model: EchoModel, **kw) -> tuple[RunLayout, EvalReport]:
    layout = RunLayout(str(tmp_path), job)
    return layout, evaluate_suite(s, model, layout=layout, checkpoint=CHECKPOINT, model_source="m", log=lambda _: None, batch_rows=3, **kw)


def outcomes(layout: RunLayout) -> list[RowOutcome]:
    return [RowOutcome.model_validate_json(line) for line in Path(layout.eval_outcomes).read_text().splitlines()]


def test_every_row_in_order_and_the_report_from_them(tmp_path):
    layout, report = run(tmp_path, "rl-whole", suite(), EchoModel())
    rows = outcomes(layout)
    assert [r.index for r in rows] == list(range(10)) and [r.question for r in rows] == [f"q{i}" for i in range(10)]
    assert EvalReport.model_validate_json(Path(layout.eval_report).read_text()) == report
    greedy_right = sum(r.greedy == "1" for r in rows)
    assert report.n == 10 and report.functions["exact"].pass_at_1.value == pytest.approx(greedy_right / 10)
    assert report.suite.content_hash == suite().content_hash and report.primary == "exact"


def test_a_restart_keeps_complete_rows_and_generates_only_the_rest(tmp_path):
    whole, _ = run(tmp_path, "rl-whole", suite(), EchoModel())
    expected = Path(whole.eval_outcomes).read_text()
    partial = RunLayout(str(tmp_path), "rl-partial")
    Path(partial.eval_dir).mkdir(parents=True)
    Path(progress_uri(partial)).write_text(Path(progress_uri(whole)).read_text())
    lines = expected.splitlines(keepends=True)
    Path(partial.eval_outcomes).write_text("".join(lines[:4]) + lines[4][:30])  # four rows and a torn fifth
    model = EchoModel()
    run(tmp_path, "rl-partial", suite(), model)
    assert model.asked == [f"Q: q{i}" for i in range(4, 10)]
    assert Path(partial.eval_outcomes).read_text() == expected


def test_outcomes_of_another_suite_content_are_discarded(tmp_path):
    layout, _ = run(tmp_path, "rl-x", suite(answer="1"), EchoModel())
    model = EchoModel()
    _, report = run(tmp_path, "rl-x", suite(answer="2"), model)
    assert len(model.asked) == 10  # every row again
    assert [r.answers for r in outcomes(layout)] == [["2", "2"]] * 10
    assert report.suite.content_hash == suite(answer="2").content_hash


def test_a_stop_between_batches_keeps_the_scored_rows(tmp_path):
    asked = iter([None, "SIGTERM"])
    with pytest.raises(Interrupted, match="after 3 of 10 rows"):
        run(tmp_path, "rl-stop", suite(), EchoModel(), should_stop=lambda: next(asked))
    layout = RunLayout(str(tmp_path), "rl-stop")
    assert len(outcomes(layout)) == 3 and not Path(layout.eval_report).exists()
