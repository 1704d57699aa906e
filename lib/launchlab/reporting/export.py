"""summary.ipynb → summary.html (and the comparison's cells → compare.html) without code cells, images embedded,
nothing fetched from the internet."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

from launchlab.errors import RunDirError
from launchlab.escaping import inline_svg
from launchlab.reporting import stylesheet
from launchlab.store import rundir

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
NOTEBOOK_ONLY = "notebook-only"  # a cell tag: shown in the notebook, left out of the exported page
# Anything that would make a browser reach out: a remote script/style/image/frame, or a module import.
REMOTE = re.compile(r"""(?:<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*["']?(?:https?:)?//)"""
                    r"""|(?:\bimport\s*\(\s*["'](?:https?:)?//)|(?:@import\s+(?:url\()?["']?(?:https?:)?//)""",
                    re.IGNORECASE)


def remote_references(html: str) -> list[str]:
    return [m.group(0) for m in REMOTE.finditer(html)]


def notebook_to_html(notebook: Path, html_path: Path, title: str | None = None) -> Path:
    """The page, titled `title` (the experiment) rather than after the notebook's file name."""
    return node_to_html(nbformat.read(str(notebook), as_version=4), html_path, title=title, name=notebook.stem)


def node_to_html(nb: nbformat.NotebookNode, html_path: Path, *, title: str | None = None, name: str = "report") -> Path:
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
    rundir.write_text(html_path, body)
    return html_path
