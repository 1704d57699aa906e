"""The HTML report opens in a real headless Chromium with the network blocked."""

import os
import shutil
import subprocess

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


def test_the_report_renders_offline_with_its_tables_and_plots(chromium, demo_run, tmp_path):
    run_dir, _ = demo_run
    url = (run_dir / "summary.html").as_uri()
    base = [chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "Outcome per variant" in dom.stdout
    assert "kv_cache_no_memory" in dom.stdout
    assert "2/2 ready" in dom.stdout and "0/2 ready" in dom.stdout
    shot = tmp_path / "report.png"
    res = subprocess.run([*base, "--window-size=1280,2400", f"--screenshot={shot}", url],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and shot.stat().st_size > 50_000, res.stderr[-2000:]
    from PIL import Image

    image = Image.open(shot).convert("L")
    assert sum(1 for count in image.histogram() if count) > 20, "the screenshot is blank"
