"""The generic kind, for servers the kit knows nothing about: readiness from the params' pattern, failure from the
params' fatal patterns and from the deaths any Python GPU server can die (CUDA out of memory, an uncaught
exception, the kernel's OOM killer, a segmentation fault). It is what detection falls back to."""

from __future__ import annotations

import re
from collections.abc import Iterable

from launchlab.logparse.common import Anchors, anchors, classify, debug_records, exception_line, feed_lines
from launchlab.logparse.cuda_oom import oom_fields
from launchlab.logparse.parsedlog import ParsedLog
from launchlab.logparse.patterns import BudgetedPattern
from launchlab.logparse.serverkind import ServerKind

ANCHORS = ("DEBUG", "Traceback", "Error", "out of memory", "Killed", "Segmentation", "SIGSEGV")

_CUDA_OOM = re.compile(r"torch\.OutOfMemoryError|torch\.cuda\.OutOfMemoryError|CUDA out of memory")
_KILLED = re.compile(r"^\s*Killed\s*$")  # what a shell prints when the OOM killer ended its child
_SEGFAULT = re.compile(r"Segmentation fault|SIGSEGV")
_TRACEBACK = "Traceback (most recent call last):"


class _PatternAnchors:
    """The generic kind's anchors: its words, or a line any of the params' patterns may match (a user's pattern can
    match any text, so a chunk is fed when one may match in it: BudgetedPattern.may_match)."""

    def __init__(self, words: Anchors, patterns: list[BudgetedPattern]):
        self.words_of, self.patterns = words, patterns
        self.words = words.words

    def search(self, data: bytes) -> bool:
        if self.words_of.search(data):
            return True
        if not self.patterns:
            return False
        text = data.decode("utf-8", errors="replace")
        return any(p.may_match(text) for p in self.patterns)

    def contains(self, text: str) -> bool:
        return self.words_of.contains(text) or any(p.may_match(text) for p in self.patterns)


class GenericParser:
    words = anchors(ANCHORS)

    def __init__(self, ready_pattern: str | None = None, fatal_patterns: Iterable[str] = ()):
        self.log = ParsedLog(server="generic")
        # the params' patterns: searched under a time budget, so one that backtracks catastrophically cannot stall
        self.ready_rx = BudgetedPattern(ready_pattern) if ready_pattern else None
        self.fatal_rx = [BudgetedPattern(p) for p in fatal_patterns]
        self.anchors = _PatternAnchors(self.words, [p for p in [self.ready_rx, *self.fatal_rx] if p is not None])
        self.in_traceback = False

    @property
    def wants_every_line(self) -> bool:
        """Inside a traceback every line counts (its last line names the error); elsewhere only a line with an anchor
        word or one the params' patterns may match (reading every line of a flooding log ran at ~3 MB/s)."""
        return self.in_traceback

    def feed(self, number: int, text: str) -> None:
        self.log.line = number
        if (records := debug_records(text)) is not None:
            self.log.add_debug(records, None, "0", number)
        if self.ready_rx is not None and self.ready_rx.search(text, number):
            self.log.ready = True
            self.log.reach("ready")
        for rx in self.fatal_rx:
            if rx.search(text, number):
                self.log.fail("exception", None, text)
        self._known_death(number, text)

    def _known_death(self, number: int, text: str) -> None:
        """The fatal lines every Python GPU server prints, whatever it is (a params pattern may have matched first)."""
        log = self.log
        for name, value in oom_fields(text).items():
            log.record(None, "0", name, value, number)
        if _TRACEBACK in text:
            self.in_traceback = True
        elif self.in_traceback and not text[:1].isspace() and exception_line(text) is not None:
            if log.failure is not None and log.failure.reason == "exception" and _TRACEBACK in log.failure.message:
                log.failure = None  # a params pattern matched the header, which names no error: its last line does
            log.fail(classify(text), None, text)
            self.in_traceback = False
        elif _CUDA_OOM.search(text):
            log.fail("cuda_oom", None, text)
        elif _KILLED.match(text) or _SEGFAULT.search(text):
            log.fail("exception", None, text)

    def result(self) -> ParsedLog:
        patterns = [self.ready_rx, *self.fatal_rx] if self.ready_rx is not None else self.fatal_rx
        self.log.slow_patterns = [slow for p in patterns if (slow := p.slow()) is not None]
        return self.log


def parse(raw_lines: Iterable[str], ready_pattern: str | None = None, fatal_patterns: Iterable[str] = ()) -> ParsedLog:
    return feed_lines(GenericParser(ready_pattern, fatal_patterns), raw_lines)


KIND = ServerKind(
    name="generic",
    evidence=None,  # what detection falls back to when no other kind's evidence is in the log
    ready_pattern=None,  # params must say when it is ready (schema.py checks)
    fatal_patterns=(),
    parser=lambda rules: GenericParser(rules.ready_pattern, rules.fatal_patterns),
)
