"""Stopping a batch from outside: Ctrl-C, SIGTERM (`kill`, a service manager, a job scheduler) and SIGHUP (the
terminal closed) all end `launchlab run` the same way — the runs in flight stopped and recorded as interrupted,
the resume command printed — because each arrives as a KeyboardInterrupt in the main thread. cli.main does the
same for every other command, so that what one started goes with it (`launchlab report`'s summary kernel).

Python turns only SIGINT into KeyboardInterrupt; left alone, SIGTERM ends the process at once (no `finally`, the
run's status left at `watching`, its sampler orphaned) and SIGHUP likewise. `terminations_interrupt` raises an
`Interrupted` (a KeyboardInterrupt that knows its signal) for the first of them; later ones are ignored while the
batch stops what it started, as a second Ctrl-C is held during a run's cleanup (lifecycle.finish).

A closed terminal is also hung up: every write to it fails (EIO), as one to a pipe whose reader left does (EPIPE).
`unless_gone` drops such writes, so a progress line can never keep the batch from stopping its servers.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
from collections.abc import Iterator
from typing import TextIO

TERMINATIONS = (signal.SIGTERM, signal.SIGHUP)
GONE = (errno.EIO, errno.EPIPE)  # a write to a hung-up terminal, to a pipe nobody reads any more


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


@contextlib.contextmanager
def unless_gone(stream: TextIO) -> Iterator[None]:
    """Write to stream in the block; when nobody can read it any more (a hung-up terminal, a closed pipe), the
    write is dropped instead of raising, and the stream's descriptor is pointed at /dev/null: its later writes, and
    the interpreter's own flush at exit, go nowhere too."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in GONE:
            raise
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, stream.fileno())
            finally:
                os.close(devnull)
            stream.flush()  # what the stream still holds goes to /dev/null, not to the next write
