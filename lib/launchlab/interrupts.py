"""Stopping a batch from outside: Ctrl-C, SIGTERM (`kill`, a service manager, a job scheduler) and SIGHUP (the
terminal closed) all end `launchlab run` the same way — the runs in flight stopped and recorded as interrupted,
the resume command printed — because each arrives as a KeyboardInterrupt in the main thread.

Python turns only SIGINT into KeyboardInterrupt; left alone, SIGTERM ends the process at once (no `finally`, the
run's status left at `watching`, its sampler orphaned) and SIGHUP likewise. `terminations_interrupt` raises an
`Interrupted` (a KeyboardInterrupt that knows its signal) for the first of them; later ones are ignored while the
batch stops what it started, as a second Ctrl-C is held during a run's cleanup (lifecycle.finish).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

TERMINATIONS = (signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A batch stopped by a signal other than Ctrl-C's SIGINT."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


REASON = "interrupted"  # the failure_reason of a run the kit stopped because the batch was interrupted


def describe(exc: BaseException) -> str:
    """What stopped the batch, for its messages and the interrupted runs' records."""
    if isinstance(exc, Interrupted):
        return f"interrupted by {signal.Signals(exc.signum).name}"
    return "interrupted by the user (Ctrl-C)"


def exit_code(exc: BaseException) -> int:
    """The shell's convention for a process ended by a signal: 128 + its number (130 for Ctrl-C)."""
    return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)


@contextlib.contextmanager
def terminations_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Interrupted in the main thread while the block runs (the first one; the rest are
    ignored: the batch is stopping already). Elsewhere than in the main thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def interrupt(signum, frame) -> None:
        received.append(signum)
        if len(received) == 1:
            raise Interrupted(signum)

    previous = {s: signal.signal(s, interrupt) for s in TERMINATIONS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
