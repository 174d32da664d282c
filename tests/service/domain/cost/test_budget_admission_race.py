"""Submissions made at the same moment cannot take a team past its budget (issue 51 part 3: on a budget of 1.5 jobs,
14 of 14 concurrent submissions were admitted). Each job's estimate is 0.10 chip-hours expected and up to 0.25; the
budget is 0.80: by the expected figure all eight fit, by the upper bound three (0.75), and three are admitted.

The race window is made real through a seam, not timing luck: each replica's budget check (BudgetLedger.check_admission)
is wrapped so that a submission, once checked, waits until every submission has checked or WINDOW_S passed. Without
the team's admission lock every submission checks before any inserts, each sees nothing committed, and all eight are
admitted; with it the next check waits for this insert's commit, so each waits out its window and counts the jobs
before it. On SQLite and on PostgreSQL: eight replicas (a JobService and store each on one database), and the real
app over HTTP with the CLI's line for the refusal."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from harness.live_server import served
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.cli.main import app as rljob_cli
from service.config import Settings
from service.domain.cost.budget_ledger import BudgetLedger
from service.domain.cost.usage import PriceTable
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPolicies, JobPorts
from service.domain.job_writer import WriteRules
from service.domain.records.budget_models import TeamBudget
from service.domain.records.errors import InvalidRequest
from service.domain.records.estimate_models import EstimateRange, JobEstimate
from service.domain.records.models import Caller, JobRecord
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, TOKEN_A, ManualClock, record_spec, spec_body, wait_until

pytestmark = pytest.mark.timeout(120)

SUBMISSIONS = 8
WINDOW_S = 0.3  # the most a checked submission waits for the others: with the lock, each waits it out
EXPECTED_H, HIGH_H, BUDGET_H = 0.10, 0.25, 0.80
FIT = 3  # int(BUDGET_H / HIGH_H)
PRICES: PriceTable = {"v6e": {"on-demand": 2.0}}
TEAM_A, TEAM_B = Caller(team="team-a", token_id="tok-a"), Caller(team="team-b", token_id="tok-b")
TPU = {"accelerator": "v6e-8", "rollout_engine": "jax"}
REFUSAL = f"0.75 chip-hours of it is committed: 0.00 chip-hours spent and up to 0.75 chip-hours more for its {FIT} queued or running jobs"
ESTIMATE_TEXT = "this job's estimate is 0.10 chip-hours (0.05 chip-hours to 0.25 chip-hours): up to 0.25 chip-hours, more than the 0.05"


class RangeEstimate:
    """Stands in for the submit-time estimator (estimates.py): every job 0.10 chip-hours expected, 0.05 to 0.25."""

    def estimate(self, caller: Caller, spec: object) -> JobEstimate:
        r = EstimateRange(expected=60.0, low=30.0, high=150.0)
        figure = EstimateRange(expected=EXPECTED_H, low=EXPECTED_H / 2, high=HIGH_H)
        return JobEstimate(made_at=T0, basis="formula", basis_detail="test", run_s=r, wall_s=r, chip_hours=figure, cost_usd=None)


class RaceWindow:
    """The seam between a submission's budget check and its insert."""

    def __init__(self, submissions: int) -> None:
        self.submissions = submissions
        self.checked = 0
        self._changed = threading.Condition()

    def hold_open(self, ledger: BudgetLedger, monkeypatch: pytest.MonkeyPatch) -> None:
        check = ledger.check_admission

        def checked_then_held(*args: Any, **kwargs: Any) -> None:
            try:
                check(*args, **kwargs)
            finally:
                with self._changed:
                    self.checked += 1
                    self._changed.notify_all()
                    self._changed.wait_for(lambda: self.checked >= self.submissions, timeout=WINDOW_S)

        monkeypatch.setattr(ledger, "check_admission", checked_then_held)


