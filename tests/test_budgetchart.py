"""The memory-budget chart of a real example read in headless Chromium at 1280 and 800 px (issue 49, point 3): its
panels take at least half the figure (they had collapsed to ~30 px, the axis reading "0 100") and the share
--mem-fraction-static keeps back is marked."""

import json
from pathlib import Path

import pytest

from conftest import ROOT
from launchlab.reporting import budgetchart
from test_browser import browser  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.browser]
# the real SGLang example: 0.5 GiB of weights and KV on a 140 GiB card, a fraction of 0.004 keeping back the rest
EXAMPLE = next((ROOT / "examples" / "h200-sglang-kv").glob("2*"))

PROBE = """<script>window.addEventListener('load', () => { setTimeout(() => {
  const box = (el) => el.getBoundingClientRect();
  const [card, log] = %(areas)s.map((id) => document.getElementById(id));
  const found = {found: Boolean(card && log)};
  if (card && log) {
    const figure = box(card.closest('svg')), a = box(card), b = box(log);
    found.figure = [figure.width, figure.height];
    found.plot = [b.right - a.left, Math.max(a.bottom, b.bottom) - Math.min(a.top, b.top)];
    found.panels = [a.width, b.width];
    found.reserved = card.closest('svg').querySelectorAll('[id="%(reserved)s"]').length;
  }
  document.body.setAttribute('data-budget', JSON.stringify(found));
}, 200); });</script></body>"""


def measure(browser, page: Path, width: int, tmp_path: Path) -> dict:  # noqa: F811
    probe = PROBE.replace("%(areas)s", json.dumps(list(budgetchart.PLOT_AREA_GIDS)))
    copy = tmp_path / f"budget-{width}.html"
    copy.write_text(page.read_text().replace("</body>", probe.replace("%(reserved)s", budgetchart.RESERVED_GID)))
    return json.loads(browser.read(copy.as_uri(), width, 900, "data-budget"))


@pytest.mark.parametrize("width", (1280, 800))
def test_a_real_examples_budget_chart_gives_its_panels_half_the_figure_and_marks_the_kept_back_share(
        browser, tmp_path, width):  # noqa: F811
    found = measure(browser, EXAMPLE / "summary.html", width, tmp_path)
    assert found["found"], "no budget chart in the example's report"
    (fig_w, fig_h), (plot_w, plot_h) = found["figure"], found["plot"]
    assert plot_w * plot_h >= 0.5 * fig_w * fig_h, f"the panels take {plot_w:.0f}×{plot_h:.0f} of {fig_w:.0f}×{fig_h:.0f} px"
    assert min(found["panels"]) >= 0.25 * fig_w, f"a panel collapsed: {found['panels']} of {fig_w:.0f} px"
    assert found["reserved"] >= 6, "the share --mem-fraction-static keeps back, one mark per variant"
