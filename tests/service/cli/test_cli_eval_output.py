"""How `rljob status` writes a job's evaluations (service/cli/output.py), over JobPublic.eval bodies
made here: before -> after (or the newest step) with 95% intervals and n, the paired change, or
why there is none; then through the CLI against the real app on a port, whose job gets its
evaluations as `eval` events. The dashboard writes the same numbers (tests/dashboard/unit/eval.test.mjs)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from harness.live_server import served as serve_in_thread
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.cli.main import app as cli
from service.cli.output import eval_difference_text, eval_text, print_job, whole_percent
from service.config import Settings
from service.domain.records.job_eval_models import JobEval
from service.domain.records.models import JobRecord, Placement
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.domain.views import to_public
from tests.service.conftest import Api, add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, record_spec, spec_body, wait_for_phase, wait_until
from trainer.contract import EvalResult
from trainer.contract.run.evaluation import EvalSummary, paired_difference


def _point(label: str, step: int, accuracy: float, ci95: tuple[float, float], n: int = 300) -> dict[str, Any]:
    return {
        "label": label,
        "step": step,
        "n": n,
        "accuracy": accuracy,
        "ci95": list(ci95),
        "format_accuracy": 0.9,
        "partial_accuracy": 0.4,
        "mean_reward": accuracy,
        "samples_per_row": 1,
        "sampling": "greedy, pass",
        "scored_by": "maxtext",
    }


BEFORE = _point("before", 0, 0.34, (0.29, 0.39))
STEP_10 = _point("step-10", 10, 0.45, (0.394, 0.506))
AFTER = _point("after", 20, 0.51, (0.45, 0.57))
DIFF = {
    "of": "after",
    "difference": 0.17,
    "ci95": [0.11, 0.23],
    "n": 300,
    "improved": 60,
    "regressed": 9,
    "method": "newcombe-paired-wilson",
}


def _eval(**evaluation: Any) -> JobEval:
    base = {"status": "available", "reason": None, "points": [BEFORE, STEP_10, AFTER], "before": BEFORE, "after": AFTER, "difference": DIFF}
    return JobEval.model_validate({**base, **evaluation})


def test_before_to_after_with_intervals_and_n() -> None:
    assert eval_text(_eval()) == "34% [29-39] -> 51% [45-57], n=300"
    scored = _eval(after={**AFTER, "scored_by": "rewards"})
    assert eval_text(scored) == "34% [29-39] -> 51% [45-57], n=300, scored by the job's rewards"  # as the dashboard says
    assert eval_difference_text(_eval()) == "+17 points [11, 23] (60 improved, 9 regressed), after - before over 300 rows"


def test_while_running_before_is_compared_with_the_newest_step() -> None:
    step_5 = _point("step-5", 5, 0.4, (0.35, 0.46))
    evaluation = _eval(
        points=[BEFORE, step_5, STEP_10], after=None, difference={**DIFF, "of": "step-10", "difference": -0.03, "ci95": [-0.08, 0.021]}
    )
    assert eval_text(evaluation) == "34% [29-39] -> 45% [39-51] at step 10, n=300"  # 0.394, 0.506: half up
    assert eval_difference_text(evaluation) == "-3 points [-8, 2] (60 improved, 9 regressed), step 10 - before over 300 rows"
    assert eval_text(_eval(after={**AFTER, "n": 280})) == "34% [29-39] -> 51% [45-57], n=300 -> 280"


def test_a_single_evaluation_says_when_it_ran() -> None:
    only_before = _eval(points=[BEFORE], after=None, difference=None)
    assert eval_text(only_before) == "34% [29-39] before training, n=300"
    assert eval_difference_text(only_before) is None
    assert eval_text(_eval(points=[STEP_10], before=None, after=None)) == "45% [39-51] at step 10, n=300"


def test_no_evaluation_prints_a_dash_and_the_reason() -> None:
    reason = "grpo.num_test_batches is 0, so train_rl runs no evaluation"
    none = JobEval(status="none", reason=reason, points=[], before=None, after=None, difference=None)
    assert eval_text(none) == f"- ({reason})"
    assert eval_difference_text(none) is None


@pytest.mark.parametrize(("fraction", "percent"), [(0.125, 13), (0.625, 63), (0.285, 28), (0.0, 0), (1.0, 100), (-0.025, -2)])
def test_whole_percents_round_half_up_as_the_dashboard_does(fraction: float, percent: int) -> None:
    # 12.5 and 62.5 are exact in binary: half up gives 13 and 63 (Math.round), where round() gives 12 and
    # 62; 0.285 * 100 is 28.4999..., 28 in both.
    assert whole_percent(fraction) == percent


def test_the_status_table_has_the_eval_rows_and_keeps_the_reason_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    record = JobRecord(
        id="rl-abcdefghijkl", team="t", name="n", spec=record_spec(), spec_hash="x", phase=JobPhase.RUNNING, created_at=now, updated_at=now
    )
    job = to_public(record, now).model_copy(update={"train_evals": _eval()})
    print_job(job)
    text = " ".join(capsys.readouterr().out.split())
    assert "eval 34% [29-39] -> 51% [45-57], n=300" in text
    assert "eval change +17 points [11, 23] (60 improved, 9 regressed), after - before over 300 rows" in text

    marked_up = JobEval(status="none", reason="[red]set grpo.num_test_batches[/red]", points=[], before=None, after=None, difference=None)
    print_job(job.model_copy(update={"train_evals": marked_up}))
    text = " ".join(capsys.readouterr().out.split())
    assert "eval - ([red]set grpo.num_test_batches[/red])" in text  # printed as written, not as rich markup
    assert "eval change" not in text


@pytest.fixture
def served(
    store: SqlJobStore,
    fake_launcher: FakeLauncher,
    fake_progress: FakeProgress,
    settings_factory: Callable[..., Settings],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[str, Api]]:
    """The app on a real port (the CLI speaks HTTP), and the same app behind TestClient to drive the job."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no stray config file from the real home
    monkeypatch.delenv("RLJOB_CONFIG", raising=False)
    add_test_tokens(store)
    app = create_app(settings_factory(), store=store, launcher=fake_launcher, progress=fake_progress)
    with serve_in_thread(app) as url:
        yield url, Api(TestClient(app), store, fake_launcher, fake_progress)


