"""Logging a fault that repeats round after round: its traceback once when it starts, one line when it ends.

A background round that fails the same way each time (the state disk full: every progress poll's write refused)
logged a traceback per round, 13 in 2.8 s, and the line that said what broke scrolled away under its copies. A fault
here is one key (a job, a round's part) failing with one kind of exception: the first failure is logged with its
traceback, the repeats are only counted, and the first success after them says how many rounds failed. A different
kind of exception for the same key is a new fault and is logged again.

Kept free of the service's frameworks and adapters, as background_loop.py is, so the domain's rounds may use it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class _Failing:
    kind: str  # the exception's type: what makes two failures the same fault
    rounds: int = 1


class FaultLog:
    """One per round owner; not thread-safe (a round runs on its loop's one thread)."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._failing: dict[str, _Failing] = {}

    def failed(self, key: str, error: BaseException, message: str, *args: object) -> None:
        """`message % args` with the traceback when this is a new fault of `key`; otherwise the repeat is counted."""
        kind = f"{type(error).__module__}.{type(error).__qualname__}"
        failing = self._failing.get(key)
        if failing is not None and failing.kind == kind:
            failing.rounds += 1
            return
        self._failing[key] = _Failing(kind)
        self._log.error(message + " (said once until it recovers)", *args, exc_info=error)

    def succeeded(self, key: str, message: str, *args: object) -> None:
        """`key` worked: when it was failing, `message % args` once, with how many rounds failed."""
        failing = self._failing.pop(key, None)
        if failing is not None:
            self._log.info(message + " (after %d failed round(s))", *args, failing.rounds)

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the faults of keys no longer polled (an ended job), so the record stays bounded."""
        for key in self._failing.keys() - keep:
            del self._failing[key]

    def is_failing(self, key: str) -> bool:
        return key in self._failing
