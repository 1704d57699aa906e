"""Pauses for the kit's polling loops (a starting server, a stopping process group, draining GPUs): short at
first, since most of what the kit waits for happens within milliseconds, doubling up to a longest pause, so
something slow is not asked about many times a second. No fixed sleeps: a fixed 0.1–0.25 s pause was most of
what a run of a server that is ready at once cost (bench/run_overhead.py)."""

from __future__ import annotations

from collections.abc import Iterator

FIRST_S = 0.01
LONGEST_S = 0.2


def backoff(first_s: float = FIRST_S, longest_s: float = LONGEST_S) -> Iterator[float]:
    """first_s, 2·first_s, 4·first_s, … up to longest_s, then longest_s for ever."""
    pause = first_s
    while True:
        yield pause
        pause = min(longest_s, pause * 2)
