"""The report read at 1280 and 800 px in a real headless Chromium: the demo, the threshold demo and every committed
example, measured by the page itself (issue 41, point 5)."""

import json
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, ROOT
from test_browser import ARTIFACTS, browser  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.browser]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*/2*") if (p / "summary.html").exists())
WIDTHS = (1280, 800)
MIN_TEXT_PX = 10

# Measured once the page is laid out: every scrolled-sideways output without its cue (the `ll-scrolls` class and
# the line atop it), every table wider than the page outside a scroll container, the page itself wider than the
# window; every visible text under MIN_TEXT_PX (HTML: its computed font size; a chart's: its font size times the
# scale the page draws the SVG at, from the text's screen matrix); and every point of a plotted line, band or dot
# inside a legend's box.
PROBE = """<script>window.addEventListener('load', () => { setTimeout(() => {
  const page = document.documentElement.clientWidth;
  const found = {page, pageScrolls: document.documentElement.scrollWidth > page + 1, noCue: [], cut: [],
                 scrolling: 0, small: [], texts: 0, svgTexts: 0, legends: 0, points: 0, onLegend: [], rasters: 0};
  const visible = (r) => r.width > 0 && r.height > 0;
  document.querySelectorAll('*').forEach((el) => {
    const o = getComputedStyle(el).overflowX;
    if ((o === 'auto' || o === 'scroll') && el.scrollWidth > el.clientWidth + 1) {
      found.scrolling += 1;
      const cue = el.querySelector(':scope > .ll-scroll-cue');
      if (!el.classList.contains('ll-scrolls') || !cue || !cue.classList.contains('ll-scroll-cue')
          || !visible(cue.getBoundingClientRect()))
        found.noCue.push(el.innerText.slice(0, 60));
    }
  });
  const inScroller = (el) => { for (let p = el.parentElement; p; p = p.parentElement) {
    if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX) && p.clientWidth <= page) return true; }
    return false; };
  document.querySelectorAll('table').forEach((t) => {
    if (t.getBoundingClientRect().right > page + 1 && !inScroller(t)) found.cut.push(t.innerText.slice(0, 60)); });
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el || el.closest('svg, script, style, title')) continue;
    const range = document.createRange(); range.selectNodeContents(n);
    if (!visible(range.getBoundingClientRect()) || getComputedStyle(el).visibility === 'hidden') continue;
    found.texts += 1;
    const px = parseFloat(getComputedStyle(el).fontSize);
    if (px < %(min)s) found.small.push(n.textContent.trim().slice(0, 40) + ' (' + px.toFixed(1) + ' px)');
  }
  document.querySelectorAll('svg text').forEach((t) => {
    if (!t.textContent.trim() || !visible(t.getBoundingClientRect())) return;
    found.svgTexts += 1;
    const m = t.getScreenCTM();
    const px = parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
    if (px < %(min)s) found.small.push(t.textContent.trim().slice(0, 40) + ' (' + px.toFixed(1) + ' px, chart)');
  });
  found.rasters = document.querySelectorAll('.jp-RenderedImage img').length;
  found.code = 0; found.proportional = [];  // commands and code spans: in the monospace face the page names
  document.querySelectorAll('pre, code').forEach((el) => {
    if (!el.textContent.trim() || !visible(el.getBoundingClientRect())) return;
    found.code += 1;
    if (!/mono/i.test(getComputedStyle(el).fontFamily)) found.proportional.push(el.textContent.trim().slice(0, 40));
  });
  document.querySelectorAll('svg').forEach((svg) => {
    const legends = [...svg.querySelectorAll('g[id^=legend_]')].map((g) => g.getBoundingClientRect());
    found.legends += legends.length;
    const inside = (x, y) => legends.some((r) => x > r.left + 1 && x < r.right - 1 && y > r.top + 1 && y < r.bottom - 1);
    svg.querySelectorAll('g[id^=axes_]').forEach((axes) => {
      const paths = axes.querySelectorAll(':scope > g[id^=line2d_] path, :scope > g[id*=PolyCollection_] path');
      paths.forEach((p) => {
        const m = p.getScreenCTM(), length = p.getTotalLength();
        for (let i = 0; i <= 200; i++) {
          const at = p.getPointAtLength(length * i / 200), s = new DOMPoint(at.x, at.y).matrixTransform(m);
          found.points += 1;
          if (inside(s.x, s.y)) { found.onLegend.push(p.parentElement.id); break; }
        }
      });
      axes.querySelectorAll(':scope > g[id^=PathCollection_] use').forEach((u) => {
        const r = u.getBoundingClientRect(); found.points += 1;
        if (inside(r.left + r.width / 2, r.top + r.height / 2)) found.onLegend.push('dot');
      });
    });
  });
  document.body.setAttribute('data-widths', JSON.stringify(found));
}, 200); });</script></body>""".replace("%(min)s", str(MIN_TEXT_PX))


