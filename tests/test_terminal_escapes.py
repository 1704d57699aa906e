"""Nothing the CLI prints and nothing in report.md carries a raw control character (but tab and newline): a
server log's or a params value's escape sequences — a window title (OSC 0), a clipboard write (OSC 52), colours
and screen clears (CSI), a bell, C1 controls — are removed where they are a log's formatting, else shown as
`\\x1b`. Checked on the real CLI's output, a real batch on the simulated host included."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, write_params

RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

LOG = (
    "\x1b]0;pwned-title\x07[2025-01-01 00:00:00] \x1b[32mLoad weight begin. avail mem=93.50 GB\x1b[0m\n"
    "[2025-01-01 00:00:01] \x1b]52;c;cHduZWQ=\x07Load weight end. type=X, dtype=torch.bfloat16, avail mem=23.40 GB, "
    "mem usage=70.10 GB.\n"
    "\x1b[2J\x1b[H\x1bPdevice-control\x1b\\Traceback (most recent call last):\n"
    '  File "x.py", line 1, in <module>\n'
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. \x1b]0;boom\x07 bell\x07 "
    "backspace\x08 c1-csi\x9b2J cr\rend\n"
)


@pytest.fixture
def hostile_log(tmp_path) -> Path:
    path = tmp_path / "server.log"
    path.write_text(LOG, encoding="utf-8")
    return path


def run_cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHLAB, *args], capture_output=True, text=True, timeout=300, **kwargs)


def test_parse_prints_a_logs_escape_sequences_neither_raw_nor_at_all(hostile_log):
    proc = run_cli("parse", str(hostile_log), "--server", "sglang")
    assert proc.returncode == 0, proc.stderr
    assert not RAW_CONTROL.search(proc.stdout + proc.stderr), repr(proc.stdout)
    assert "pwned-title" not in proc.stdout and "cHduZWQ=" not in proc.stdout and "boom" not in proc.stdout
    # what a reader of the log saw is still there, the lone controls shown
    assert "failure: kv_cache_no_memory in kv_cache" in proc.stdout
    assert "bell\\x07 backspace\\x08 c1-csi\\x9b2J" in proc.stdout
    assert re.search(r"^\s+0\s+93\.5\s+23\.4\s+70\.1$", proc.stdout, re.M), proc.stdout


def test_parse_json_holds_the_message_without_the_escape_sequences(hostile_log):
    proc = run_cli("parse", str(hostile_log), "--server", "sglang", "--json")
    assert proc.returncode == 0 and not RAW_CONTROL.search(proc.stdout)
    message = json.loads(proc.stdout)["failure"]["message"]
    assert message.startswith("RuntimeError: Not enough memory") and "\x1b" not in message and "boom" not in message


@pytest.mark.slow
def test_validate_shows_an_escape_in_a_refused_name(tmp_path):
    path = write_params(tmp_path, """\
experiment: esc
hosts:
  box: {transport: sim, gpus: 2}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --port, "{port}"]
factors:
  f:
    "a\\e]0;pwned\\a": {}
    b: {}
baseline: {f: b}
""")
    proc = run_cli("validate", str(path))
    assert proc.returncode == 2 and not RAW_CONTROL.search(proc.stderr), repr(proc.stderr)
    assert "`a\\x1b]0;pwned\\x07`" in proc.stderr


ESC_PARAMS = """\
experiment: escapes
question: "Does \\e]52;c;cHduZWQ=\\a the clipboard \\e]0;title\\a change? \\e[31mred\\e[0m"
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.05, workdir: {work}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  name:
    plain: {{flags: {{--mem-fraction-static: "0.85"}}}}
    odd: {{flags: {{--mem-fraction-static: "0.85", --served-model-name: "m\\e]52;c;aGk=\\a\\e[2J"}}}}
baseline: {{name: plain}}
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


@pytest.mark.slow
def test_a_batch_prints_and_reports_params_escapes_only_as_text(tmp_path, sim_root):
    path = write_params(tmp_path, ESC_PARAMS.format(work=tmp_path / "hostwork"))
    out = tmp_path / "out"
    proc = run_cli("run", "--no-html", str(path), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not RAW_CONTROL.search(proc.stdout + proc.stderr), repr(proc.stderr[-2000:])
    run_dir = Path(proc.stdout.strip())
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert not RAW_CONTROL.search(report), [m.group() for m in RAW_CONTROL.finditer(report)]
    assert "Question: Does \\\\x1b\\]52;c;cHduZWQ=\\\\x07 the clipboard" in report, report[:500]
    assert "m\\x1b]52;c;aGk=\\x07\\x1b[2J" in report  # the flag value in the variant's command block
    listed = run_cli("ls", str(out))
    assert listed.returncode == 0 and "escapes" in listed.stdout
    assert not RAW_CONTROL.search(listed.stdout + listed.stderr)
