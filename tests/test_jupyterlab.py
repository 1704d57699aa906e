"""JupyterLab itself, as a new user meets it: `jupyter lab` started here (127.0.0.1, a token, the config `make lab`
passes) and driven by a real headless Chromium over the DevTools protocol — run_variant.ipynb run top to bottom
shows its live progress updating and prints its run directory; summary.ipynb then shows the verdict.
Screenshots are kept in outputs/test-artifacts/."""

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from devtools import Browser, Page, free_port, http_ok, wait_for
from test_browser import ARTIFACTS, FLAGS, chromium  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def outputs_text(page: Page) -> str:
    return page.js("[...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea')]"
                   ".map(e => e.innerText).join('\\n')") or ""


def model_outputs(page: Page, name: str) -> str:
    """The outputs of every code cell of an open notebook, as JSON, from the notebook's model: Lab skips drawing
    the cells out of view (content-visibility), so what the page's text holds depends on where it has scrolled."""
    return page.js("(() => { const w = " + panel_of(name) + "; if (!w) return ''; const m = w.content.model;"
                   " const cells = Array.from({length: m.cells.length}, (_, i) => m.cells.get(i))"
                   ".filter(c => c.type === 'code');"
                   " return JSON.stringify(cells.map(c => c.outputs.toJSON())); })()") or ""


@pytest.fixture
def lab(tmp_path, chromium):  # noqa: F811
    """A JupyterLab on a copy of the notebooks and params, and a Chromium tab showing it."""
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copytree(ROOT / "params", tmp_path / "params")
    token, port = secrets.token_hex(16), free_port()
    env = {**os.environ, "LAUNCHLAB_OUTPUTS": str(tmp_path / "outputs"), "LAUNCHLAB_SIM_ROOT": str(tmp_path / "sim"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    root = ["--allow-root"] if os.geteuid() == 0 else []
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "jupyter-lab"), "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--notebook-dir={tmp_path / 'notebooks'}",
         f"--config={ROOT / 'jupyter' / 'jupyter_server_config.py'}", "--LabApp.expose_app_in_browser=True", *root],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "lab.log", "w"), start_new_session=True)
    browser = None
    try:
        wait_for("jupyter lab to answer", lambda: http_ok(f"http://127.0.0.1:{port}/api/status?token={token}"), 120)
        # the report test's flags, with this machine's JupyterLab let through the blocked name lookups
        flags = [f if not f.startswith("--host-resolver-rules") else f + ", EXCLUDE 127.0.0.1" for f in FLAGS]
        browser = Browser(chromium, [*flags, "--disable-renderer-backgrounding", "--disable-background-timer-throttling",
                                     "--disable-backgrounding-occluded-windows"], tmp_path / "profile")
        page = browser.page
        page.send("Page.bringToFront")  # a page in the background gets no animation frames: Lab would not redraw
        page.send("Emulation.setFocusEmulationEnabled", enabled=True)
        yield page, f"http://127.0.0.1:{port}", token, tmp_path
    finally:
        if browser is not None:
            browser.close()
        if server.poll() is None:
            os.killpg(server.pid, 15)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, 9)
                server.wait()


def panel_of(name: str) -> str:
    """JavaScript for the notebook panel of a file (Lab's currentWidget is null in a page without focus)."""
    return f"[...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === '{name}')"


def open_and_run_all(page: Page, base: str, token: str, name: str) -> None:
    """Open a notebook from its URL, wait until its kernel is up, and run all its cells (Run → Run All Cells)."""
    page.send("Page.navigate", url=f"{base}/lab/tree/{name}?token={token}")
    panel = panel_of(name)
    try:
        wait_for(f"{name} to open with its kernel", lambda: page.js(
            f"(() => {{ if (!window.jupyterapp) return false; const w = {panel};"
            " if (!w) return false; window.jupyterapp.shell.activateById(w.id);"
            " const k = w.sessionContext.session && w.sessionContext.session.kernel;"
            " return !!(k && k.status === 'idle' && w.content.widgets.length); })()"), 180)
    except AssertionError:
        page.screenshot(ARTIFACTS / f"jupyterlab-stuck-{name}.png")
        raise
    # not awaited: the command's promise settles only once every cell has run
    page.js("window.jupyterapp.commands.execute('notebook:run-all-cells'), true")


