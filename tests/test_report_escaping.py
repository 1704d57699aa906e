"""Strings from a log, the params and the host arrive in summary.html and report.md as text, never as markup:
a real batch whose server prints a hostile fatal line, opened in a real headless Chromium."""

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import LAUNCHLAB
from test_browser import FLAGS, chromium  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slow, pytest.mark.browser]
PAYLOAD = "<img src=x onerror=\"document.title='PWNED-IMG'\"><script>document.title='PWNED-SCRIPT'</script>"
# ready in one mode; in the other, dies with a fatal line that carries its first argument (code for python3 -c)
SERVER = ("import os, sys, time\n"
          "if os.environ['MODE'] == 'ok':\n    print('READY', flush=True); time.sleep(60)\n"
          "print('FATAL ' + sys.argv[1], flush=True); sys.exit(1)\n")


def hostile_params(tmp_path: Path) -> Path:
    spec = {
        "experiment": "hostile",
        "question": 'Is <script>document.title="PWNED-Q"</script> escaped?',
        "hosts": {"box": {"transport": "sim", "gpus": 1, "pace": 0.2, "workdir": str(tmp_path / "hostwork")}},
        "server": {"kind": "generic", "command": ["python3", "-c", SERVER, PAYLOAD],
                   "env": {"NOTE": "<b onmouseover=alert(1)>env</b>"},
                   "ready": {"timeout_s": 30, "log_pattern": "^READY", "fatal_patterns": ["^FATAL"]},
                   "stop_grace_s": 3},
        "factors": {"mode": {"ok": {"env": {"MODE": "ok"}}, "bad": {"env": {"MODE": "bad"}}}},
        "baseline": {"mode": "ok"},
        "drain": {"timeout_s": 5, "tolerance_mib": 64},
    }
    path = tmp_path / "hostile.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_hostile_log_params_and_env_strings_are_escaped_in_the_html_and_markdown(chromium, tmp_path, sim_root):  # noqa: F811
    path = hostile_params(tmp_path)
    proc = subprocess.run([*LAUNCHLAB, "run", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip())
    html = (run_dir / "summary.html").read_text()
    assert "FATAL" in html and "PWNED-SCRIPT" in html  # the failure and the payload are reported …
    assert "<script>document.title" not in html and "<img src=x" not in html  # … as text
    assert "&lt;script&gt;document.title=" in html
    md = (run_dir / "report.md").read_text()
    # inside a fenced code block (the commands) text is never markup; everywhere else it must be escaped
    prose = re.sub(r"^(`{3,})[^\n]*\n.*?^\1$", "", md, flags=re.S | re.M)
    assert "<script" not in prose and "<img" not in prose and "&lt;script&gt;" in prose
    dom = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000",
                          "--dump-dom", (run_dir / "summary.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", dom.stdout, re.S)
    assert title and "PWNED" not in title.group(1), title.group(0) if title else dom.stdout[:500]
    assert not re.search(r"<img[^>]*src=\"x\"", dom.stdout)  # no element was made from the payload
    assert not re.search(r"<b onmouseover", dom.stdout)


def test_css_a_log_line_quotes_is_text_the_page_keeps_and_no_browser_fetches(chromium, tmp_path, sim_root):  # noqa: F811
    """Issue 50: a log line quoting CSS (`@import url(http://…)`) broke summary.html: the export's check for remote
    references read the page's text too and refused the whole page. The check now reads what a browser acts on;
    the line is text, and a real Chromium opening the page asks nothing of the address it names."""
    import http.server
    import threading

    asked: list[str] = []

    class Listener(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    listener = http.server.HTTPServer(("127.0.0.1", 0), Listener)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    where = f"http://127.0.0.1:{listener.server_port}"
    css = f"<style>@import url({where}/style.css);</style> @import url({where}/bare.css); url('{where}/u.png')"
    spec = yaml.safe_load(hostile_params(tmp_path).read_text())
    spec["server"]["command"][-1] = css
    path = tmp_path / "css.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    try:
        proc = subprocess.run([*LAUNCHLAB, "run", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0 and "report would fetch" not in proc.stderr, proc.stderr[-3000:]
        run_dir = Path(proc.stdout.strip())
        html = (run_dir / "summary.html").read_text()
        assert f"@import url({where}/bare.css)" in html and "&lt;style&gt;@import" in html  # shown, as text
        dom = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000",
                              "--dump-dom", (run_dir / "summary.html").as_uri()], capture_output=True, text=True,
                             timeout=120)
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert "@import url(" in dom.stdout and asked == []
    finally:
        listener.shutdown()
