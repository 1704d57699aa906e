"""A report page's stylesheets cut to the rules the page can use: nbconvert's lab template inlines all of
JupyterLab's CSS (240 kB: file browser, toolbars, 90 icons as data URLs) into every page, two fifths of a
report's size, for a page that uses a few dozen of its classes.

A rule stays when one of its selectors can match the page: every class and id it requires is on some element
of the page (what `:not(…)` names is not required; a selector with `:is`, `:where` or `:has` always stays).
Then a custom property (`--jp-…`) stays only when some kept declaration, or another kept custom property, reads
it through `var(…)`. At-rules that hold rules (`@media`, `@supports`, `@layer`) are cut the same way inside;
other at-rules stay whole. Only the template's styles are cut (`<style>` elements without the kit's own id),
never the kit's own rules, whose classes a script adds after the page loads.
"""

from __future__ import annotations

import re

KIT_STYLE_ID = "launchlab-style"  # the id of the template's own <style> (templates/offline): never cut
_STYLE = re.compile(r"<style\b([^>]*)>(.*?)</style>", re.S | re.I)
_ATTR = re.compile(r"""\s(class|id)=(?:"([^"]*)"|'([^']*)')""")
_SELECTOR_CLASS = re.compile(r"\.(-?[_a-zA-Z][\w-]*)")
_SELECTOR_ID = re.compile(r"#(-?[_a-zA-Z][\w-]*)")
_NOT = re.compile(r":not\((?:[^()]|\([^()]*\))*\)")
_VAR = re.compile(r"var\(\s*(--[\w-]+)")
_GROUPING = ("@media", "@supports", "@layer", "@container", "@document")


def prune_page(html: str) -> str:
    """The page with every template stylesheet cut to what the page can use (see the module's docstring)."""
    classes: set[str] = set()
    ids: set[str] = set()
    for m in _ATTR.finditer(html):
        value = m.group(2) if m.group(2) is not None else m.group(3)
        if m.group(1) == "class":
            classes.update(value.split())
        else:
            ids.add(value.strip())
    styles = [m for m in _STYLE.finditer(html) if KIT_STYLE_ID not in m.group(1)]
    sheets = [(m.start(2), m.end(2), _rules(m.group(2), classes, ids)) for m in styles]
    # what is not cut reads variables too: inline style attributes, the kit's own sheet
    cuts = [0, *(at for m in styles for at in (m.start(2), m.end(2))), len(html)]
    outside = "".join(html[a:b] for a, b in zip(cuts[::2], cuts[1::2], strict=True))
    _drop_unread_properties([rules for *_, rules in sheets], outside)
    for start, end, rules in reversed(sheets):
        html = html[:start] + "\n" + _text(rules) + "\n" + html[end:]
    return html


# A stylesheet as a list of items: ("rule", prelude, [declarations]), ("group", prelude, [items]) or
# ("raw", text) for what is kept as it is (an at-rule statement, @font-face, @keyframes).


def _rules(css: str, classes: set[str], ids: set[str]) -> list:
    kept = []
    for prelude, body in _blocks(_uncommented(css)):
        if body is None:
            kept.append(("raw", prelude + ";"))
        elif prelude.startswith(_GROUPING):
            inner = _rules(body, classes, ids)
            if inner:
                kept.append(("group", prelude, inner))
        elif prelude.startswith("@"):
            kept.append(("raw", f"{prelude} {{{body}}}"))
        else:
            selectors = [s for s in _split(prelude, ",") if _can_match(s, classes, ids)]
            if selectors:
                kept.append(("rule", ", ".join(selectors), [d for d in _split(body, ";") if d]))
    return kept


def _can_match(selector: str, classes: set[str], ids: set[str]) -> bool:
    if re.search(r":(?:is|where|has|matches)\(", selector):
        return True
    required = _NOT.sub("", selector)
    return all(c in classes for c in _SELECTOR_CLASS.findall(required)) and \
        all(i in ids for i in _SELECTOR_ID.findall(required))


