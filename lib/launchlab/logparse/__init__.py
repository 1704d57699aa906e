"""Server-log parsers: one entry point for the run pipeline and `launchlab parse`.

`rules_for(kind)` gives the lifecycle the ready line and fatal patterns of a server kind; `parse_file` gives
the per-rank fields, the phase reached and the failure. Both come from the same per-server module.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from launchlab.errors import ParseError
from launchlab.logparse import generic, sglang
from launchlab.logparse.common import PHASES, REASONS, Event, Failure, ParsedLog, open_lines

SERVERS = ("sglang", "generic")


@dataclass(frozen=True)
class ReadyRules:
    ready_pattern: str | None
    fatal_patterns: tuple[str, ...]


def rules_for(kind: str, ready_pattern: str | None = None, fatal_patterns: tuple[str, ...] = ()) -> ReadyRules:
    """The server kind's ready line and fatal patterns, with the params' own added (a params pattern wins)."""
    if kind == "sglang":
        return ReadyRules(ready_pattern or sglang.READY_PATTERN, sglang.FATAL_PATTERNS + tuple(fatal_patterns))
    return ReadyRules(ready_pattern, tuple(fatal_patterns))


def detect(path: str | Path, sample_lines: int = 2000) -> str:
    """Which server wrote a log, from its first lines."""
    try:
        head = list(itertools.islice(open_lines(path), sample_lines))
    except OSError as exc:
        raise ParseError(f"{path}: cannot read the log: {exc.strerror}") from None
    text = "".join(head)
    if re.search(r"server_args=ServerArgs|sglang|\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: TP\d+)?\] ", text):
        return "sglang"
    return "generic"


def parse_file(path: str | Path, server: str = "auto", rules: ReadyRules | None = None) -> ParsedLog:
    path = Path(path)
    if not path.is_file():
        raise ParseError(f"{path}: no such log file")
    kind = detect(path) if server == "auto" else server
    if kind == "sglang":
        return sglang.parse(open_lines(path))
    if kind == "generic":
        rules = rules or ReadyRules(None, ())
        return generic.parse(open_lines(path), rules.ready_pattern, rules.fatal_patterns)
    raise ParseError(f"{path}: unknown server kind {kind!r} (known: auto, {', '.join(SERVERS)})")


__all__ = ["PHASES", "REASONS", "Event", "Failure", "ParsedLog", "ReadyRules", "detect", "parse_file", "rules_for"]
