"""RL goodput: the trainer's goodput events folded per attempt, and the wall time split into parts that add up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from service.domain.cost.goodput import goodput_parts, job_goodput
from service.domain.progress import fold_events
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.views import to_public
from tests.service.service_helpers import record_spec
from trainer.contract import GoodputMeasured, RunStarted, StageFinished, StageStarted
from trainer.contract.run.goodput import GOODPUT_PARTS, TRAIN_PARTS, JobGoodput, TrainGoodput

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _record(phase: JobPhase = JobPhase.RUNNING, **phase_seconds: float) -> JobRecord:
    record = JobRecord(
        id="rl-aaaaaaaaaaaa",
        team="a",
        name="n",
        spec=record_spec(),
        spec_hash="h",
        phase=phase,
        created_at=T0,
        updated_at=T0,
        phase_seconds=dict(phase_seconds),
    )
    return record


def _train(step: int, elapsed_s: float, **parts: float) -> TrainGoodput:
    return TrainGoodput(elapsed_s=elapsed_s, parts=dict.fromkeys(TRAIN_PARTS, 0.0) | parts, step=step)


class _Events:
    def __init__(self) -> None:
        self.seq = -1

    def __call__(self, cls, at: float, **fields):
        self.seq += 1
        return cls(seq=self.seq, time=_at(at), job_id="rl-aaaaaaaaaaaa", **fields)


def test_parts_add_up_to_the_wall_time_with_other_as_the_remainder() -> None:
    ev = _Events()
    # 10 s queued, 5 s launching, then 200 s running (up to now: the phase the job is in counts to now).
    record = _record(QUEUED=10.0, LAUNCHING=5.0)
    record.phase_entered_at = _at(15)
    fold_events(
        record,
        [
            ev(RunStarted, 16, attempt=1, run_uri="/r"),
            ev(StageStarted, 16, stage="convert"),
            ev(StageFinished, 36, stage="convert", duration_s=20.0),
            ev(StageStarted, 36, stage="train"),
            ev(GoodputMeasured, 100, attempt=1, train=_train(1, 60.0, rollout=30.0, update=12.0, checkpoint=2.0)),
            ev(GoodputMeasured, 160, attempt=1, train=_train(2, 120.0, rollout=60.0, update=24.0, checkpoint=4.0, eval=6.0)),
        ],
    )
    wall, parts = goodput_parts(record, _at(215))
    assert wall == 215.0
    # The newest report of attempt 1 replaces the older one (cumulative), it does not add to it. Step 1 took as long
    # as step 2 in every part but the unnamed time (16 s before it, 10 s in step 2): 6 s of warmup, out of `other`.
    assert parts == {
        "queued": 10.0,
        "startup": 5.0,
        "convert": 20.0,
        "warmup": 6.0,
        "rollout": 60.0,
        "logprobs": 0.0,
        "update": 24.0,
        "weight_sync": 0.0,
        "checkpoint": 4.0,
        "eval": 6.0,
        "export": 0.0,
        "other": 80.0,
    }
    public = job_goodput(record, _at(215))
    assert public is not None and list(public.parts) == list(GOODPUT_PARTS)
    assert sum(public.parts.values()) == pytest.approx(public.wall_s)
    assert public.productive_fraction == pytest.approx(84.0 / 215.0, abs=1e-4)
    # Live: 10 s later the wall and `other` have grown, the measured parts have not.
    later = job_goodput(record, _at(225))
    assert later is not None and later.wall_s == 225.0 and later.parts["other"] == 90.0


def test_attempts_add_up_and_a_finished_job_stops_the_clock() -> None:
    ev = _Events()
    record = _record(JobPhase.SUCCEEDED, QUEUED=1.0, LAUNCHING=2.0, RUNNING=300.0)
    record.finished_at = _at(303)
    fold_events(
        record,
        [
            ev(RunStarted, 3, attempt=1, run_uri="/r"),
            ev(GoodputMeasured, 50, attempt=1, train=_train(1, 40.0, rollout=20.0, update=10.0)),
            ev(RunStarted, 100, attempt=2, run_uri="/r"),  # the first attempt was killed after step 1
            ev(GoodputMeasured, 200, attempt=2, train=_train(2, 30.0, rollout=15.0, update=5.0, checkpoint=1.0)),
            ev(StageStarted, 250, stage="export"),
            ev(StageFinished, 290, stage="export", duration_s=40.0),
        ],
    )
    assert set(record.report.goodput) == {1, 2}
    for now in (_at(303), _at(10_000)):  # after the end, the wall time no longer grows
        public = job_goodput(record, now)
        assert public is not None and public.wall_s == 303.0
        assert public.parts["rollout"] == 35.0 and public.parts["update"] == 15.0 and public.parts["export"] == 40.0
        assert public.parts["other"] == 303.0 - (1 + 2 + 35 + 15 + 1 + 40)


def test_each_attempts_first_step_beyond_a_steady_one_is_warmup_and_the_parts_still_add_up() -> None:
    """A cold first step (compiling, loading) against nine steady ones; a resumed attempt's first step is its own
    warmup; an attempt with one report has no steady step to compare with, so none."""
    ev = _Events()
    record = _record(JobPhase.SUCCEEDED, QUEUED=1.0, LAUNCHING=2.0, RUNNING=400.0)
    record.finished_at = _at(403)
    steady = {"rollout": 1.0, "logprobs": 0.1, "update": 0.5, "checkpoint": 0.0}
    fold_events(
        record,
        [
            ev(RunStarted, 3, attempt=1, run_uri="/r"),
            # step 1: 40 s before it (unnamed), rollout 21 s, update 10.5 s, logprobs 2.1 s, a 3 s checkpoint
            ev(GoodputMeasured, 80, attempt=1, train=_train(1, 76.6, rollout=21.0, logprobs=2.1, update=10.5, checkpoint=3.0)),
            # steps 2-10 steady: 1.6 s named and 0.2 s unnamed each
            *(
                ev(
                    GoodputMeasured,
                    80 + 2 * k,
                    attempt=1,
                    train=_train(1 + k, 76.6 + 1.8 * k, rollout=21.0 + k, logprobs=2.1 + 0.1 * k, update=10.5 + 0.5 * k, checkpoint=3.0),
                )
                for k in range(1, 10)
            ),
            ev(RunStarted, 200, attempt=2, run_uri="/r"),  # resumed from step 10: its first step is step 11
            ev(GoodputMeasured, 260, attempt=2, train=_train(11, 50.0, rollout=11.0, update=5.5)),
            ev(GoodputMeasured, 262, attempt=2, train=_train(12, 51.8, rollout=12.0, update=6.0)),
            ev(RunStarted, 300, attempt=3, run_uri="/r"),
            ev(GoodputMeasured, 350, attempt=3, train=_train(13, 30.0, rollout=9.0, update=4.0)),
        ],
    )
    assert set(record.report.first_goodput) == {1, 2, 3} and record.report.first_goodput[2].step == 11
    public = job_goodput(record, _at(403))
    assert public is not None and sum(public.parts.values()) == pytest.approx(public.wall_s)
    # attempt 1: (21-1) + (2.1-0.1) + (10.5-0.5) + (40-0.2) unnamed; attempt 2: (11-1) + (5.5-0.5) + (33.5-0.3)
    assert public.parts["warmup"] == pytest.approx(20 + 2 + 10 + 39.8 + 10 + 5 + 33.2)
    # what is left of rollout is one steady second per step of attempts 1 and 2, and attempt 3's unsplit 9 s
    assert public.parts["rollout"] == pytest.approx(10 * steady["rollout"] + 2 * steady["rollout"] + 9.0)
    assert public.parts["checkpoint"] == pytest.approx(3.0)  # a save in the first step is no warmup
    assert public.parts["update"] == pytest.approx(10 * 0.5 + 2 * 0.5 + 4.0)


def test_the_goodput_event_reaches_the_event_log_with_the_jobs_split() -> None:
    ev = _Events()
    record = _record(QUEUED=4.0)
    record.phase_entered_at = _at(4)
    changes = fold_events(record, [ev(GoodputMeasured, 24, attempt=1, train=_train(1, 15.0, rollout=8.0, update=2.0))])
    [(kind, data)] = changes.log
    assert kind == "goodput" and data["attempt"] == 1 and data["step"] == 1 and data["wall_s"] == 24.0
    assert data["parts"]["rollout"] == 8.0 and data["parts"]["other"] == 24.0 - 4.0 - 10.0


def test_no_time_yet_means_no_goodput_and_overlapping_parts_are_not_hidden(caplog) -> None:
    assert job_goodput(_record(JobPhase.QUEUED), T0) is None
    # Measured parts beyond the wall time: a bug somewhere. The raw remainder says so, and it is logged.
    record = _record(JobPhase.SUCCEEDED, RUNNING=10.0)
    record.finished_at = _at(10)
    fold_events(record, [_Events()(GoodputMeasured, 9, attempt=1, train=_train(1, 20.0, rollout=20.0))])
    assert goodput_parts(record, _at(10))[1]["other"] == -10.0
    # Logged once, where the report arrived; reading the job (every GET) does not log it again.
    assert caplog.text.count("exceed its wall time by 10.0 s") == 1
    caplog.clear()
    public = job_goodput(record, _at(10))
    assert public is not None and public.parts["other"] == 0.0
    assert "exceed" not in caplog.text


def test_rljob_status_prints_one_goodput_line() -> None:
    from service.cli.goodput_text import goodput_text

    goodput = JobGoodput(
        wall_s=750.0,
        productive_fraction=0.3133,
        parts={"queued": 5.0, "rollout": 187.5, "update": 47.5, "checkpoint": 3.0, "other": 507.0},
    )
    assert goodput_text(goodput) == "31% productive of 12.5m: other 8.4m (68%), rollout 3.1m (25%), update 48s (6%)"
    assert goodput_text(None) == "-" and goodput_text(JobGoodput(wall_s=0.0, parts={}, productive_fraction=None)) == "-"


def test_rljob_status_table_has_the_goodput_row(capsys) -> None:
    from service.cli.output import print_job

    record = JobRecord(
        id="rl-aaaaaaaaaaaa", team="a", name="n", spec=record_spec(), spec_hash="x", phase=JobPhase.RUNNING, created_at=T0, updated_at=T0
    )
    goodput = JobGoodput(wall_s=100.0, productive_fraction=0.5, parts={"rollout": 40.0, "update": 10.0, "other": 50.0})
    print_job(to_public(record, T0).model_copy(update={"goodput": goodput}))
    out = " ".join(capsys.readouterr().out.split())  # rich folds long rows at the console's width
    assert "goodput 50% productive of 1.7m: other 50s (50%), rollout 40s (40%)," in out and "update 10s (10%)" in out
