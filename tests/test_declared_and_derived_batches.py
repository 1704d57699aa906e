"""Real batches on the simulated host: a server argument SGLang derives from a declared flag follows from its
factor (no confound). (That the flag a threshold search varies is declared, the search controlled, is
test_threshold_search's, on its demo search.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, processes_using, write_params

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
