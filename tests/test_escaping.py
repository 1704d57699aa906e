"""Escaped text renders as the same text, never as markup, in the Markdown renderer the HTML export uses."""

import html

import pytest
from nbconvert.filters.markdown_mistune import markdown2html_mistune as render

from launchlab.escaping import html_text, inline_svg, md, md_block, md_code, md_spans

HOSTILE = [
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script> *bold* _em_ [link](javascript:alert(1)) ![i](x)",
    "`code` ``more`` | pipe | # heading ~~strike~~ \\ backslash",
    "line one\n# a heading?\n<b>bold</b>",
    "&lt;already escaped&gt; &amp;",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_text_renders_as_the_text_itself(text):
    out = render(md(text))
    assert "<img" not in out and "<script" not in out and "<b>" not in out and "<a " not in out
    assert "<em>" not in out and "<strong>" not in out and "<h1" not in out and "<del>" not in out
    plain = html.unescape(out.removeprefix("<p>").strip().removesuffix("</p>"))
    assert plain == " ".join(text.splitlines())


@pytest.mark.parametrize("text", HOSTILE)
def test_a_code_span_cannot_be_closed_early(text):
    out = render(md_code(text))
    assert out.count("<code>") == 1 and "<script" not in out and "<img" not in out


def test_a_code_block_is_longer_than_any_fence_inside_it():
    block = md_block("x\n```\n<script>alert(1)</script>\n~~~~", "sh")
    out = render(block)
    assert "<script" not in out and "&lt;script&gt;" in out and out.count("<pre>") == 1


def test_html_text_escapes_quotes_for_attributes():
    assert html_text('"><script>') == "&quot;&gt;&lt;script&gt;"


HOSTILE_SVG = """<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"
 onload="alert(1)"><script>alert(2)</script><style>@import url(http://evil.example/x.css);</style>
<g id="axes_1"><text onclick="alert(3)" style="background:url(http://evil.example/t.png)">level &lt;b&gt;</text>
<a xlink:href="javascript:alert(4)"><rect width="5" height="5"/></a><foreignObject><div>x</div></foreignObject>
<image xlink:href="http://evil.example/i.png"/><image xlink:href="data:image/png;base64,AAAA"/>
<use xlink:href="#p1"/></g><style>*{stroke-linejoin: round}</style></svg>"""


def test_an_inline_chart_keeps_its_drawing_and_text_and_loses_scripts_handlers_links_and_remote_styles():
    clean = inline_svg(HOSTILE_SVG)
    for gone in ("script", "alert", "evil.example", "javascript", "foreignObject", "<a ", "onload", "onclick"):
        assert gone not in clean, gone
    assert "level &lt;b&gt;" in clean and 'id="axes_1"' in clean  # the text stays text, escaped
    assert "data:image/png;base64,AAAA" in clean and 'href="#p1"' in clean and "stroke-linejoin" in clean


def test_what_is_not_an_svg_document_is_refused():
    with pytest.raises(ValueError):
        inline_svg("<html xmlns='http://www.w3.org/1999/xhtml'><body/></html>")


@pytest.mark.parametrize("text", HOSTILE)
def test_text_with_code_spans_is_still_only_text_and_code(text):
    out = render(md_spans(text))
    assert "<img" not in out and "<script" not in out and "<b>" not in out and "<a " not in out
    assert "<em>" not in out and "<strong>" not in out and "<h1" not in out and "<del>" not in out


def test_a_warnings_code_spans_render_as_code_not_as_backticks():
    # issue 28: "raise `repetitions:` to 3" showed its backticks
    out = render(md_spans("a=1 vs 2: few runs per side; raise `repetitions:` to 3 or more — see `confounds`"))
    assert "<code>repetitions:</code>" in out and "<code>confounds</code>" in out and "`" not in out
    assert render(md_spans("an odd ` backtick")).count("`") == 1  # no pair: shown as it is
