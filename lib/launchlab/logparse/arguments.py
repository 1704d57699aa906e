"""A server's printed arguments → {name: value text}: `ServerArgs(…)`, `Namespace(…)`, `{'k': v, …}`, `k=v, …`.

The servers print their arguments with Python's repr, one very long line, values nested to any depth (lists, dicts,
dataclass reprs, JSON strings). Only the top-level names matter, and their values must stay exactly as printed (a
level check compares `mem_fraction_static` with `'0.55'`), so the text is split at top-level commas by a small
scanner that tracks brackets and quotes instead of being evaluated. A line cut short (a truncated paste) still
yields every pair before the cut.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

_CLOSE = {"(": ")", "[": "]", "{": "}"}
_QUOTE_AFTER = set("=:,([{") | {""}  # a quote only opens a string where a value or key can start


def call_arguments(text: str) -> dict[str, str]:
    """`name=value, …` pairs of the text after an opening bracket (`ServerArgs(` or `Namespace(`) up to its match."""
    return _pairs(text, "=")


def mapping_arguments(text: str) -> dict[str, str]:
    """`'name': value, …` pairs of the text after a dict's opening brace (vLLM's `non-default args: {…}`)."""
    return _pairs(text, ":")


def config_arguments(text: str) -> dict[str, str]:
    """`name=value, …` pairs of a whole remainder of a line (vLLM's `… with config: model='x', seed=0, …`)."""
    return _pairs(text, "=")


def _pairs(text: str, separator: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in _top_level_split(text, ","):
        cut = _first_top_level(item, separator)
        if cut is None:
            continue
        name = _unquote(item[:cut].strip())
        if name.isidentifier():
            found[name] = _unquote(item[cut + 1:].strip())
    return found


def _top_level_split(text: str, separator: str) -> list[str]:
    """text cut at top-level separators, ending where a bracket opened before text closes."""
    parts, start, end = [], 0, len(text)
    for index, char in _top_level(text, separator):
        if char in ")]}":
            end = index
            break
        parts.append(text[start:index])
        start = index + 1
    parts.append(text[start:end])
    return [p for p in parts if p.strip()]


def _first_top_level(text: str, separator: str) -> int | None:
    for index, char in _top_level(text, separator):
        if char == separator:
            return index
    return None


# the characters the scanner acts on; it jumps from one to the next (a character at a time was most of a long
# `ServerArgs(…)` line's parse), and over a string to its closing quote, past escaped ones
_SPECIAL = re.compile(r"""['"()\[\]{}=:,]""")
_STRING_REST = {"'": re.compile(r"[^'\\]*(?:\\.[^'\\]*)*'", re.S), '"': re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.S)}


def _top_level(text: str, wanted: str) -> Iterator[tuple[int, str]]:
    """(index, char) of each `wanted` character outside brackets and strings, and of a closing bracket unmatched in
    text (the last one yielded)."""
    stack: list[str] = []
    i = 0
    while (found := _SPECIAL.search(text, i)) is not None:
        i, char = found.start(), found.group()
        if char in "'\"" and _before(text, i) in _QUOTE_AFTER:  # a string: on past its end (a cut one ends the text)
            rest = _STRING_REST[char].match(text, i + 1)
            if rest is None:
                return
            i = rest.end()
            continue
        if char in _CLOSE:
            stack.append(_CLOSE[char])
        elif char in ")]}":
            if not stack:
                yield i, char
                return
            if stack[-1] == char:
                stack.pop()
        elif not stack and char == wanted:
            yield i, char
        i += 1


def _before(text: str, i: int) -> str:
    """The last non-blank character before i ("" at the start): a quote opens a string only after one of
    _QUOTE_AFTER (the closing quote of a string before it, or a quote that opened none, never does)."""
    j = i - 1
    while j >= 0 and text[j].isspace():
        j -= 1
    return text[j] if j >= 0 else ""


def _unquote(value: str) -> str:
    """A complete Python string literal → its text; anything else (numbers, None, lists, a cut-off string) as printed."""
    if len(value) >= 2 and value[0] in "'\"" and value[-1] == value[0]:
        try:
            literal = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value[1:-1]
        if isinstance(literal, str):
            return literal
    return value
