"""Placeholder templates in params values: `{name}` of a known placeholder, `{{` and `}}` for literal braces.

A template is parsed here, by the validator and by the renderer alike, and filled exactly once: a JSON flag
value written `'{{"level": 3}}'` reaches the server as `{"level": 3}`, and `{{port}}` as `{port}`. Only a
bare `{name}` is a placeholder. Python's format mini-language is refused (`{port:>2000000000}` would build a
2 GB string, `{port!r}`, `{port[0]}` and `{port.x}` reach into the value), so no value is ever passed
through `str.format`.
"""

from __future__ import annotations

import re

from launchlab.fields import IDENTIFIER

PLACEHOLDERS = ("port", "run_id", "host", "node_rank", "nnodes", "master_addr")

_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_HEAD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*")


class TemplateError(ValueError):
    """A template that is not literal text plus bare {name} placeholders (raised only for unvalidated input)."""


def parse(text: str) -> tuple[list[tuple[str, str | None]], list[str]]:
    """Split a template into (literal text, placeholder name or None) pieces, and list its problems."""
    pieces: list[tuple[str, str | None]] = []
    problems: list[str] = []
    literal: list[str] = []
    pos = 0
    for match in _TOKEN.finditer(text):
        literal.append(text[pos:match.start()])
        pos = match.end()
        token, inner = match.group(0), match.group(1)
        if token in ("{{", "}}"):
            literal.append(token[0])
        elif inner is None:
            problems.append(f"has a single `{token}` at character {match.start() + 1}; "
                            "write {{ and }} for literal braces")
        elif IDENTIFIER.accepts(inner, max_chars=1000) and inner in PLACEHOLDERS:
            pieces.append(("".join(literal), inner))
            literal = []
        else:
            problems.append(_describe(inner))
    pieces.append(("".join(literal) + text[pos:], None))
    return pieces, problems


def _describe(inner: str) -> str:
    known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
    shown = inner if len(inner) <= 40 else inner[:40] + "…"
    if IDENTIFIER.accepts(inner, max_chars=1000):
        return f"unknown placeholder {{{inner}}} (known: {known}); write {{{{ and }}}} for literal braces"
    head = _HEAD.match(inner)
    if head and head.group(0) in PLACEHOLDERS:
        return (f"placeholder {{{shown}}} is not a bare {{{head.group(0)}}}: format specs (:…), conversions (!r), "
                f"indexes ([0]) and attributes (.x) are not supported; write {{{head.group(0)}}}")
    return f"`{{{shown}}}` is not a placeholder (known: {known}); write {{{{ and }}}} for literal braces"


def problems(text: str) -> list[str]:
    """What is wrong with a template, one message each; empty when it renders."""
    return parse(text)[1]


def fill(text: str, values: dict[str, str]) -> str:
    """The template with every placeholder replaced by its value and `{{`/`}}` made single braces."""
    pieces, wrong = parse(text)
    if wrong:
        raise TemplateError(f"`{text[:80]}`: {wrong[0]}")
    return "".join(literal + (values[name] if name is not None else "") for literal, name in pieces)
