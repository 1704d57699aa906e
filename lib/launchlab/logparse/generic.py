"""Logs of servers the kit knows nothing about: readiness and failure come only from the params' patterns."""

from __future__ import annotations

import re
from collections.abc import Iterable

from launchlab.logparse.common import ParsedLog, clean_lines, debug_record


def parse(raw_lines: Iterable[str], ready_pattern: str | None = None, fatal_patterns: Iterable[str] = ()) -> ParsedLog:
    log = ParsedLog(server="generic")
    ready_rx = re.compile(ready_pattern) if ready_pattern else None
    fatal_rx = [re.compile(p) for p in fatal_patterns]
    for _number, text in clean_lines(raw_lines):
        if (records := debug_record(text)) is not None:
            log.debug.extend(records)
        if ready_rx is not None and ready_rx.search(text):
            log.ready = True
            log.reach("ready")
        for rx in fatal_rx:
            if rx.search(text):
                log.fail("exception", None, text)
    return log
