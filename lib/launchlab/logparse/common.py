"""What every server-log parser shares: line cleaning, the phase vocabulary, and the ParsedLog record.

Lines are read lazily (a server that ran for days writes hundreds of MB), ANSI colour codes are removed and
`\\r`-separated progress-bar updates are split so a log line glued after a bar is seen on its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

PHASES = ("startup", "dist_init", "weights", "kv_cache", "cuda_graph", "warmup", "http", "ready")
REASONS = ("kv_cache_no_memory", "cuda_oom", "max_len_exceeds_kv", "cuda_graph_failed", "custom_allreduce_failed",
           "nccl_error", "exception")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DEBUG = re.compile(r"\bDEBUG (?P<name>[\w.]+): (?P<pairs>.*)")
_PAIR = re.compile(r"(?P<key>\w+)=(?P<value>-?[\d.]+(?:[eE][-+]?\d+)?)(?: ?(?P<unit>[A-Za-z%]+))?")


@dataclass(frozen=True)
class Event:
    """One parsed metric: a field of a rank at a moment (t: the log's own timestamp, naive host time)."""

    t: datetime | None
    rank: str
    field: str
    value: float
    line: int


@dataclass(frozen=True)
class Failure:
    reason: str
    phase: str
    message: str


@dataclass
class ParsedLog:
    server: str
    ready: bool = False
    phase_reached: str = "startup"
    failure: Failure | None = None
    ranks: dict[str, dict[str, float]] = field(default_factory=dict)
    debug: list[dict] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    config: dict[str, object] = field(default_factory=dict)
    first_t: datetime | None = None
    ready_t: datetime | None = None

    def reach(self, phase: str) -> None:
        if PHASES.index(phase) > PHASES.index(self.phase_reached):
            self.phase_reached = phase

    def record(self, t: datetime | None, rank: str, name: str, value: float, line: int) -> None:
        self.ranks.setdefault(rank, {})[name] = value
        self.events.append(Event(t, rank, name, value, line))

    def fail(self, reason: str, phase: str | None, message: str) -> None:
        """Keep the strongest evidence: a specific reason replaces a generic `exception`, never the reverse."""
        if self.failure is None or (self.failure.reason == "exception" and reason != "exception"):
            self.failure = Failure(reason, phase or self.phase_reached, message.strip()[:2000])
            self.reach(self.failure.phase)  # the failing phase was reached, even if it printed nothing before

    def to_json(self) -> dict:
        """The stable `launchlab parse --json` object (ARCHITECTURE.md section 4.3)."""
        return {
            "server": self.server,
            "ready": self.ready,
            "phase_reached": self.phase_reached,
            "failure": None if self.failure is None else {
                "reason": self.failure.reason, "phase": self.failure.phase, "message": self.failure.message},
            "ranks": {r: dict(sorted(f.items())) for r, f in sorted(self.ranks.items(), key=lambda kv: int(kv[0]))},
            "debug": self.debug,
        }


def clean_lines(raw_lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(line number, text) for every line and every `\\r`-separated segment, without ANSI codes."""
    for number, raw in enumerate(raw_lines, start=1):
        text = raw.rstrip("\n")
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        if "\r" in text:
            for segment in text.split("\r"):
                if segment.strip():
                    yield number, segment
        elif text:
            yield number, text


def open_lines(path: str | Path) -> Iterator[str]:
    """Lines of a log file, decoded leniently (a server can print any bytes)."""
    with open(path, encoding="utf-8", errors="replace", newline="\n") as fh:
        yield from fh


def debug_record(text: str) -> list[dict] | None:
    """`DEBUG name: k=v unit, …` instrumentation lines → one record per key, or None."""
    m = _DEBUG.search(text)
    if not m:
        return None
    records = [
        {"name": m["name"], "key": p["key"], "value": float(p["value"]), "unit": p["unit"]}
        for p in _PAIR.finditer(m["pairs"])
    ]
    return records or None
