"""The verdict's strength of evidence, from real batches on the simulated host: repetitions that disagree make a
factor flaky (a port taken during one run), a confound that touches the runs a decision rests on makes it
confounded (another process's GPU memory before one run), and a decision says its counts and exact p-value."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, write_params

pytestmark = pytest.mark.slow

DESIGN = """\
experiment: {name}
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.1, workdir: {work}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{port}"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{port}/health"}}
  stop_grace_s: 5
factors:
  mem_fraction:
    "{low}": {{flags: {{--mem-fraction-static: "{low}"}}}}
    "0.85": {{flags: {{--mem-fraction-static: "0.85"}}}}
baseline: {{mem_fraction: "0.85"}}
repetitions: 2
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _done(out: Path, run_id: str) -> bool:
    for status in out.glob(f"*/*/runs/{run_id}/status.json"):
        try:
            return json.loads(status.read_text()).get("state") == "done"
        except ValueError:
            return False  # being replaced right now
    return False


class Between(threading.Thread):
    """Does `start()` once run `after` is done and `stop()` once run `until` is done: a disturbance that lasts
    exactly one run of the batch, from outside it."""

    def __init__(self, out: Path, after: str, until: str, begin, end):
        super().__init__(daemon=True)
        self.out, self.after, self.until, self.begin, self.end = out, after, until, begin, end
        self.halt, self.started = threading.Event(), False

    def run(self):
        while not self.halt.is_set() and not _done(self.out, self.after):
            time.sleep(0.05)
        if self.halt.is_set():
            return
        self.begin()
        self.started = True
        while not self.halt.is_set() and not _done(self.out, self.until):
            time.sleep(0.05)
        self.end()


def _run(path: Path, out: Path) -> tuple[Path, dict]:
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    # --no-html: the verdict and report.md, no summary kernel or export (`launchlab report` renders it later)
    assert (run_dir / "report.md").is_file() and not (run_dir / "summary.html").exists()
    assert "summary.html not rendered (--no-html)" in proc.stderr and f"report: {run_dir / 'report.md'}" in proc.stderr
    return run_dir, json.loads((run_dir / "verdict.json").read_text())


def first_screen(run_dir: Path) -> str:
    """report.md's first screen: the headline, the outcomes and the verdict's prose (up to the next section)."""
    return "\n## ".join((run_dir / "report.md").read_text().split("\n## ")[:3])


def test_a_port_taken_during_one_repetition_makes_the_factor_flaky_naming_the_odd_run(tmp_path, sim_root):
    port = _free_port()
    path = write_params(tmp_path, DESIGN.format(name="port-taken", work=tmp_path / "w", port=port, low="0.80"))
    out = tmp_path / "out"
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def take():
        squatter.bind(("127.0.0.1", port))
        squatter.listen()

    # runs interleave: 01 (0.80 rep1), 02 (0.85 rep1), 03 (0.80 rep2), 04 (0.85 rep2): 03 finds its port taken
    blocker = Between(out, "02_mem_fraction-0.85_rep1", "03_mem_fraction-0.80_rep2", take, squatter.close)
    blocker.start()
    try:
        run_dir, v = _run(path, out)
    finally:
        blocker.halt.set()
        blocker.join(5)
        squatter.close()
    assert blocker.started
    decision = v["factors"]["mem_fraction"]
    assert decision["status"] == "flaky" and v["flaky_factors"] == ["mem_fraction"], decision["summary"]
    assert v["outcome_factors"] == [] and v["neutral_factors"] == []
    assert v["conclusive"] is False and any("flaky" in r for r in v["inconclusive_reasons"])
    [stratum] = decision["strata"]
    assert stratum["flaky"] == ["0.80"]
    [odd] = stratum["levels"]["0.80"]["odd_runs"]
    assert odd["run_id"] == "03_mem_fraction-0.80_rep2" and odd["status"] == "failed"
    assert "03_mem_fraction-0.80_rep2 failed" in decision["summary"] and "1/2 ready" in decision["summary"]
    assert "address already in use" in odd["message"] and "address already in use" in decision["summary"], \
        "the odd run's reason: the server's last words"
    # the first screen gives the flaky decision's counts, its exact test and the runs that would settle it
    [comparison] = stratum["comparisons"]
    settle = comparison["repetitions_to_settle"]
    assert (comparison["ready"], comparison["valid"], comparison["p_value"]) == (1, 2, 1.0) and settle > 4
    screen = first_screen(run_dir)
    line = next(line for line in screen.splitlines() if line.startswith("**Flaky:**"))
    assert "0.80 1/2 vs 0.85 2/2 ready" in line and "Fisher's exact p = 1" in line, screen
    assert f"{settle} runs per side would settle it" in line, line


def test_another_process_on_the_gpus_before_one_run_confounds_the_decision_resting_on_it(tmp_path, sim_root):
    from launchlab.sim import state

    path = write_params(tmp_path, DESIGN.format(name="gpu-busy", work=tmp_path / "w", port="{port}", low="0.55"))
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])

    def box() -> Path:  # the batch's own simulated machine (hosts/sim.py new_box): sim_root/box-*/box
        [host] = sim_root.glob("box-*/box/host.json")
        return host.parent

    def hog():
        state.set_allocation(box(), holder.pid, 0, 3000, "python3")

    def free():
        (box() / "alloc" / f"{holder.pid}.json").unlink(missing_ok=True)

    # before 03 (0.55 rep2) another process holds 3000 MiB of GPU 0; it is gone before 04
    disturber = Between(out, "02_mem_fraction-0.85_rep1", "03_mem_fraction-0.55_rep2", hog, free)
    disturber.start()
    try:
        run_dir, v = _run(path, out)
    finally:
        disturber.halt.set()
        disturber.join(5)
        holder.kill()
        holder.wait()
    assert disturber.started
    busy = [c for c in v["confounds"] if c["kind"] == "gpu state"]  # before it, and during it
    assert busy and all(c["runs"] == ["03_mem_fraction-0.55_rep2"] for c in busy), v["confounds"]
    decision = v["factors"]["mem_fraction"]
    assert decision["status"] == "confounded" and decision["would_be"] == "decides", decision["summary"]
    assert decision["confounded_runs"] == ["03_mem_fraction-0.55_rep2"]
    assert v["confounded_factors"] == ["mem_fraction"] and v["outcome_factors"] == []
    assert v["conclusive"] is False and v["controlled"] is False
    assert any("confounded" in r and "gpu state" in r for r in v["inconclusive_reasons"])
    # the first screen (report.md before its first table, the summary's Verdict section) gives the confounded
    # decision's counts, exact p-value and the runs per side that would settle it, not only its summary
    assert decision["p_value"] == pytest.approx(1 / 3) and decision["repetitions_to_settle"] == 4
    said = ("0.55 0/2 vs 0.85 2/2 ready", "Fisher's exact p = 0.33", "4 runs per side would settle it")
    screen = first_screen(run_dir)
    line = next(line for line in screen.splitlines() if line.startswith("**Confounded:**"))
    assert "`mem_fraction`" in line and all(s in line for s in said), screen
    proc = subprocess.run([*LAUNCHLAB, "report", str(run_dir)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = (run_dir / "summary.html").read_text()
    section = html[html.index(">Verdict<"):html.index(">Design<")]
    assert "Confounded:" in section and all(s in section for s in said), section[-3000:]
