"""The leader's work as one list of rounds: what the leading replica runs, started when it takes the lead and stopped,
every one of them, when it loses it (service/supervisor.py holds the list; service/leadership.py says when).

A round is one piece of background work repeated on a thread of its own (service/background_loop.py): reconciling
attached evaluations, budgets, checkpoint expiry, the MLflow export, queueing and sending webhooks. Each says its
thread's name, what a round does (for the log line when one fails), its interval, what a new term must forget
(`restart`: a term begins with no knowledge of the last) and how to do one round. Owners build their rounds; only
`RoundLoops` starts and stops them, so no piece of leader work has a lifecycle of its own to forget at deposition.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from service.background_loop import BackgroundLoop, stop_all


class LeaderRound(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def what(self) -> str: ...

    @property
    def interval_s(self) -> float | None: ...

    @property
    def wake(self) -> threading.Event | None: ...

    @property
    def stop_timeout_s(self) -> float: ...

    def restart(self) -> None: ...

    def one_round(self) -> float | None: ...


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class RoundOf:
    """A round made of a function: `run` returns the seconds to wait before the next round (None: `interval_s`).

    `wake`: an event whoever queues work for this round sets, to run it at once rather than at its interval.
    `stop_timeout_s`: how long a stop waits for a round under way (a webhook attempt ends within its timeouts)."""

    name: str
    what: str
    interval_s: float | None
    run: Callable[[], float | None]
    on_restart: Callable[[], None] = _nothing
    wake: threading.Event | None = None
    stop_timeout_s: float = 10.0

    def restart(self) -> None:
        self.on_restart()

    def one_round(self) -> float | None:
        return self.run()


class RoundLoops:
    """The threads of a list of rounds: each restarted, then all started; all stopped together."""

    def __init__(self, rounds: Sequence[LeaderRound]) -> None:
        names = [r.name for r in rounds]
        if len(set(names)) != len(names):
            raise ValueError(f"two leader rounds share a thread name: {names}")
        self.rounds = list(rounds)
        self._loops: list[BackgroundLoop] = []

    def start(self) -> None:
        for r in self.rounds:
            r.restart()
        self._loops = [BackgroundLoop(r.name, r.one_round, interval_s=r.interval_s, what=r.what, woken=r.wake) for r in self.rounds]
        for loop in self._loops:
            loop.start()

    def stop(self) -> bool:
        """Every round's thread asked to stop at once, then joined within the longest round's stop timeout."""
        stopped = stop_all(self._loops, max((r.stop_timeout_s for r in self.rounds), default=0.0))
        self._loops = []
        return stopped

    @property
    def running(self) -> list[str]:
        return [loop.name for loop in self._loops if loop.running]
