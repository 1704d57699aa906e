"""Text from a log, a host or a params file, made inert for a terminal and for the report's Markdown and HTML.

The summary notebook renders Markdown through a renderer that passes raw HTML through, and the report is
shared: a server log line like `FATAL <script>…</script>` must arrive as text, never as markup. Every string
that did not come from the kit's own code goes through one of these functions before it is shown.

A terminal obeys control characters: an escape sequence in a log line or a params value can retitle the
window, rewrite what was printed before it, or (OSC 52) write the user's clipboard. `visible` shows every
control character but tab and newline as `\\x..`, and the CLI passes all it prints through it (cli.main);
`without_escapes` removes whole terminal escape sequences (colour codes, titles), as a reader of a coloured
log saw it, and is the one pattern of them the log parsers and the nvidia-smi text reader use.
"""

from __future__ import annotations

import html
import re

# C0 controls, DEL and C1 controls: Unicode's category Cc, every character a terminal may act on rather than show
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# what a terminal or a page is shown as escapes: those, and the bidirectional controls (embeddings, overrides,
# isolates, marks: U+202E prints `txt.exe` as `exe.txt`), which reorder what is printed after them
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_DISPLAY_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}]")
_SHOWN_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}]")  # all but tab and newline
# ECMA-48 sequences as a log holds them (7-bit): CSI (`ESC [` … final byte: colours, cursor moves), the strings
# OSC, DCS, SOS, PM and APC (`ESC ]` … BEL or `ESC \\`: a window title, OSC 52's clipboard write; unterminated, to
# the end of the text), and the other two-byte escapes. What is left (a lone ESC, C1 forms) `visible` shows.
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[ -/]*[0-~]"
)


def visible(text: object) -> str:
    """Text safe to print to a terminal: each control character but tab and newline shown as `\\x..`."""
    text = str(text)
    return _SHOWN_CONTROL.sub(_hex, text) if _SHOWN_CONTROL.search(text) else text


def one_line(text: object) -> str:
    """A value quoted in a message: every control character shown as `\\x..` (a bidirectional one as `\\u....`),
    newline and tab included."""
    text = str(text)
    return _DISPLAY_CONTROL.sub(_hex, text) if _DISPLAY_CONTROL.search(text) else text


def _hex(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def without_escapes(text: str) -> str:
    """Text with its terminal escape sequences (colours, cursor moves, titles, clipboard writes) removed."""
    return _ESCAPE_SEQUENCE.sub("", text) if "\x1b" in text else text


# emphasis, code, links, headings, tables, strike-through; `<` and `&` are handled by html.escape
_MD_SPECIAL = re.compile(r"([\\`*_\[\]#|~])")
_BACKTICKS = re.compile(r"`+")


# what a Markdown renderer turns into a link by itself (mistune, JupyterLab's marked: `http://…`, `www.…`): the `:` or
# `.` written as an entity shows the same and links nothing
_AUTOLINK = re.compile(r"(?<=[A-Za-z]):(?=//)|(?<=\bwww)\.", re.IGNORECASE)


def md(text: object) -> str:
    """Inline Markdown text: HTML escaped, Markdown punctuation backslash-escaped, URLs not links (a log's URL stays
    text: the page links nowhere it names), on one line, control characters shown (`\\x1b`)."""
    flat = visible(" ".join(str(text).splitlines()))
    escaped = _MD_SPECIAL.sub(r"\\\1", html.escape(flat, quote=False))
    return _AUTOLINK.sub(lambda m: "&#58;" if m.group() == ":" else "&#46;", escaped)


def md_code(text: object) -> str:
    """An inline code span that no backtick in the text can close early (renderers escape HTML inside it)."""
    flat = visible(" ".join(str(text).splitlines()))
    longest = max((len(m) for m in _BACKTICKS.findall(flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat.strip() else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def md_spans(text: object) -> str:
    """Inline Markdown text in which the kit's own `code` spans stay code (a warning's `repetitions:`): the text
    between pairs of backticks is a code span (md_code), the rest md(); either way nothing in it is markup."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: no pairs to trust
        return md(text)
    return "".join(md_code(part) if i % 2 else md(part) for i, part in enumerate(parts) if part or not i % 2)


def md_block(text: str, info: str = "text") -> str:
    """A fenced code block whose fence is longer than any run of backticks or tildes in the text; control
    characters but tab and newline shown (`\\x1b`)."""
    text = visible(text)
    longest = max((len(m) for m in re.findall(r"`+|~+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"


def html_text(text: object) -> str:
    """Text for an HTML element or attribute."""
    return html.escape(str(text), quote=True)


# A figure the report draws is inline SVG (so a browser lays out its text and a test can measure it); its text
# can hold a factor level or a variant name from a params file. Matplotlib escapes that text, and this keeps only
# the drawing elements a matplotlib figure uses, so even a tampered notebook output cannot bring a script, an
# event handler, a foreign object or a link into the shared page.
_SVG = "http://www.w3.org/2000/svg"
_XLINK = "http://www.w3.org/1999/xlink"
_SVG_ELEMENTS = {"svg", "g", "path", "defs", "use", "clipPath", "rect", "text", "tspan", "image", "title", "desc",
                 "style", "line", "polyline", "polygon", "circle", "ellipse", "linearGradient", "stop", "pattern"}


def _safe_href(value: str) -> bool:
    return value.startswith("#") or value.startswith("data:image/png;base64,")


def inline_svg(svg: str) -> str:
    """An SVG document as inert markup for an HTML page: only drawing elements, no `on…` attribute, links only
    to the figure's own parts or embedded PNG data, no style that imports or fetches."""
    import xml.etree.ElementTree as ET

    ET.register_namespace("", _SVG)
    ET.register_namespace("xlink", _XLINK)
    root = ET.fromstring(svg.encode())

    def clean(element) -> None:
        for child in list(element):
            tag = child.tag.split("}")[-1] if isinstance(child.tag, str) else ""
            risky_style = tag == "style" and re.search(r"@import|url\(\s*['\"]?(?!#)", child.text or "")
            if tag not in _SVG_ELEMENTS or not child.tag.startswith("{" + _SVG) or risky_style:
                element.remove(child)
                continue
            clean(child)
        for name in list(element.attrib):
            local = name.split("}")[-1].lower()
            value = element.attrib[name]
            if local.startswith("on") or (local == "href" and not _safe_href(value.strip())) \
                    or (local == "style" and re.search(r"url\(\s*['\"]?(?!#)|expression", value)):
                del element.attrib[name]

    if root.tag != f"{{{_SVG}}}svg":
        raise ValueError("not an SVG document")
    clean(root)
    return ET.tostring(root, encoding="unicode")
