"""A server's printed arguments → {name: value text}: `ServerArgs(…)`, `Namespace(…)`, `{'k': v, …}`, `k=v, …`.

The servers print their arguments with Python's repr, one very long line, values nested to any depth (lists, dicts,
dataclass reprs, JSON strings). Only the top-level names matter, and their values must stay exactly as printed (a
level check compares `mem_fraction_static` with `'0.55'`), so the text is split at top-level commas by a small
scanner that tracks brackets and quotes instead of being evaluated. A line cut short (a truncated paste) still
yields every pair before the cut.
"""

from __future__ import annotations

import ast
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
    for index, char in _top_level(text):
        if char in ")]}":
            end = index
            break
        if char == separator:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:end])
    return [p for p in parts if p.strip()]


def _first_top_level(text: str, separator: str) -> int | None:
    for index, char in _top_level(text):
        if char == separator:
            return index
    return None


def _top_level(text: str) -> Iterator[tuple[int, str]]:
    """(index, char) of each character outside brackets and strings, and of a closing bracket unmatched in text."""
    stack: list[str] = []
    quote: str | None = None
    previous = ""  # the last non-blank character outside a string
    i = 0
    while i < len(text):
        char = text[i]
        if quote is not None:
            if char == "\\":
                i += 2
                continue
            if char == quote:
                quote, previous = None, char
        elif char in "'\"" and previous in _QUOTE_AFTER:
            quote = char
        elif char in _CLOSE:
            stack.append(_CLOSE[char])
        elif char in ")]}":
            if not stack:
                yield i, char
                return
            if stack[-1] == char:
                stack.pop()
        elif not stack:
            yield i, char
        if quote is None and not char.isspace() and char not in "'\"":
            previous = char
        i += 1


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