def test_jupyterlab_runs_the_run_notebook_with_live_progress_and_then_the_summary_with_its_verdict(lab):
    page, base, token, folder = lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    open_and_run_all(page, base, token, "run_variant.ipynb")
    seen: list[str] = []

    def progress_until_done():
        text = page.js("[...document.querySelectorAll('.launchlab-progress')].map(e => e.innerText).join('|')") or ""
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        if len(seen) == 3:
            page.screenshot(ARTIFACTS / "jupyterlab-run-progress.png")
        # done once the cell has printed its last line and the page shows the display's final form (the page
        # draws an update a moment after the model has it)
        return (" written to " in model_outputs(page, "run_variant.ipynb")
                and bool(seen) and "log reached" not in seen[-1].split("\n")[0])

    wait_for("the run notebook to finish", progress_until_done, 400, every=0.3)
    states = [s.split("\n")[0] for s in seen]
    assert len(seen) >= 3, f"the progress display never updated: {seen}"
    assert any("watching" in s for s in states) and any("log reached" in s for s in states), states
    assert "ready at" in states[-1] and "stopped by the kit" in states[-1], states  # the demo's baseline starts
    main_cell = json.loads(model_outputs(page, "run_variant.ipynb"))[1]
    progress = [o for o in main_cell if "launchlab-progress" in "".join(o.get("data", {}).get("text/html", ""))]
    assert len(progress) == 1, f"one display, updated in place: {main_cell}"
    printed = "".join("".join(o["text"]) for o in main_cell if o["output_type"] == "stream")
    run_dir = Path(printed.split("run directory: ")[1].split()[0])
    assert run_dir.parent.parent == folder / "outputs" and (run_dir / "manifest.json").exists()
    wait_for("the GPU trace and the rank table", lambda: "rank 7" in model_outputs(page, "run_variant.ipynb")
             and '"image/png"' in model_outputs(page, "run_variant.ipynb"), 120)
    # and Lab draws them: the rank table's cell scrolled into view shows it on the page
    page.js(f"{panel_of('run_variant.ipynb')}.content.scrollToItem(8)")
    wait_for("the rank table on the page", lambda: "rank 7" in outputs_text(page), 60)
    page.screenshot(ARTIFACTS / "jupyterlab-run-variant.png")

    open_and_run_all(page, base, token, "summary.ipynb")
    # Lab draws only the cells in view, so "every cell ran" is read from the notebook's model, not the page
    outputs = wait_for("every cell of the summary to run", lambda: page.js(
        "(() => { const w = " + panel_of("summary.ipynb") + "; if (!w) return null; const m = w.content.model;"
        " const cells = Array.from({length: m.cells.length}, (_, i) => m.cells.get(i)).filter(c => c.type === 'code');"
        " const k = w.sessionContext.session && w.sessionContext.session.kernel;"
        " if (!k || k.status !== 'idle' || cells.some(c => c.executionCount === null)) return null;"
        " return JSON.stringify(cells.map(c => c.outputs.toJSON())); })()"), 300)
    assert '"ename"' not in outputs, "a cell of the summary failed"
    assert "1 of 16 planned runs finished" in outputs and run_dir.name in outputs
    assert "runs/01_custom_ar-off.mem_fraction-0.75_rep1/server.log" in outputs, "the last cell ran"
    page.js(f"{panel_of('summary.ipynb')}.content.scrollToItem(3)")  # the headline's cell, the report's first answer
    wait_for("the verdict on the page", lambda: "Inconclusive" in outputs_text(page), 60)
    page.screenshot(ARTIFACTS / "jupyterlab-summary.png")
    print(f"screenshots: {ARTIFACTS}/jupyterlab-*.png")
