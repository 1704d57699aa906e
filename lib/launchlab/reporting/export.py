"""summary.ipynb → summary.html (and the comparison's cells → compare.html) without code cells, images embedded,
nothing fetched from the internet."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

from launchlab.errors import RunDirError
from launchlab.escaping import inline_svg
from launchlab.reporting import stylesheet
from launchlab.store import rundir

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
NOTEBOOK_ONLY = "notebook-only"  # a cell tag: shown in the notebook, left out of the exported page
# What would make a browser reach out, where a browser acts on it — an element's URL attribute, a style (an element's
# or a <style> sheet's: @import, url()), a script's module import — never the page's text: a log line quoting
# `@import url(http://…)` is shown as text (escaped), and a check that read the text too refused a whole report.
_REMOTE_URL = re.compile(r"^\s*(?:https?:)?//", re.IGNORECASE)
_REMOTE_CSS = re.compile(r"@import\b|url\(\s*[\"']?\s*(?:https?:)?//", re.IGNORECASE)
_REMOTE_SCRIPT = re.compile(r"\bimport\s*\(\s*[\"'](?:https?:)?//|\bimport\s+[^;]*?from\s*[\"'](?:https?:)?//",
                            re.IGNORECASE)
_URL_ATTRIBUTES = {"src", "href", "srcset", "poster", "data", "action", "formaction", "background", "xlink:href",
                   "lowsrc", "ping", "manifest", "codebase", "archive", "longdesc"}


class _RemoteFinder(HTMLParser):
    """The places of a page a browser would fetch from the internet."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._in: str | None = None  # style or script: their text is CSS or code, not text

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            value = value or ""
            if name in _URL_ATTRIBUTES and any(_REMOTE_URL.match(v) for v in value.split(",")):
                self.found.append(f"<{tag} {name}={value[:80]!r}>")
            elif name == "style" and _REMOTE_CSS.search(value):
                self.found.append(f"<{tag} style={value[:80]!r}>")
        self._in = tag if tag in ("style", "script") else None

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "style" and (m := _REMOTE_CSS.search(data)) or \
                self._in == "script" and (m := _REMOTE_SCRIPT.search(data)):
            self.found.append(f"<{self._in}> {data[m.start():m.start() + 80]!r}")


def remote_references(html: str) -> list[str]:
    finder = _RemoteFinder()
    finder.feed(html)
    finder.close()
    return finder.found


def notebook_to_html(notebook: Path, html_path: Path, title: str | None = None) -> Path:
    """The page, titled `title` (the experiment) rather than after the notebook's file name."""
    return node_to_html(nbformat.read(str(notebook), as_version=4), html_path, title=title, name=notebook.stem)


def node_to_html(nb: nbformat.NotebookNode, html_path: Path, *, title: str | None = None, name: str = "report",
                 mode: int = 0o644) -> Path:
    """A notebook held in memory as a page of the report's style (compare.html: outputs made without a kernel)."""
    exporter = HTMLExporter(template_name="offline", extra_template_basedirs=[str(TEMPLATES)],
                            exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True,
                            embed_images=True)
    exporter.register_filter("inline_svg", inline_svg)
    if title:
        nb.metadata["title"] = title  # the template escapes it
    # a cell for the notebook's reader only (summary.ipynb's title: the page has its own, the experiment's)
    nb.cells = [c for c in nb.cells if NOTEBOOK_ONLY not in c.get("metadata", {}).get("tags", [])]
    body, _ = exporter.from_notebook_node(nb, {"metadata": {"name": name}})
    body = stylesheet.prune_page(body)
    remote = remote_references(body)
    if remote:
        raise RunDirError(f"{html_path}: the report would fetch from the internet ({remote[:3]}); "
                          "the offline template needs updating for this nbconvert version")
    rundir.write_text(html_path, body, mode=mode)
    return html_path
