"""The one background-loop helper (service/background_loop.py) every service loop runs on."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from service.background_loop import BackgroundLoop, stop_all


def test_the_interval_is_honoured_between_rounds() -> None:
    started: list[float] = []
    loop = BackgroundLoop("rljob-test-interval", lambda: started.append(time.monotonic()), interval_s=0.05)
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while len(started) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        assert loop.stop(timeout_s=5)
    assert len(started) >= 4
    gaps = [b - a for a, b in zip(started, started[1:], strict=False)]
    assert min(gaps) >= 0.045  # never sooner than the interval (a busy machine may make it later)


def test_a_round_says_how_long_to_wait_and_wake_cuts_the_wait_short() -> None:
    rounds = threading.Semaphore(0)

    def one_round() -> float | None:
        rounds.release()
        return None  # "until woken"

    loop = BackgroundLoop("rljob-test-wake", one_round, interval_s=None)
    loop.start()
    try:
        assert rounds.acquire(timeout=5)
        assert not rounds.acquire(timeout=0.2)  # no interval: it waits for a wake
        loop.wake()
        assert rounds.acquire(timeout=5)
    finally:
        assert loop.stop(timeout_s=5)


def test_stop_joins_within_its_bound_even_mid_wait() -> None:
    loop = BackgroundLoop("rljob-test-stop", lambda: None, interval_s=3600)
    loop.start()
    started = time.monotonic()
    assert loop.stop(timeout_s=5)
    assert time.monotonic() - started < 2
    assert not loop.running
    assert "rljob-test-stop" not in {t.name for t in threading.enumerate()}


def test_stop_gives_up_at_its_bound_on_a_round_that_will_not_end(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    loop = BackgroundLoop("rljob-test-stuck", lambda: release.wait(30) and None, interval_s=0.01)
    loop.start()
    time.sleep(0.05)
    started = time.monotonic()
    assert not loop.stop(timeout_s=0.2)
    assert time.monotonic() - started < 2
    assert "rljob-test-stuck did not stop" in caplog.text
    release.set()
    assert loop.join(timeout_s=5)


def test_wait_first_waits_one_interval_before_the_first_round() -> None:
    ran = threading.Event()
    loop = BackgroundLoop("rljob-test-wait-first", ran.set, interval_s=3600, wait_first=True)
    loop.start()
    try:
        assert not ran.wait(0.2)
        loop.wake()
        assert ran.wait(5)
    finally:
        assert loop.stop(timeout_s=5)


def test_an_exception_is_logged_with_the_loops_name_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def one_round() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database went away")

    caplog.set_level(logging.ERROR, logger="service.background_loop")
    loop = BackgroundLoop("rljob-test-errors", one_round, interval_s=0.01, retry_s=0.01)
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        assert loop.stop(timeout_s=5)
    assert len(calls) >= 3  # the failed round did not end the loop
    failed = [r for r in caplog.records if "rljob-test-errors" in r.getMessage()]
    assert failed and failed[0].exc_info is not None and "database went away" in str(failed[0].exc_info[1])


def test_stop_all_shares_one_deadline_and_one_stop_event() -> None:
    shared = threading.Event()
    loops = [BackgroundLoop(f"rljob-test-all-{i}", lambda: None, interval_s=3600, stop=shared) for i in range(3)]
    for loop in loops:
        loop.start()
    started = time.monotonic()
    assert stop_all(loops, timeout_s=5)
    assert time.monotonic() - started < 2
    assert shared.is_set() and not any(loop.running for loop in loops)
