"""Ready and fatal patterns searched under a time budget, so a pattern from the params cannot stall the kit.

A user's pattern such as `(a+)+$` backtracks catastrophically on a long line of `a`s that ends in `b`: Python's
`re` then searches for minutes to hours, holding the GIL, so neither the ready timeout nor Ctrl-C gets a turn.
The third-party `regex` module (same syntax and semantics as `re` in its default VERSION0) takes a timeout: a
search that runs over SEARCH_BUDGET_S counts as not matching on that line and is remembered, to be reported
once; after MAX_SLOW_LINES such lines the pattern is no longer tried, which bounds what one pattern can cost.

Searching line by line under a budget costs a few µs a line (a flooding server writes a million lines a second),
so a block of lines is searched first as one text (`may_match`): only a block where the pattern may match is
searched line by line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import regex

from launchlab.errors import ParamsError

SEARCH_BUDGET_S = 0.05
MAX_SLOW_LINES = 5
BLOCK_BUDGET_S = 0.2  # a block's search: over it, the block is searched line by line (what that costs is bounded)
# what can match in a line and not at the same place in a block of lines: string anchors (\A \Z \z \G) and
# lookarounds (`foo(?!\s)` at a line's end sees the newline in a block); such a pattern is searched line by line
_LINE_BOUND = re.compile(r"\\[AZzG]|\(\?<?[=!]")


@dataclass(frozen=True)
class SlowPattern:
    """A pattern that ran over its budget: the first line it did (in `source`) and whether it was given up on."""

    pattern: str
    line: int
    source: str
    given_up: bool

    def note(self) -> str:
        text = (f"pattern {self.pattern!r} took over {SEARCH_BUDGET_S * 1000:.0f} ms on line {self.line} of "
                f"{self.source}; it may backtrack catastrophically (nested repeats such as `(a+)+`), so it counted "
                "as not matching there")
        if self.given_up:
            text += f"; after {MAX_SLOW_LINES} such lines it was no longer tried"
        return text


def noted(notes: list[str], pattern: str) -> bool:
    """Whether notes already report this pattern as slow (the watcher and the parser may both find it)."""
    return any(n.startswith(f"pattern {pattern!r} took over ") for n in notes)


class BudgetedPattern:
    """A compiled pattern whose every search is bounded by SEARCH_BUDGET_S."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        try:
            self.rx = regex.compile(pattern)
        except regex.error as exc:  # params validation compiles with `re`; the two differ only in corners
            raise ParamsError("server.ready", [f"`{pattern}` is not a regular expression the `regex` module "
                                               f"accepts ({exc}); write it in plain `re` syntax"]) from None
        self.slow_lines = 0
        self.first_slow: tuple[int, str] | None = None
        # in a block, ^ and $ match at every line's start and end: a line's match is a match of the block there
        self.block_rx = None if _LINE_BOUND.search(pattern) else regex.compile(pattern, regex.MULTILINE)

    def may_match(self, block: str) -> bool:
        """Whether the pattern may match a line of a block of lines (separated by \\n or \\r): False only when it
        matches none, so the block's lines need not be searched one by one. A search of the block over its budget,
        or a pattern a block cannot answer for (see _LINE_BOUND), says True."""
        if self.slow_lines >= MAX_SLOW_LINES:
            return False  # given up: `search` says False on every line
        if self.block_rx is None:
            return True
        try:
            return self.block_rx.search(block.replace("\r", "\n"), timeout=BLOCK_BUDGET_S) is not None
        except TimeoutError:
            return True

    def search(self, text: str, line: int, source: str = "the log") -> bool:
        """Whether the pattern matches text; False when the search ran over its budget there (remembered)."""
        if self.slow_lines >= MAX_SLOW_LINES:
            return False
        try:
            return self.rx.search(text, timeout=SEARCH_BUDGET_S) is not None
        except TimeoutError:
            self.slow_lines += 1
            self.first_slow = self.first_slow or (line, source)
            return False

    def slow(self) -> SlowPattern | None:
        if self.first_slow is None:
            return None
        return SlowPattern(self.pattern, *self.first_slow, given_up=self.slow_lines >= MAX_SLOW_LINES)