def measure(browser, page: Path, width: int, tmp_path: Path, name: str) -> dict:  # noqa: F811
    """What PROBE found on a copy of `page` laid out `width` px wide; a screenshot of its first screen, as a
    reader sees it, goes to outputs/test-artifacts/."""
    copy = tmp_path / f"{name}-{width}.html"
    copy.write_text(page.read_text().replace("</body>", PROBE))
    found = json.loads(browser.read(copy.as_uri(), width, 900, "data-widths"))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.page.screenshot(ARTIFACTS / f"{name}-{width}.png")
    return found


def assert_reads_well(found: dict, width: int) -> None:
    assert found["page"] <= width
    assert found["texts"] > 50 and found["svgTexts"] >= 10, f"too little text found to check: {found}"
    assert found["legends"] >= 1 and found["points"] >= 100, f"no legend or plotted line to check: {found}"
    assert found["rasters"] == 0, "a chart is a raster image: its text cannot scale with the page"
    assert not found["pageScrolls"], "the page itself scrolls sideways"
    assert found["cut"] == [], f"tables running off the page: {found['cut']}"
    assert found["noCue"] == [], f"outputs that scroll sideways without saying so: {found['noCue']}"
    assert found["small"] == [], f"text under {MIN_TEXT_PX} px at {width} px: {found['small'][:20]}"
    assert found["onLegend"] == [], f"legends over plotted data: {found['onLegend']}"
    assert found["code"] >= 1 and found["proportional"] == [], f"commands not in monospace: {found['proportional'][:5]}"


@pytest.fixture(scope="session")
def demo_threshold_run(demo_env):
    base, env = demo_env
    proc = subprocess.run([*LAUNCHLAB, "run", str(ROOT / "params/demo-threshold.yaml")], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("width", WIDTHS)
def test_the_demo_report_reads_at_1280_and_800_px(browser, demo_run, tmp_path, width):  # noqa: F811
    found = measure(browser, demo_run[0] / "summary.html", width, tmp_path, "demo")
    assert_reads_well(found, width)
    assert width > 1000 or found["scrolling"] >= 1, "at 800 px the effects table scrolls: the cue check ran"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_threshold_demo_report_reads_at_1280_and_800_px(browser, demo_threshold_run, tmp_path, width):  # noqa: F811
    assert_reads_well(measure(browser, demo_threshold_run / "summary.html", width, tmp_path, "demo-threshold"),
                      width)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_committed_example_reads_at_1280_and_800_px(browser, example, tmp_path, width):  # noqa: F811
    assert_reads_well(measure(browser, example / "summary.html", width, tmp_path, example.parent.name), width)


def test_the_probe_finds_a_legend_on_the_data_small_text_and_a_table_that_scrolls_without_its_cue(
        browser, tmp_path):  # noqa: F811
    """The checks above can fail: a legend drawn over its line, 7 pt text in a wide figure and a wide table in a
    scrolling box without the report's cue are each caught."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from launchlab.escaping import inline_svg
    from launchlab.reporting.reporttables import figure_svg

    fig, ax = plt.subplots(figsize=(14, 3))
    ax.plot([0, 1, 2, 3], [1, 1, 1, 1], label="flat")
    ax.legend(loc="center", fontsize=7)
    table = "<table>" + "".join(f"<td>cell-{i}-with-a-long-name</td>" for i in range(40)) + "</table>"
    page = tmp_path / "bad.html"
    page.write_text(f'<html><body><div role="img">{inline_svg(figure_svg(fig))}</div>'
                    f'<div style="overflow-x: auto">{table}</div></body></html>')
    found = measure(browser, page, 800, tmp_path, "probe-check")
    assert found["onLegend"] and found["noCue"] and any("chart" in s for s in found["small"]), found
