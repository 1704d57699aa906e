"""Real batches on the simulated host: a server argument SGLang derives from a declared flag follows from its
factor (no confound), and the flag a threshold search varies is declared (the search is controlled)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, processes_using, write_params
from test_threshold_search import demo_search

pytestmark = pytest.mark.slow

# no --mem-fraction-static: SGLang (0.5.x server_args._handle_gpu_memory_settings, which the simulated server
# models) then sets mem_fraction_static from the reserved memory, which counts cuda_graph_max_bs × 2 MiB
GRAPH_BS = """\
experiment: graph-bs
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.05, workdir: {workdir}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  graph_bs:
    "128": {{flags: {{--cuda-graph-max-bs: "128"}}}}
    "512": {{flags: {{--cuda-graph-max-bs: "512"}}}}
baseline: {{graph_bs: "128"}}
repetitions: 2
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


def run(path: Path, sim: Path) -> dict:
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert processes_using(str(sim)) == []
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    return {"verdict": json.loads((run_dir / "verdict.json").read_text()),
            "report": (run_dir / "report.md").read_text(), "run_dir": run_dir}


def test_the_mem_fraction_sglang_derives_from_cuda_graph_max_bs_follows_from_its_factor_not_a_confound(
        tmp_path, sim_root):
    done = run(write_params(tmp_path, GRAPH_BS.format(workdir=tmp_path / "w")), sim_root)
    verdict = done["verdict"]
    assert verdict["confounds"] == [] and verdict["controlled"] is True
    [derived] = verdict["derived_args"]
    assert derived["arg"] == "mem_fraction_static" and derived["follows_from"] == ["graph_bs"]
    # (97887 − max(512 + 8192 × 1.5 + bs × 2 + 2/8 × 1024, 10240)) / 97887, rounded as SGLang rounds it
    assert derived["values"] == {"128": "0.864", "512": "0.856"} and derived["repeated"] is True
    assert len(derived["runs"]) == 4
    assert "`mem_fraction_static` follows from `graph_bs`" in done["report"]


def test_a_threshold_search_counts_its_own_flag_as_declared_and_is_controlled(tmp_path, sim_root):
    done = run(demo_search(tmp_path, "0.74", "0.78", "0.02"), sim_root)
    verdict = done["verdict"]
    assert not [c for c in verdict["confounds"] if "mem_fraction_static" in c["detail"]], verdict["confounds"]
    assert verdict["confounds"] == [] and verdict["controlled"] is True
    # declared, not merely derived from the probed values
    assert "mem_fraction_static" not in [d["arg"] for d in verdict["derived_args"]]
    assert "Not a controlled comparison" not in done["report"]
    assert {s["stratum"]: s["state"] for s in verdict["thresholds"]["strata"]} == {
        "custom_ar=off": "converged", "custom_ar=on": "converged"}
