"""The leader's work is one list of rounds: a runtime with every optional round configured (MLflow export, webhooks
for two endpoints, checkpoint expiry) starts each when it takes the lead, and a deposed leader stops every one of
them, its thread gone, its work no longer done."""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio

from service.adapters.store import SqlJobStore
from service.config import Settings
from service.leader_rounds import RoundLoops, RoundOf
from service.runtime import RuntimeOverrides, build_runtime
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import wait_until

WEBHOOKS = {
    "team-a": [
        {"name": "ops", "url": "http://127.0.0.1:9/hook", "secret": "s"},
        {"name": "chat", "url": "http://127.0.0.1:9/c", "format": "slack"},
    ]
}


def _alive() -> set[str]:
    return {t.name for t in threading.enumerate() if t.is_alive()}


def test_a_deposed_leader_stops_every_round_in_the_list(store: SqlJobStore, settings_factory: Callable[..., Settings]) -> None:
    settings = settings_factory(team_webhooks=WEBHOOKS, mlflow_tracking_uri="http://127.0.0.1:9", mlflow_export_interval_s=0.05)
    runtime = build_runtime(settings, RuntimeOverrides(store=store, launcher=FakeLauncher(), progress=FakeProgress()))
    names = [r.name for r in runtime.supervisor.rounds.rounds]
    expected = ["rljob-attached-evals", "rljob-budgets", "rljob-checkpoint-expiry", "rljob-mlflow-export", "rljob-webhooks"]
    assert names == [*expected, "rljob-webhook-send-0", "rljob-webhook-send-1"]
    anyio.run(runtime.start)
    try:
        assert runtime.leadership.leads
        wait_until(lambda: set(names) <= _alive())
        runtime.leadership.stop()  # deposed: the lock given up, the term ended
        assert not runtime.leadership.leads
        assert not set(names) & _alive(), f"still running after deposition: {set(names) & _alive()}"
        assert runtime.supervisor.rounds.running == []
    finally:
        anyio.run(runtime.stop)


def test_round_loops_restart_each_round_then_stop_them_all() -> None:
    ran: list[str] = []

    def noting(what: str) -> Callable[[], None]:
        return lambda: ran.append(what)

    rounds = [RoundOf(f"rljob-test-round-{n}", "testing", 0.01, noting(f"run {n}"), on_restart=noting(f"restart {n}")) for n in range(2)]
    loops = RoundLoops(rounds)
    loops.start()
    wait_until(lambda: {"run 0", "run 1"} <= set(ran))
    assert ran.index("restart 0") < ran.index("run 0") and ran.index("restart 1") < ran.index("run 1")
    assert loops.stop() and loops.running == []
    count = len(ran)
    threading.Event().wait(0.1)
    assert len(ran) == count  # no round ran after the stop


def test_a_woken_round_runs_at_once_not_at_its_interval() -> None:
    due, ran = threading.Event(), threading.Event()
    calls: list[int] = []

    def one_round() -> None:
        calls.append(1)
        if len(calls) > 1:
            ran.set()

    loops = RoundLoops([RoundOf("rljob-test-woken", "testing", 3600, one_round, wake=due)])
    loops.start()
    wait_until(lambda: len(calls) == 1)
    due.set()
    assert ran.wait(5), "the round waited out its hour-long interval"
    loops.stop()


def test_two_rounds_may_not_share_a_thread_name() -> None:
    same = [RoundOf("rljob-x", "a", 1, lambda: None), RoundOf("rljob-x", "b", 1, lambda: None)]
    try:
        RoundLoops(same)
    except ValueError as e:
        assert "share a thread name" in str(e)
    else:
        raise AssertionError("two rounds with one thread name were accepted")
