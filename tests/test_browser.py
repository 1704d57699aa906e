"""The HTML report opens in a real headless Chromium with the network blocked."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Without these flags Chromium reaches out to Google services at start; the host-resolver rule makes every
# name lookup fail, so anything the page tried to fetch from the internet would not load.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND"]


@pytest.fixture
def chromium():
    if CHROMIUM is None:
        if os.environ.get("LAUNCHLAB_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is required here (LAUNCHLAB_REQUIRE_CHROMIUM=1) but not installed: "
                        "apt-get install -y chromium")
        pytest.skip("chromium is not installed (apt-get install -y chromium); .ci/run installs it")
    return CHROMIUM


ARTIFACTS = Path(__file__).resolve().parents[1] / "outputs" / "test-artifacts"  # git-ignored


def test_the_report_renders_offline_with_its_tables_and_plots(chromium, demo_run, tmp_path):
    run_dir, _ = demo_run
    # a copy with a probe that records, once loaded, whether every image decoded
    probe = ("<script>window.addEventListener('load', () => { const imgs = [...document.images]; "
             "document.body.setAttribute('data-images', imgs.length + ':' + "
             "imgs.filter(i => i.complete && i.naturalWidth > 0).length); });</script></body>")
    page = tmp_path / "summary.html"
    page.write_text((run_dir / "summary.html").read_text().replace("</body>", probe))
    url = page.as_uri()
    netlog = tmp_path / "netlog.json"
    base = [chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--virtual-time-budget=5000", f"--log-net-log={netlog}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "Outcome" in dom.stdout and "Verdict" in dom.stdout
    assert "kv_cache_no_memory" in dom.stdout
    assert "2/2 ready" in dom.stdout and "0/2 ready" in dom.stdout
    images = re.search(r'data-images="(\d+):(\d+)"', dom.stdout)
    assert images and int(images.group(1)) >= 3 and images.group(1) == images.group(2), "an image did not render"
    # Chromium itself calls Google services (updates, accounts, time) whatever the page; everything else would
    # have come from the report. None may be there.
    urls = set(re.findall(r'"url":"([a-z]+://[^/"]*)', netlog.read_text())) if netlog.exists() else set()
    page_requests = {u for u in urls if u.split("://")[0] in ("http", "https", "ws", "wss")
                     and not re.search(r"\.(google\.com|googleapis\.com|gstatic\.com|gvt1\.com)$", u)}
    assert page_requests == set(), f"the report asked the network: {page_requests}"
    shot = tmp_path / "report.png"
    res = subprocess.run([*base, "--window-size=1280,2400", f"--screenshot={shot}", url],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and shot.stat().st_size > 50_000, res.stderr[-2000:]
    from PIL import Image

    image = Image.open(shot).convert("L")
    assert sum(1 for count in image.histogram() if count) > 20, "the screenshot is blank"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "summary.png")
    print(f"screenshot of the report: {ARTIFACTS / 'summary.png'}")


# Measured by the page itself once laid out at 1400 px: its title, the images' alternative text, and every table
# wider than the page that is not inside a container scrolling sideways (the figures' own label overlaps are
# measured on the figures: tests/test_plots.py).
LAYOUT_PROBE = """<script>window.addEventListener('load', () => {
  const page = document.documentElement.clientWidth;
  const scrolls = (el) => { for (let p = el.parentElement; p; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if ((o === 'auto' || o === 'scroll') && p.clientWidth <= page) return true; } return false; };
  const cut = [...document.querySelectorAll('table')].filter(t => t.getBoundingClientRect().width > page && !scrolls(t));
  const wide = [...document.querySelectorAll('table')].filter(t => t.getBoundingClientRect().width > page);
  const alts = [...document.images].map(i => i.getAttribute('alt') || '');
  document.body.setAttribute('data-layout', JSON.stringify({title: document.title, page, wide: wide.length,
    cut: cut.map(t => t.innerText.slice(0, 80)), alts}));
});</script></body>"""


def test_the_report_is_titled_after_the_experiment_its_images_say_what_they_show_and_wide_tables_scroll(
        chromium, demo_run, tmp_path):
    import html
    import json

    run_dir, _ = demo_run
    page = tmp_path / "summary.html"
    page.write_text((run_dir / "summary.html").read_text().replace("</body>", LAYOUT_PROBE))
    dom = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,2400",
                          "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    layout = json.loads(html.unescape(re.search(r'data-layout="([^"]*)"', dom.stdout).group(1)))
    assert layout["title"] == "demo-custom-ar-vs-mem-fraction — launchlab report"
    assert len(layout["alts"]) >= 3
    assert all(alt and "No description" not in alt for alt in layout["alts"]), layout["alts"]
    assert layout["page"] <= 1400
    assert layout["wide"] >= 1, "the effects table is wider than 1400 px: the check below has something to check"
    assert layout["cut"] == [], f"tables wider than the page without a scroll container: {layout['cut']}"
