"""A disk that fills up mid-batch: a clear message and no traceback, every started run stopped and marked,
no temporary file left, and `--resume` finishes the batch once there is space again. The output folder is a
real, small tmpfs (the tests run as root, in CI too)."""

import json
import subprocess
import time
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, processes_using

pytestmark = pytest.mark.slow

PARAMS = """\
experiment: fills-the-disk
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 1.5}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}",
            --mem-fraction-static, "0.85"]
  ready: {{timeout_s: 120, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  graphs:
    "128": {{flags: {{--cuda-graph-max-bs: "128"}}}}
    "256": {{flags: {{--cuda-graph-max-bs: "256"}}}}
baseline: {{graphs: "128"}}
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"this test needs to mount a tmpfs (run as root, as CI does): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Write until the disk refuses: what is left is what the filler did not take."""
    filler = folder / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 16))
                fh.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_stops_the_batch_cleanly_and_resume_finishes_it(tmp_path, sim_root, small_disk):
    path = tmp_path / "fill.yaml"
    path.write_text(PARAMS.format())
    out = small_disk / "out"
    proc = subprocess.Popen([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    watching = None
    while time.monotonic() < deadline and watching is None:
        for status in out.glob("*/*/runs/*/status.json"):
            try:
                if json.loads(status.read_text()).get("state") == "watching":
                    watching = status
            except ValueError:
                pass
        time.sleep(0.1)
    assert watching is not None, "the first run never reached its watch"
    filler = fill(small_disk)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    assert "the disk is full" in err and "--resume" in err
    assert "had exited by itself" not in err, err[-3000:]  # the kit stopped the runs it had started
    run_dir, run_id = watching.parent.parent.parent, watching.parent.name
    [line] = [ln for ln in err.splitlines() if f"] {run_id}  " in ln and "(done in" in ln]  # the watched run's end
    assert "stopped by the kit" in line or "killed by the kit" in line, line
    for status in run_dir.glob("runs/*/status.json"):
        record = json.loads(status.read_text())
        assert record["state"] == "done", record  # marked, not stuck at `watching`
    assert json.loads(watching.read_text())["status"] in ("error", "ready")
    leftovers = [p for p in out.rglob("*") if p.name.startswith(".") and p.is_file()]
    assert leftovers == [], leftovers  # no .tmp, .fetching, .masking files
    assert processes_using(str(sim_root)) == []
    filler.unlink()  # space again: the batch can be finished
    again = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--resume", str(run_dir)], capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    # every run resumed and observed; graphs changes nothing on one run a side: observed, not settled (issue 63)
    assert verdict["excluded_runs"] == [] and verdict["neutral_factors"] == ["graphs"]
    assert verdict["factors"]["graphs"]["settled"] is False and verdict["conclusive"] is False
    assert (run_dir / "report.md").stat().st_size > 0  # the resumed batch ends with its report
