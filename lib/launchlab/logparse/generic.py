"""Logs of servers the kit knows nothing about: readiness and failure come only from the params' patterns."""

from __future__ import annotations

import re
from collections.abc import Iterable

from launchlab.logparse.common import ParsedLog, anchors, debug_records, feed_lines


class GenericParser:
    anchors = anchors(["DEBUG"])

    def __init__(self, ready_pattern: str | None = None, fatal_patterns: Iterable[str] = ()):
        self.log = ParsedLog(server="generic")
        self.wants_every_line = True  # a user's patterns can match anything: read every line
        self.ready_rx = re.compile(ready_pattern) if ready_pattern else None
        self.fatal_rx = [re.compile(p) for p in fatal_patterns]

    def feed(self, number: int, text: str) -> None:
        if (records := debug_records(text)) is not None:
            self.log.add_debug(records, None, "0", number)
        if self.ready_rx is not None and self.ready_rx.search(text):
            self.log.ready = True
            self.log.reach("ready")
        for rx in self.fatal_rx:
            if rx.search(text):
                self.log.fail("exception", None, text)

    def result(self) -> ParsedLog:
        return self.log


def parse(raw_lines: Iterable[str], ready_pattern: str | None = None, fatal_patterns: Iterable[str] = ()) -> ParsedLog:
    return feed_lines(GenericParser(ready_pattern, fatal_patterns), raw_lines)
