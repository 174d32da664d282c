"""The fold of trainer events is a pure reducer over RunReport (service/domain/progress.py fold_report): each
event gives a new report and leaves the one it was given as it was, whatever the event changes. Every kind of event
is folded here, from an empty report and from one that holds every part (checkpoints, an eval's points and report,
hangs included), so a part changed in place shows whichever event changed it."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from service.domain.progress import fold_report
from service.domain.records.run_report import Artifact, RunReport
from tests.service.eval_runs import FUNCTION, outcome_rows, suite_hash
from trainer.contract import (
    ArtifactWritten,
    CheckpointSaved,
    EvalReported,
    EvalResult,
    GoodputMeasured,
    HangDetected,
    RunFinished,
    RunStarted,
    RunStorage,
    Stage,
    StageFinished,
    StageStarted,
    StorageMeasured,
    TrainerEvent,
    TrainStep,
)
from trainer.contract.run.eval_report import EvalReport, summarize
from trainer.contract.run.evaluation import EvalSummary
from trainer.contract.run.goodput import TrainGoodput
from trainer.contract.spec.eval_suite import EvalCheckpoint, EvalSampling, SuiteIdentity

NOW = datetime(2030, 1, 1, tzinfo=UTC)
JOB = "rl-reducer00001"


def _events() -> list[TrainerEvent]:
    common = {"time": NOW, "job_id": JOB}
    summary = EvalSummary(
        label="before",
        step=0,
        n=4,
        correct=1,
        format_correct=4,
        partial_correct=1,
        samples_per_row=1,
        sampling="greedy, pass",
        rows_file="before.jsonl",
    )
    rows = outcome_rows([1, 0, 1])
    suite = SuiteIdentity(
        name="arith", builtin=True, content_hash=suite_hash("arith"), rows=3, reward_functions=[FUNCTION], sampling=EvalSampling()
    )
    report = EvalReport(
        suite=suite,
        checkpoint=EvalCheckpoint(format="huggingface"),
        model_source="/models/tiny",
        n=3,
        k=2,
        functions={FUNCTION: summarize(rows, FUNCTION)},
        primary=FUNCTION,
        generate_s=1.0,
        outcomes_file="/r/eval/outcomes.jsonl",
    )
    return [
        RunStarted(seq=0, attempt=2, run_uri="/r", **common),
        StageStarted(seq=1, stage=Stage.TRAIN, **common),
        TrainStep(seq=2, step=3, total_steps=9, reward_mean=0.5, loss=0.1, **common),
        EvalResult(seq=3, step=3, accuracy=0.25, summary=summary, **common),
        ArtifactWritten(seq=4, name="hf", uri="/r/hf", size_bytes=7, **common),
        StorageMeasured(seq=5, stage=Stage.TRAIN, storage=RunStorage.of_files([("hf/m", 7)]), **common),
        GoodputMeasured(seq=6, attempt=2, train=TrainGoodput(elapsed_s=3.0, parts={"rollout": 1.0}), **common),
        StageFinished(seq=7, stage=Stage.TRAIN, duration_s=5.0, **common),
        CheckpointSaved(seq=8, step=3, params="/r/checkpoints/actor/3/model_params", **common),
        EvalReported(seq=9, report=report, **common),
        HangDetected(seq=10, attempt=2, stage=Stage.TRAIN, step=3, idle_s=61.0, limit_s=60.0, stacks="/r/logs/stacks.log", **common),
        RunFinished(seq=11, ok=True, exit_code=0, **common),
    ]


def _full_report() -> RunReport:
    """A report that already holds every part, so an event that changed a part in place would show."""
    report = RunReport(latest_metrics={"kl": 0.2}, artifacts={"ckpt": Artifact(name="ckpt", uri="/r/ckpt")})
    for event in _events():
        folded = fold_report(report, event)
        assert folded is not None
        report = folded.report
    return report


def test_each_event_gives_a_new_report_and_leaves_the_given_one_unchanged() -> None:
    for start in (RunReport(), _full_report()):
        for event in _events():
            before = copy.deepcopy(start)
            folded = fold_report(start, event)
            assert folded is not None and folded.log, event.type
            assert start == before, f"{event.type} changed the report it was given"


def test_the_folded_report_holds_what_the_events_said() -> None:
    report = _full_report()
    assert (report.attempt, report.stage, report.step, report.total_steps) == (2, Stage.TRAIN, 3, 9)
    assert report.latest_metrics == {"kl": 0.2, "reward_mean": 0.5, "loss": 0.1, "eval_accuracy": 0.25}
    assert [s.step for s in report.recent_train_steps] == [3] and [p.label for p in report.eval_points] == ["before"]
    assert set(report.artifacts) == {"ckpt", "hf"} and report.storage is not None and set(report.goodput) == {2}
    assert report.stage_times[Stage.TRAIN].duration_s == 5.0 and report.outcome is not None and report.outcome.ok
    assert report.checkpoints == {3: "/r/checkpoints/actor/3/model_params"}
    assert report.eval_report is not None and report.eval_report.n == 3
    assert [(h.attempt, h.step, h.stage) for h in report.hangs] == [(2, 3, "train")]