def all_at_once[T](submissions: list[Callable[[], T]]) -> list[T | Exception]:
    """Run each submission in a thread of its own, released together; what each returned or raised."""
    start = threading.Barrier(len(submissions))
    results: list[T | Exception] = []
    lock = threading.Lock()

    def run(submit: Callable[[], T]) -> None:
        start.wait(10)
        try:
            result: T | Exception = submit()
        except Exception as e:  # noqa: BLE001 - a refusal is one of the outcomes counted
            result = e
        with lock:
            results.append(result)

    threads = [threading.Thread(target=run, args=(submit,)) for submit in submissions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == len(submissions), "a submission did not finish"
    return results


@pytest.fixture
def replicas(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[JobService]]:
    """SUBMISSIONS replicas on one database, each its own store (engine, connections) and JobService; followers, so
    nothing is launched and every admitted job stays QUEUED, committing its upper bound."""
    stores = [SqlJobStore(db_url) for _ in range(SUBMISSIONS)]
    stores[0].migrate()
    window = RaceWindow(SUBMISSIONS)
    services = []
    for store in stores:
        ledger = BudgetLedger(store, {"team-a": TeamBudget(chip_hours=BUDGET_H), "team-b": TeamBudget(chip_hours=BUDGET_H)}, PRICES)
        service = JobService(
            JobPorts(store, FakeLauncher(), FakeProgress()),
            JobPolicies(budgets=ledger),
            writes=WriteRules(leads=lambda: False),
            clock=ManualClock(),
        )
        service.estimator = RangeEstimate()  # type: ignore[assignment]
        window.hold_open(ledger, monkeypatch)
        services.append(service)
    yield services
    for store in stores:
        store.close()


def test_parallel_submissions_through_replicas_admit_only_what_fits_the_budget(replicas: list[JobService], tmp_path: Path) -> None:
    spec = record_spec(str(tmp_path / "runs"), hardware=TPU)
    results = all_at_once([lambda service=service: service.submit(TEAM_A, spec) for service in replicas])  # type: ignore[misc]
    admitted = [r for r in results if isinstance(r, tuple)]
    refused = [r for r in results if isinstance(r, InvalidRequest)]
    assert (len(admitted), len(refused)) == (FIT, SUBMISSIONS - FIT), results
    for refusal in refused:
        assert refusal.loc == ("body", "budget", "chip_hours")
        assert REFUSAL in str(refusal) and ESTIMATE_TEXT in str(refusal)
    stored = replicas[0].store.list_active()
    assert sorted(r.id for r in stored) == sorted(record.id for record, _ in admitted)
    assert sum(r.estimate.chip_hours.high for r in stored if r.estimate) <= BUDGET_H


@pytest.mark.postgres
def test_a_teams_admission_lock_leaves_other_teams_alone(postgres_db: str, tmp_path: Path) -> None:
    """PostgreSQL's lock is per team: while a transaction holds team-a's, team-b is admitted through another replica
    and team-a's next submission waits for it (seen in pg_locks, not timed)."""
    holder, replica = SqlJobStore(postgres_db), SqlJobStore(postgres_db)
    holder.migrate()
    ledger = BudgetLedger(replica, {"team-a": TeamBudget(chip_hours=BUDGET_H), "team-b": TeamBudget(chip_hours=BUDGET_H)}, PRICES)
    service = JobService(
        JobPorts(replica, FakeLauncher(), FakeProgress()),
        JobPolicies(budgets=ledger),
        writes=WriteRules(leads=lambda: False),
        clock=ManualClock(),
    )
    service.estimator = RangeEstimate()  # type: ignore[assignment]
    spec = record_spec(str(tmp_path / "runs"), hardware=TPU)
    admitted: list[tuple[JobRecord, bool]] = []
    try:
        with holder.transaction() as tx:
            tx.lock_team_admissions("team-a")
            other = threading.Thread(target=lambda: admitted.append(service.submit(TEAM_B, spec)))
            other.start()
            other.join(20)
            assert [(record.team, created) for record, created in admitted] == [("team-b", True)]  # not held up
            behind = threading.Thread(target=lambda: admitted.append(service.submit(TEAM_A, spec)))
            behind.start()
            wait_until(lambda: _advisory_waiters(holder) == 1)
            assert len(admitted) == 1
        behind.join(30)
        assert [(record.team, created) for record, created in admitted[1:]] == [("team-a", True)]
    finally:
        holder.close()
        replica.close()


def _advisory_waiters(store: SqlJobStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").scalar_one())


@pytest.fixture
def budgeted_service(db_url: str, settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The real app on loopback (its store on db_url, a fake launcher), team-a's budget BUDGET_H, each submission held
    open after its check; yields the URL."""
    store = SqlJobStore(db_url)
    store.migrate()
    budgets = json.dumps({"team-a": {"chip_hours": BUDGET_H}})
    settings = settings_factory(bootstrap_token=TOKEN_A, bootstrap_team="team-a", team_budgets=budgets)
    app = create_app(settings, store=store, launcher=FakeLauncher(), progress=FakeProgress())
    with served(app) as url:
        jobs: JobService = app.state.runtime.jobs
        jobs.estimator = RangeEstimate()  # type: ignore[assignment]
        RaceWindow(SUBMISSIONS).hold_open(jobs.budgets, monkeypatch)
        yield url
    store.close()


def test_parallel_submissions_over_http_admit_only_what_fits_and_the_cli_says_why_in_a_line(
    budgeted_service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = spec_body(tmp_path, hardware=TPU)
    headers = {"Authorization": f"Bearer {TOKEN_A}"}

    def submit(i: int) -> httpx.Response:
        return httpx.post(f"{budgeted_service}/v1/jobs", json={**body, "name": f"job-{i}"}, headers=headers, timeout=60)

    responses = all_at_once([lambda i=i: submit(i) for i in range(SUBMISSIONS)])  # type: ignore[misc]
    codes = sorted(r.status_code for r in responses if isinstance(r, httpx.Response))
    assert codes == [201] * FIT + [422] * (SUBMISSIONS - FIT), responses
    for response in responses:
        assert isinstance(response, httpx.Response)
        if response.status_code == 422:
            [problem] = response.json()["detail"]
            assert problem["loc"] == ["body", "budget", "chip_hours"] and REFUSAL in problem["msg"] and ESTIMATE_TEXT in problem["msg"]
    listed = httpx.get(f"{budgeted_service}/v1/jobs", headers=headers).json()["data"]
    assert len(listed) == FIT

    # One more through the CLI: refused in one line on stderr, no traceback, exit 1 (the service refused the request).
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RLJOB_CONFIG", raising=False)
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump({**body, "name": "one-more"}))
    result = CliRunner().invoke(rljob_cli, ["--url", budgeted_service, "--token", TOKEN_A, "submit", str(spec_file)])
    assert result.exit_code == 1, result.output
    line = " ".join(result.stderr.split())  # the console wraps it at its width
    assert line.startswith("error: refused by its team's budget: team team-a's chip-hour budget for ")
    assert REFUSAL in line and "Traceback" not in result.output
