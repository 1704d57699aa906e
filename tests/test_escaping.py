"""Escaped text renders as the same text, never as markup, in the Markdown renderer the HTML export uses."""

import html

import pytest
from nbconvert.filters.markdown_mistune import markdown2html_mistune as render

from launchlab.escaping import html_text, md, md_block, md_code

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