def _rows(right: int, flips: tuple[int, int] = (0, 0)) -> dict[str, float]:
    """300 outcomes: rows below `right` correct, then the first flips[0] of them wrong and the next
    flips[1] rows above them right (regressed, improved)."""
    regressed, improved = flips
    return {f"r{i}": float(regressed <= i < right + improved) for i in range(300)}


def _eval_event(job_id: str, seq: int, label: str, step: int, rows: dict[str, float]) -> EvalResult:
    correct = sum(rows.values())
    summary = EvalSummary(
        label=label,
        step=step,
        n=len(rows),
        correct=correct,
        format_correct=correct,
        partial_correct=correct,
        samples_per_row=1,
        sampling="greedy, pass",
        rows_file=f"{label}.jsonl",
        vs_before=None if label == "before" else paired_difference(_rows(102), rows),
    )
    return EvalResult(seq=seq, time=datetime.now(UTC), job_id=job_id, step=step, accuracy=correct / 300, summary=summary)


def test_rljob_status_prints_the_evaluations_the_service_folded_in(served: tuple[str, Api], tmp_path: Path) -> None:
    url, api = served
    job_id = api.client.post("/v1/jobs", json=spec_body(tmp_path), headers=api.as_(TOKEN_A)).json()["id"]
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)

    def status(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--url", url, "--token", TOKEN_A, "status", job_id, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    assert "eval - (no evaluation has finished yet" in " ".join(status().split())

    api.progress.add(_eval_event(job_id, 0, "before", 0, _rows(102)))
    api.progress.add(_eval_event(job_id, 1, "after", 20, _rows(102, flips=(9, 60))))
    wait_until(lambda: json.loads(status("-o", "json"))["train_evals"]["after"] is not None, timeout_s=15)
    text = " ".join(status().split())
    # 102/300 and 153/300 with their Wilson intervals; 60 rows up and 9 down, Newcombe's paired interval.
    assert "eval 34% [29-40] -> 51% [45-57], n=300" in text
    assert "eval change +17 points [12, 22] (60 improved, 9 regressed), after - before over 300 rows" in text


def test_follow_prints_each_eval_event_as_the_service_logs_it() -> None:
    """The body is built by the service's own event-log code, so a change of its shape breaks this."""
    from service.cli.output import eval_event_text
    from service.domain.evals.job_eval import eval_event_data
    from trainer.contract.run.evaluation import EvalSummary, paired_difference

    before = {f"r{i}": float(i < 100) for i in range(300)}
    after = {f"r{i}": float(i < 160) for i in range(300)}
    common = {"n": 300, "format_correct": 300, "partial_correct": 0, "samples_per_row": 1, "sampling": "greedy, pass"}
    first = EvalSummary(label="before", step=0, correct=100, rows_file="before.jsonl", **common)  # type: ignore[arg-type]
    last = EvalSummary(
        label="after",
        step=3,
        correct=160,
        rows_file="after.jsonl",  # type: ignore[arg-type]
        vs_before=paired_difference(before, after),
        **common,
    )
    assert eval_event_text({"step": 0, **eval_event_data(first)}) == "eval before (step 0): 33% [28-39], n=300"
    assert eval_event_text({"step": 3, **eval_event_data(last)}) == (
        "eval after (step 3): 53% [48-59], n=300; +20 points [15, 24] vs before"
    )


def test_the_status_table_says_which_capacity_admitted_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    record = JobRecord(
        id="rl-abcdefghijkl", team="t", name="n", spec=record_spec(), spec_hash="x", phase=JobPhase.RUNNING, created_at=now, updated_at=now
    )
    print_job(to_public(record, now))
    assert "capacity" not in capsys.readouterr().out  # nothing admitted yet: no line
    record.placement = Placement(capacity="spot", flavor="tpu-v6e-2x4-spot")
    print_job(to_public(record, now))
    assert "capacity admitted to tpu-v6e-2x4-spot (spot)" in " ".join(capsys.readouterr().out.split())
