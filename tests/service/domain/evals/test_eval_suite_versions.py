"""Suite versions: a suite whose content changes by one row gets the next version, and evals on different versions
are refused a comparison with a message naming both; a version is per team for a user suite and shared for a
built-in one; versions (the table and each eval's own) survive a restart of the service."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from service.domain.records.eval_models import SuiteKey
from tests.service.conftest import Api, add_test_tokens
from tests.service.eval_runs import finish_eval, outcome_rows, submit_eval, suite_hash
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, TOKEN_B, wait_until

ROWS = [1, 0, 1, 1, 0, 1]


def _user_suite(tmp_path: Path) -> dict[str, object]:
    data = tmp_path / "suite"
    return {"name": "mine", "data": str(data / "rows.jsonl"), "rewards_path": str(data / "rewards.py"), "rewards": ["exact"]}


def _eval(api: Api, tmp_path: Path, suite: dict[str, object], content: str, *, token: str = TOKEN_A, builtin: bool = False) -> dict:
    out = tmp_path / "runs"
    made = submit_eval(api, {"checkpoint": "/models/tiny", "suite": suite, "output": str(out)}, token=token)
    return finish_eval(api, made["id"], outcome_rows(ROWS), content_hash=content, builtin=builtin, output=out, token=token)


def test_one_changed_row_is_a_new_version_and_versions_do_not_compare(api: Api, tmp_path: Path) -> None:
    suite = _user_suite(tmp_path)
    first, changed = suite_hash("rows"), suite_hash("rows with one changed")
    v1 = _eval(api, tmp_path, suite, first)
    v2 = _eval(api, tmp_path, suite, changed)
    again = _eval(api, tmp_path, suite, first)
    assert [e["eval_job"]["suite"]["version"] for e in (v1, v2, again)] == [1, 2, 1]
    assert v2["eval_job"]["suite"] | {"sampling": None} == {
        "name": "mine",
        "scope": "team-a",
        "version": 2,
        "content_hash": changed,
        "rows": len(ROWS),
        "reward_functions": ["exact"],
        "sampling": None,
    }

    refused = api.client.get(f"/v1/evals/{v2['id']}/compare", params={"baseline": v1["id"]}, headers=api.as_(TOKEN_A))
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"mine v2 (hash {changed}) vs v1 (hash {first}): different suite versions cannot be compared; evaluate both on one version"
    )
    same = api.client.get(f"/v1/evals/{again['id']}/compare", params={"baseline": v1["id"]}, headers=api.as_(TOKEN_A))
    assert same.status_code == 200 and same.json()["suite"]["version"] == 1


def test_a_report_about_another_suite_gets_no_version(api: Api, tmp_path: Path) -> None:
    """The report is the job's trainer's word: a user suite reported as built in must not add to the shared sequence."""
    claimed = _eval(api, tmp_path, _user_suite(tmp_path), suite_hash("a"), builtin=True)
    assert claimed["eval_job"]["suite"]["version"] is None and claimed["eval_job"]["suite"]["scope"] == "team-a"
    assert api.store.suite_versions("builtin", "mine") == [] and api.store.suite_versions("team-a", "mine") == []


@contextmanager
def _service(store: SqlJobStore, settings: Settings) -> Iterator[Api]:
    """The app over `store` with fakes at the launcher and progress ports, stopped at the end (a restart is two)."""
    launcher, progress = FakeLauncher(), FakeProgress()
    with TestClient(create_app(settings, store=store, launcher=launcher, progress=progress)) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield Api(client, store, launcher, progress)


def test_user_suites_are_versioned_per_team_builtins_once_and_both_survive_a_restart(
    store: SqlJobStore, db_url: str, tmp_path: Path, settings_factory: Callable[..., Settings]
) -> None:
    add_test_tokens(store)
    suite = _user_suite(tmp_path)
    first, second, third = suite_hash("a"), suite_hash("b"), suite_hash("c")
    with _service(store, settings_factory()) as api:
        _eval(api, tmp_path, suite, first)
        a2 = _eval(api, tmp_path, suite, second)
        b1 = _eval(api, tmp_path, suite, second, token=TOKEN_B)  # team-b's own "mine": its first content is its v1
        arith_a = _eval(api, tmp_path, {"name": "arith"}, first, builtin=True)
        arith_b = _eval(api, tmp_path, {"name": "arith"}, second, token=TOKEN_B, builtin=True)  # one sequence for every team
    assert (a2["eval_job"]["suite"]["version"], b1["eval_job"]["suite"]["version"]) == (2, 1)
    assert b1["eval_job"]["suite"]["scope"] == "team-b"
    assert [e["eval_job"]["suite"]["version"] for e in (arith_a, arith_b)] == [1, 2]
    assert {e["eval_job"]["suite"]["scope"] for e in (arith_a, arith_b)} == {"builtin"}

    # A new service on the same database: the numbers are the table's, and each eval keeps its own.
    restarted = SqlJobStore(db_url)
    try:
        assert [(v.key.content_hash, v.version) for v in restarted.suite_versions("team-a", "mine")] == [(first, 1), (second, 2)]
        assert [(v.key.content_hash, v.version) for v in restarted.suite_versions("team-b", "mine")] == [(second, 1)]
        stored = restarted.get(a2["id"])
        assert stored is not None and stored.report.suite_version == 2
        with _service(restarted, settings_factory()) as again:
            assert _eval(again, tmp_path, suite, third)["eval_job"]["suite"]["version"] == 3
            assert _eval(again, tmp_path, suite, first)["eval_job"]["suite"]["version"] == 1
            shown = again.client.get(f"/v1/evals/{a2['id']}", headers=again.as_(TOKEN_A)).json()
            assert shown["eval_job"]["suite"]["version"] == 2
    finally:
        restarted.close()


def _waiting_on_locks(store: SqlJobStore) -> int:
    with store.engine.connect() as conn:
        query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        return int(conn.execute(text(query)).scalar_one())


@pytest.mark.postgres
def test_two_transactions_seeing_one_new_content_at_once_give_it_one_number(postgres_db: str) -> None:
    """The first transaction has taken v1 and not committed; the second, which also found no version, waits on its
    insert, then reads the first one's number (not a v2 for the same content). Another new content racing the same
    way gets the next number."""
    store = SqlJobStore(postgres_db)
    store.migrate()
    now = datetime.now(UTC)
    key = SuiteKey("team-a", "mine", suite_hash("a"))
    other = SuiteKey("team-a", "mine", suite_hash("b"))
    taken, release = threading.Event(), threading.Event()
    answers: dict[str, int] = {}

    def first() -> None:
        with store.transaction() as tx:
            answers["first"] = tx.suite_version(key, job_id="rl-aaaaaaaaaaaa", now=now)
            taken.set()
            release.wait(10)

    def second(which: SuiteKey, name: str) -> None:
        with store.transaction() as tx:
            answers[name] = tx.suite_version(which, job_id="rl-bbbbbbbbbbbb", now=now)

    try:
        holder = threading.Thread(target=first)
        holder.start()
        assert taken.wait(10)
        racers = [threading.Thread(target=second, args=(key, "same")), threading.Thread(target=second, args=(other, "other"))]
        for racer in racers:
            racer.start()
        wait_until(lambda: _waiting_on_locks(store) == 2)  # both are at their insert, waiting for the first transaction
        assert "same" not in answers and "other" not in answers
        release.set()
        for thread in (holder, *racers):
            thread.join(10)
        assert answers == {"first": 1, "same": 1, "other": 2}
        assert [(v.key.content_hash, v.version) for v in store.suite_versions("team-a", "mine")] == [
            (key.content_hash, 1),
            (other.content_hash, 2),
        ]
    finally:
        store.close()
