"""Ending long-lived streams as soon as SIGTERM (or SIGINT) arrives.

uvicorn stops a server in this order: stop accepting, wait for every open connection to finish (up to
its timeout_graceful_shutdown, then cancel them with an ERROR), and only then run the app's lifespan
shutdown. An event stream never finishes by itself, so without this the app would learn of the
shutdown only after the grace period was spent. The hook chains in front of the server's own handler
(uvicorn installs it with signal.signal before the lifespan starts) and restores it afterwards.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def on_termination_signal(callback: Callable[[], None]) -> Iterator[None]:
    """While open, SIGTERM/SIGINT first schedule `callback` on the running loop, then run the handler
    that was there before. Outside the main thread (an app in a test's thread) signals cannot be
    caught, and this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in TERMINATION_SIGNALS}

    def handler(sig: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(callback)
        before = previous[signal.Signals(sig)]
        if callable(before):
            before(sig, frame)
        elif before == signal.SIG_DFL:  # nobody else handles it: do what the default would
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)

    for sig in TERMINATION_SIGNALS:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, before in previous.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, before)
