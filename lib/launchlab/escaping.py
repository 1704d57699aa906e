"""Text from a log, a host or a params file, made inert for the report's Markdown and HTML.

The summary notebook renders Markdown through a renderer that passes raw HTML through, and the report is
shared: a server log line like `FATAL <script>…</script>` must arrive as text, never as markup. Every string
that did not come from the kit's own code goes through one of these functions before it is shown.
"""

from __future__ import annotations

import html
import re

# emphasis, code, links, headings, tables, strike-through; `<` and `&` are handled by html.escape
_MD_SPECIAL = re.compile(r"([\\`*_\[\]#|~])")
_BACKTICKS = re.compile(r"`+")


def md(text: object) -> str:
    """Inline Markdown text: HTML escaped, Markdown punctuation backslash-escaped, on one line."""
    flat = " ".join(str(text).splitlines())
    return _MD_SPECIAL.sub(r"\\\1", html.escape(flat, quote=False))


def md_code(text: object) -> str:
    """An inline code span that no backtick in the text can close early (renderers escape HTML inside it)."""
    flat = " ".join(str(text).splitlines())
    longest = max((len(m) for m in _BACKTICKS.findall(flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat.strip() else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def md_block(text: str, info: str = "text") -> str:
    """A fenced code block whose fence is longer than any run of backticks or tildes in the text."""
    longest = max((len(m) for m in re.findall(r"`+|~+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"


def html_text(text: object) -> str:
    """Text for an HTML element or attribute."""
    return html.escape(str(text), quote=True)
