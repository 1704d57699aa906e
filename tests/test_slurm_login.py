"""The slurm transport with its login node over SSH, for real: a real sshd on 127.0.0.1 (tests/sshd.py) is the
cluster's login node and a real single-node Slurm (tests/slurmd.py) its scheduler. Every Slurm command must run
there, through fabric: the kit's own PATH has tripwires in place of the Slurm tools, the login node's PATH has
wrappers that log each call and run the real tool."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, ROOT, write_params

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

TOOLS = ("sbatch", "squeue", "scancel", "scontrol", "srun", "sacct", "sinfo")


def _tools(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True)
    for tool in TOOLS:
        script = folder / tool
        script.write_text("#!/bin/sh\n" + body.format(tool=tool, real=shutil.which(tool) or f"/usr/bin/{tool}"))
        script.chmod(0o755)
    return folder


@pytest.fixture
def login_node(slurm, tmp_path, sim_root, monkeypatch):
    """An sshd whose sessions are a Slurm login node: the cluster's SLURM_CONF, the simulated 2-GPU box's
    nvidia-smi and the kit's Python, and wrappers in front of the Slurm tools that log each call to login.log."""
    import sshd as sshd_helper
    from launchlab import params
    from launchlab.hosts.sim import prepare_box

    if sshd_helper.SSHD is None or sshd_helper.SSH_KEYGEN is None:
        if os.environ.get("LAUNCHLAB_REQUIRE_SSHD") == "1":
            pytest.fail("sshd is required here (LAUNCHLAB_REQUIRE_SSHD=1) but not installed: apt-get install openssh-server")
        pytest.skip("no sshd binary (apt-get install openssh-server); .ci/run installs it and requires these tests")
    log = tmp_path / "login.log"
    wrappers = _tools(tmp_path / "login-bin", f'echo "{{tool}} $*" >> {log}\nexec {{real}} "$@"\n')
    env = prepare_box(sim_root / "loginbox", "loginbox", params.SimSpec(transport="sim", gpus=2, pace=0.3))
    env = {**env, "PATH": f"{wrappers}:{env['PATH']}", "SLURM_CONF": str(slurm.conf)}
    server = sshd_helper.make_server(tmp_path / "sshd", env)
    server.start()
    monkeypatch.setenv("LAUNCHLAB_KNOWN_HOSTS", str(server.known_hosts))
    monkeypatch.setenv("LAUNCHLAB_SSH_CONFIG", str(server.ssh_config))
    yield server, log
    server.stop()


LOGIN_PARAMS = """\
experiment: slurm-over-ssh
hosts:
  cl:
    transport: slurm
    login: {alias}
    partition: gpu
    gres: "gpu:2"
    time: "00:05:00"
    workdir: {workdir}
server:
  kind: sglang
  command: [{python}, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  mem_fraction:
    "0.55": {{flags: {{--mem-fraction-static: "0.55"}}}}
    "0.85": {{flags: {{--mem-fraction-static: "0.85"}}}}
baseline: {{mem_fraction: "0.85"}}
repetitions: 1
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


def test_a_batch_through_an_ssh_login_node_runs_every_slurm_command_there_and_none_here(login_node, slurm, tmp_path):
    server, login_log = login_node
    tripped = tmp_path / "tripped.log"
    tripwires = _tools(tmp_path / "kit-bin", f'echo "{{tool}} $*" >> {tripped}\nexit 97\n')
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["PATH"] = f"{tripwires}:{env['PATH']}"
    path = write_params(tmp_path, LOGIN_PARAMS.format(alias=server.host_alias, workdir=tmp_path / "shared",
                                                          python=sys.executable))
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not tripped.exists(), f"Slurm commands ran on the kit's machine: {tripped.read_text()}"
    called = [line.split()[0] for line in login_log.read_text().splitlines()]
    assert called.count("sbatch") >= 3  # the --test-only check, then one job per run
    assert {"squeue", "scancel", "scontrol", "srun"} <= set(called)
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    statuses = {f.name: json.loads((f / "status.json").read_text()) for f in (run_dir / "runs").iterdir()}
    by_level = {s["levels"]["mem_fraction"]: s for s in statuses.values()}
    assert by_level["0.55"]["failure_reason"] == "kv_cache_no_memory" and by_level["0.85"]["status"] == "ready"
    jobs = {s["scheduler"][0]["JobId"] for s in statuses.values()}
    assert len(jobs) == 2 and all(j.isdigit() for j in jobs)
    for run_id, status in statuses.items():
        [job] = status["scheduler"]
        assert job["NodeList"] == slurm.node and job["JobName"] == f"launchlab:{run_id}"
        assert any(line.startswith("sbatch --parsable") and f"launchlab:{run_id}" in line
                   for line in login_log.read_text().splitlines())
        folder = run_dir / "runs" / run_id
        prov = json.loads((folder / "provenance.json").read_text())
        assert prov["host_env"]["SLURM_JOB_ID"] == job["JobId"]  # gathered inside the job, not by the login shell
        assert len(prov["host_facts"]["gpus"]) == 2 and prov["interpreter"]["executable"] == sys.executable
        assert (folder / "server.log").stat().st_size > 0
        assert gzip.decompress((folder / "nvidia-smi.csv.gz").read_bytes()).count(b"\n") > 1
    assert not list((tmp_path / "shared").rglob("server.log")), "run folders on the login node are removed"
