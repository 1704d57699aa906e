"""Server-log parsers: one entry point for the run pipeline and `launchlab parse`.

`parse_file` gives the per-rank fields, the phase reached and the failure of a log, with the parser of its
server kind (kinds.py; detected from the log's first lines unless named). It streams (see common.scan_file), so
a log of hundreds of MB parses in bounded memory. The ready line and fatal patterns the lifecycle watches for
come from the same kind record: `exp.server.rules()` (params/schema.py) adds the params' own to them.
"""

from __future__ import annotations

import io
import itertools
from pathlib import Path

from launchlab.errors import ParseError
from launchlab.logparse import parallel
from launchlab.logparse.common import LineParser, line_blocks, scan_file
from launchlab.logparse.kinds import KINDS
from launchlab.logparse.parsedlog import PHASES, REASONS, Event, Failure, ParsedLog
from launchlab.logparse.serverkind import ReadyRules, ServerKind
from launchlab.safefiles import open_regular

SERVERS = tuple(KINDS)
DETECT_BYTES = 4 * 2**20  # 2000 lines of a real startup are well under 1 MiB


def detect(path: str | Path, sample_lines: int = 2000, sample_bytes: int = DETECT_BYTES) -> str:
    """Which server wrote a log, from the evidence in its first lines (the kind with the most wins), read from its
    first `sample_bytes` (a first line of 500 MB is not read to its end to be cut)."""
    try:
        with open_regular(path) as fh:
            first = io.BytesIO(fh.read(sample_bytes))
    except OSError as exc:
        raise ParseError(f"{path}: cannot read the log: {exc.strerror}") from None
    head = [line.decode("utf-8", errors="replace") for line in itertools.islice(line_blocks(first), sample_lines)]
    scores = {name: sum(1 for line in head if kind.evidence.search(line))
              for name, kind in KINDS.items() if kind.evidence is not None}
    best = max(scores, key=scores.get)
    return best if scores[best] else "generic"


def parser_for(kind: str, rules: ReadyRules | None = None) -> LineParser:
    if kind not in KINDS:
        raise ParseError(f"unknown server kind {kind!r} (known: auto, {', '.join(SERVERS)})")
    return KINDS[kind].parser(rules or KINDS[kind].rules())


def parse_file(path: str | Path, server: str = "auto", rules: ReadyRules | None = None) -> ParsedLog:
    path = Path(path)
    if not path.exists():
        raise ParseError(f"{path}: no such log file")
    kind = detect(path) if server == "auto" else server
    try:
        parsed = scan_file(parser_for(kind, rules), path)
    except OSError as exc:  # a folder, a FIFO, a device: said at once (detect says it first when it reads)
        raise ParseError(f"{path}: cannot read the log: {exc.strerror or exc}") from None
    parsed.parallel = parallel.read(parsed)
    return parsed


__all__ = ["KINDS", "PHASES", "REASONS", "SERVERS", "Event", "Failure", "ParsedLog", "ReadyRules", "ServerKind",
           "detect", "parse_file", "parser_for"]
