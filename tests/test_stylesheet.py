"""reporting/stylesheet.py: a report page keeps the template's CSS rules it can use and drops the rest (JupyterLab's
whole stylesheet, its icons as data URLs, was two fifths of every summary.html). The committed examples' pages,
pruned, render pixel for pixel as before in Chromium (checked by hand when this was written); the width tests
(tests/test_report_widths.py) measure them."""

from __future__ import annotations

from launchlab.reporting import stylesheet

PAGE = """<html><head>
<style type="text/css">
/* a comment { with braces } */
:root { --jp-used: 1px; --jp-via: var(--jp-used); --jp-unread: 2px;
  --jp-icon-add: url(data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=); }
.jp-Cell { padding: var(--jp-via); }
.jp-Toolbar, .jp-Cell .jp-Missing { color: red; }
.jp-Cell:not(.jp-mod-active, .jp-mod-other) { margin: 0; }
#T_abc td { color: blue; }
#T_gone td { color: green; }
@media print { .jp-Cell { color: black; } .jp-FileBrowser { color: white; } }
@media screen { .jp-FileBrowser { color: white; } }
@font-face { font-family: x; src: url("a;b.woff"); }
body { content: "a } b"; }
</style>
<style id="launchlab-style">.ll-scrolls { box-shadow: none; }</style>
</head><body><div class="jp-Cell other"><table id="T_abc"></table></div></body></html>"""


def test_rules_no_element_of_the_page_can_match_are_dropped_and_the_rest_kept():
    out = stylesheet.prune_page(PAGE)
    assert ".jp-Toolbar" not in out and ".jp-Missing" not in out and "#T_gone" not in out
    assert ".jp-FileBrowser" not in out and "@media screen" not in out  # an at-rule left empty goes too
    assert ".jp-Cell { padding: var(--jp-via); }" in out and "#T_abc td { color: blue; }" in out
    assert "@media print {\n.jp-Cell { color: black; }\n}" in out
    assert ".jp-Cell:not(.jp-mod-active, .jp-mod-other) { margin: 0; }" in out  # what :not names is not required
    assert 'src: url("a;b.woff")' in out and 'content: "a } b"' in out  # strings are not split
    assert "a comment" not in out


def test_custom_properties_stay_only_when_something_kept_reads_them():
    out = stylesheet.prune_page(PAGE)
    assert "--jp-used: 1px" in out and "--jp-via: var(--jp-used)" in out  # read through another property
    assert "--jp-unread" not in out and "--jp-icon-add" not in out and "base64" not in out


def test_the_kits_own_stylesheet_is_never_cut():
    out = stylesheet.prune_page(PAGE)
    assert '<style id="launchlab-style">.ll-scrolls { box-shadow: none; }</style>' in out  # a script adds the class


def test_a_property_read_only_by_the_kits_sheet_or_an_inline_style_stays():
    page = PAGE.replace(".ll-scrolls { box-shadow: none; }", ".ll-scrolls { width: var(--jp-unread); }")
    assert "--jp-unread: 2px" in stylesheet.prune_page(page)
    page = PAGE.replace('<div class="jp-Cell other">', '<div class="jp-Cell" style="top: var(--jp-icon-add)">')
    assert "--jp-icon-add" in stylesheet.prune_page(page)


def test_a_rendered_report_keeps_a_fraction_of_the_lab_css(tmp_path):
    import nbformat

    from launchlab.reporting import export

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A report\n\nSome *text*.")])
    html = export.node_to_html(nb, tmp_path / "page.html", title="t").read_text()
    assert len(html) < 80_000, len(html)  # 300 kB with every JupyterLab rule
    assert "--jp-icon-" not in html and ".jp-RenderedMarkdown" in html and export.remote_references(html) == []
