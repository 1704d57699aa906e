"""Order effects (hyperfine's lesson): the first start on a host fills cold caches and starts far slower than its
repeats. A batch names such a first run in a warning, and `warmup: N` launches the baseline N times first on each
host — recorded as warm-up runs, never compared, not repeated by --resume. The simulated box's `cold_start_s`
makes its first start slow the way a cold compile cache does."""

import json
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import LAUNCHLAB, write_params
from launchlab import params
from launchlab.errors import ParamsError

DESIGN = """\
experiment: warm
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.3, cold_start_s: {cold},
        workdir: {workdir}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  mem_fraction:
    "0.55": {{flags: {{--mem-fraction-static: "0.55"}}}}
    "0.85": {{flags: {{--mem-fraction-static: "0.85"}}}}
baseline: {{mem_fraction: "0.85"}}
repetitions: 3
drain: {{timeout_s: 10, tolerance_mib: 64}}
{warmup}"""


def design(tmp_path: Path, cold: float, warmup: str = "") -> Path:
    return write_params(tmp_path, DESIGN.format(cold=cold, workdir=tmp_path / "hostwork", warmup=warmup))


def run(path: Path, *args: str) -> Path:
    done = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(done.stdout.strip())


@pytest.mark.slow
def test_a_first_run_slowed_by_a_cold_cache_is_named_in_a_warning_with_its_startup_and_the_median(tmp_path,
                                                                                                   sim_root):
    run_dir = run(design(tmp_path, cold=4.0), "--out", str(tmp_path / "out"))
    verdict = json.loads((run_dir / "verdict.json").read_text())
    runs = pd.read_parquet(run_dir / "runs.parquet").set_index("run_id")
    cold = [w for w in verdict["warnings"] if w.startswith("cold caches")]
    # 01 (0.55) fails before its graphs: 02 is the first start to compile, the one the cold cache slows
    assert len(cold) == 1 and "run 02_mem_fraction-0.85_rep1, the first ready run on host box" in cold[0], cold
    others = runs.loc[["04_mem_fraction-0.85_rep2", "06_mem_fraction-0.85_rep3"], "startup_s"].median()
    assert f"took {runs.loc['02_mem_fraction-0.85_rep1', 'startup_s']:.1f} s" in cold[0]
    assert f"median of {others:.1f} s" in cold[0]
    assert verdict["warmup_runs"] == []


@pytest.mark.slow
def test_warm_up_runs_go_first_are_recorded_as_such_and_never_compared_and_resume_does_not_repeat_them(
        tmp_path, sim_root):
    path = design(tmp_path, cold=4.0, warmup="warmup: 1\n")
    out = tmp_path / "out"
    proc = subprocess.Popen([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(out.glob("*/*/runs/02_*/status.json")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # Ctrl-C once the warm-up and the first run are done
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err[-2000:]
    assert "[warm-up 1] warmup1_mem_fraction-0.85  ready" in err, err[-3000:]
    [run_dir] = out.glob("*/*")
    warm = json.loads((run_dir / "runs/warmup1_mem_fraction-0.85/status.json").read_text())
    assert warm["warmup"] is True and warm["status"] == "ready" and warm["repetition"] == 1
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [w["run_id"] for w in manifest["warmup_runs"]] == ["warmup1_mem_fraction-0.85"]
    assert manifest["warmup_runs"][0]["warmup"] is True
    assert not any(r.startswith("warmup") for r in manifest["run_ids"])
    resumed = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--resume", str(run_dir)], capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "[warm-up 1] warmup1_mem_fraction-0.85  already done, skipped" in resumed.stderr
    assert not (run_dir / "runs/warmup1_mem_fraction-0.85/attempts").exists()  # not launched again
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["warmup_runs"] == [{"run_id": "warmup1_mem_fraction-0.85", "host": "box", "status": "ready",
                                       "startup_s": warm["startup_s"], "failure_reason": None}]
    runs = pd.read_parquet(run_dir / "runs.parquet")
    assert len(runs) == 6 and not runs["run_id"].str.startswith("warmup").any()  # never an observation
    assert not any("warmup1" in r["run_id"] for r in verdict["excluded_runs"])  # nor counted as invalid
    assert not any("warmup1" in c["detail"] for c in verdict["confounds"])
    assert "Warm-up runs" in (run_dir / "report.md").read_text()


def test_warmup_is_a_count_of_at_least_zero_and_a_threshold_search_warms_up_at_the_high_end(tmp_path):
    """A search's warm-up (issue 48: its first start compiles) is its baseline stratum at the range's high end, a
    launch that starts, before the first probes; never a probe."""
    with pytest.raises(ParamsError, match="warmup"):
        params.load(design(tmp_path, cold=0, warmup="warmup: -1\n"))
    with pytest.raises(ParamsError, match="warmup"):
        params.load(design(tmp_path, cold=0, warmup="warmup: true\n"))
    assert params.load(design(tmp_path, cold=0)).warmup == 0
    searched = design(tmp_path, cold=0, warmup="warmup: 1\n").read_text().replace("repetitions: 3\n", "") + (
        "search: {flag: --mem-fraction-static, low: \"0.5\", high: \"0.9\", resolution: \"0.1\"}\n")
    searched = searched.replace('factors:\n  mem_fraction:\n    "0.55": {flags: {--mem-fraction-static: "0.55"}}\n'
                                '    "0.85": {flags: {--mem-fraction-static: "0.85"}}\nbaseline: {mem_fraction: "0.85"}\n',
                                "")
    (tmp_path / "search.yaml").write_text(searched)
    exp = params.load(tmp_path / "search.yaml")
    from launchlab.runner.plan import make_plan

    plan = make_plan(exp)
    assert [r.warmup for r in plan] == [True, False, False]
    assert plan[0].run_id.startswith("warmup1_") and plan[0].variant.levels[exp.search.factor] == "0.9"
    assert [r.probe.value for r in plan[1:]] == ["0.5", "0.9"]
