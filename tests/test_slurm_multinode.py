"""A multi-node server through Slurm (`nodes: 2`), against a real two-node Slurm on this machine (tests/slurmd.py:
two slurmd instances, n1 and n2): one task per node through srun, each with its own {node_rank}, the job's
{nnodes} and the first node of the job as {master_addr}, in argv and in env values alike."""

from __future__ import annotations

import pytest

from conftest import running_slurm, write_params

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slurm2(tmp_path_factory):
    yield from running_slurm(tmp_path_factory, nodes=2)


TWO_NODES = """\
experiment: two-nodes
hosts:
  cl:
    transport: slurm
    partition: gpu
    gres: "gpu:2"
    nodes: 2
    time: "00:05:00"
    workdir: {workdir}
    simulate: {{gpus: 2}}
server:
  kind: generic
  command:
    - bash
    - -c
    - >-
      echo "rank={{node_rank}} of {{nnodes}} master={{master_addr}} on $SLURMD_NODENAME env=$WHO
      box=$(basename $LAUNCHLAB_SIM_STATE)";
      if [ {{node_rank}} = 0 ]; then exec python3 -m http.server {{port}} --bind 127.0.0.1; else exec sleep 300; fi
  env: {{WHO: "{{node_rank}}/{{nnodes}}@{{master_addr}}"}}
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/"}}
  stop_grace_s: 5
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


def test_a_two_node_job_runs_one_task_per_node_with_its_rank_the_node_count_and_the_first_node_as_master(
        slurm2, tmp_path, sim_root):
    from launchlab import hosts, params
    from launchlab.run import lifecycle
    from launchlab.runner import plan

    exp = params.load(write_params(tmp_path, TWO_NODES.format(workdir=tmp_path / "shared")))
    host = hosts.connect("cl", exp.hosts["cl"], sim_box=sim_root / "box")
    [run] = plan.make_plan(exp)
    record = lifecycle.run_one(exp, run, tmp_path / "rd", host)
    assert record.status == "ready", record.failure_message
    [job] = record.scheduler
    assert job["NumNodes"] == "2" and job["NodeList"] == "n[1-2]" and record.job_node == "n[1-2]"
    folder = tmp_path / "rd" / "runs" / run.run_id
    first = (folder / "server.log").read_text().splitlines()[0]
    second = (folder / "server.node1.log").read_text().splitlines()[0]  # collected with node 0's
    assert first == "rank=0 of 2 master=n1 on n1 env=0/2@n1 box=simbox"
    assert second == "rank=1 of 2 master=n1 on n2 env=1/2@n1 box=simbox.node1"
    assert record.stopped_with == "TERM"
    assert all(" RUNNING " not in f" {j} " for j in slurm2.jobs())
