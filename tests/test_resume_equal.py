"""A batch interrupted with Ctrl-C and finished with `--resume` is judged as if it had run in one go, and the demo
so gets the demo's verdict: the resumed batch gets a new simulated box (new folders on PATH, a new
LAUNCHLAB_SIM_STATE), new kernels, new ports and a second attempt of the interrupted run, and none of it is
compared."""

import json
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import LAUNCHLAB, ROOT

pytestmark = pytest.mark.slow

# The demo itself (its four variants once each: the verdict's factors at a quarter of its runs, on the simulated
# 8-GPU box): interrupted and resumed, it must get the demo's verdict.
DEMO = str(ROOT / "params" / "demo.yaml")
ONCE = ["--repetitions", "1"]


def interrupt_when_watching(out: Path, proc: subprocess.Popen, run_prefix: str, limit_s: float = 120) -> None:
    """Ctrl-C (SIGINT) once the run whose id starts with run_prefix has its server started and watched."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        for status in out.glob(f"*/*/runs/{run_prefix}*/status.json"):
            try:
                if json.loads(status.read_text()).get("state") == "watching":
                    proc.send_signal(signal.SIGINT)
                    return
            except ValueError:
                pass  # being replaced
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"run {run_prefix} never reached its watch: {proc.communicate()[1][-2000:]}")


def judged(run_dir: Path) -> dict:
    """What the verdict says, without what differs from batch to batch by chance (effect sizes, timings)."""
    verdict = json.loads((run_dir / "verdict.json").read_text())
    runs = pd.read_parquet(run_dir / "runs.parquet")
    return {"controlled": verdict["controlled"], "confounds": verdict["confounds"],
            "factors": {f: d["status"] for f, d in verdict["factors"].items()},
            "outcome_factors": verdict["outcome_factors"], "neutral_factors": verdict["neutral_factors"],
            "excluded_runs": verdict["excluded_runs"],
            "outcomes": runs.groupby(["variant", "status"]).size().to_dict(),
            "runs": sorted(runs["run_id"])}


def test_the_demo_interrupted_and_resumed_is_judged_like_the_demo_run_in_one_go(tmp_path, sim_root):
    whole = subprocess.run([*LAUNCHLAB, "run", "--no-html", DEMO, *ONCE, "--out", str(tmp_path / "whole")],
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-2000:]
    out = tmp_path / "parts"
    proc = subprocess.Popen([*LAUNCHLAB, "run", "--no-html", DEMO, *ONCE, "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    interrupt_when_watching(out, proc, "02_")
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err[-2000:]
    [run_dir] = out.glob("*/*")
    assert not (run_dir / "runs" / "03_custom_ar-on.mem_fraction-0.75_rep1").exists()  # interrupted midway
    resumed = subprocess.run([*LAUNCHLAB, "run", "--no-html", DEMO, *ONCE, "--resume", str(run_dir)],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "01_custom_ar-off.mem_fraction-0.75_rep1  already done, skipped" in resumed.stderr
    first = json.loads((run_dir / "runs/01_custom_ar-off.mem_fraction-0.75_rep1/provenance.json").read_text())
    last = json.loads((run_dir / "runs/04_custom_ar-on.mem_fraction-0.85_rep1/provenance.json").read_text())
    # the resume did run on another box: its folders differ, and are recorded as the kit's own
    assert first["host_env"]["LAUNCHLAB_SIM_STATE"] != last["host_env"]["LAUNCHLAB_SIM_STATE"]
    assert first["kit_env"]["LAUNCHLAB_SIM_STATE"] == first["host_env"]["LAUNCHLAB_SIM_STATE"]
    assert (run_dir / "runs/02_custom_ar-off.mem_fraction-0.85_rep1/attempts/1").is_dir()  # the interrupted attempt
    in_one_go = judged(Path(whole.stdout.strip()))
    # the demo's verdict: controlled, custom all-reduce decides at 0.75 and the fraction with custom all-reduce on
    assert in_one_go["controlled"] is True and in_one_go["confounds"] == []
    assert in_one_go["outcome_factors"] == ["custom_ar", "mem_fraction"] and in_one_go["neutral_factors"] == []
    assert judged(run_dir) == in_one_go