def _drop_unread_properties(sheets: list[list], outside: str) -> None:
    """Remove every custom property declaration that nothing kept reads (transitively)."""
    declared: dict[str, list[str]] = {}  # name → the values declared for it
    read: set[str] = set(_VAR.findall(outside))
    for items in sheets:
        for decl in _declarations(items):
            name, _, value = decl.partition(":")
            if name.strip().startswith("--"):
                declared.setdefault(name.strip(), []).append(value)
            else:
                read.update(_VAR.findall(decl))
    pending = list(read)
    while pending:
        for value in declared.get(pending.pop(), []):
            for name in _VAR.findall(value):
                if name not in read:
                    read.add(name)
                    pending.append(name)
    for items in sheets:
        _keep_read(items, read)


def _declarations(items: list):
    for item in items:
        if item[0] == "rule":
            yield from item[2]
        elif item[0] == "group":
            yield from _declarations(item[2])


def _keep_read(items: list, read: set[str]) -> None:
    for at, item in enumerate(items):
        if item[0] == "rule":
            decls = [d for d in item[2] if not d.strip().startswith("--") or d.partition(":")[0].strip() in read]
            items[at] = ("rule", item[1], decls)
        elif item[0] == "group":
            _keep_read(item[2], read)
    items[:] = [i for i in items if not (i[0] == "rule" and not i[2]) and not (i[0] == "group" and not i[2])]


def _text(items: list) -> str:
    out = []
    for item in items:
        if item[0] == "raw":
            out.append(item[1])
        elif item[0] == "rule":
            out.append(f"{item[1]} {{ {'; '.join(item[2])}; }}")
        else:
            out.append(f"{item[1]} {{\n{_text(item[2])}\n}}")
    return "\n".join(out)


_COMMENT_OR_STRING = re.compile(r"""("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')|/\*.*?(?:\*/|$)""", re.S)
_STRING = re.compile(r""""(?:\\.|[^"\\])*"?|'(?:\\.|[^'\\])*'?""", re.S)
_BLOCK_MARK = re.compile(r"""[{};"']""")
_BRACE_MARK = re.compile(r"""[{}"']""")


def _uncommented(css: str) -> str:
    """The stylesheet without its comments (outside strings)."""
    return _COMMENT_OR_STRING.sub(lambda m: m.group(1) or "", css)


def _skip_string(css: str, at: int) -> int:
    return _STRING.match(css, at).end()


def _blocks(css: str):
    """(prelude, body) of each top-level statement; body None for a statement without a block (`@import …;`)."""
    start = at = 0
    while (m := _BLOCK_MARK.search(css, at)) is not None:
        ch, at = m.group(), m.start()
        if ch in "\"'":
            at = _skip_string(css, at)
        elif ch == ";":
            if css[start:at].strip():
                yield css[start:at].strip(), None
            at = start = at + 1
        elif ch == "}":  # a stray closing brace: skipped, as a browser does
            at = start = at + 1
        else:
            depth, end = 1, at + 1
            while depth and (b := _BRACE_MARK.search(css, end)) is not None:
                if b.group() in "\"'":
                    end = _skip_string(css, b.start())
                    continue
                depth += 1 if b.group() == "{" else -1
                end = b.end()
            if depth:
                end = len(css) + 1  # an unclosed block runs to the end
            yield css[start:at].strip(), css[at + 1:end - 1]
            at = start = end


_SPLIT_MARK = {sep: re.compile(r"""[()"'""" + re.escape(sep) + "]") for sep in ",;"}


def _split(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside strings and parentheses (a data URL holds `;`, :not(a, b) a `,`)."""
    parts, depth, start, at = [], 0, 0, 0
    mark = _SPLIT_MARK[sep]
    while (m := mark.search(text, at)) is not None:
        ch, at = m.group(), m.start()
        if ch in "\"'":
            at = _skip_string(text, at)
            continue
        if ch == sep and depth == 0:
            parts.append(text[start:at].strip())
            start = at + 1
        elif ch in "()":
            depth += 1 if ch == "(" else -1
        at += 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]
