"""The test cluster itself: a real slurmctld + slurmd that schedule a job onto fake GPUs and refuse what cannot fit."""

from __future__ import annotations

import subprocess
import time


def test_a_job_submitted_to_the_test_cluster_runs_on_its_fake_gpus(slurm, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\necho \"gpus=$SLURM_JOB_GPUS node=$SLURMD_NODENAME\"\n")
    out = tmp_path / "job.out"
    job = subprocess.run(["sbatch", "--parsable", "--gres=gpu:2", f"--output={out}", "--comment=smoke", str(script)],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert job.isdigit()
    deadline = time.monotonic() + 30
    while not (out.exists() and out.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert out.read_text().strip() == f"gpus=0,1 node={slurm.node}"


def test_the_test_cluster_refuses_more_gpus_than_its_node_has(slurm, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    proc = subprocess.run(["sbatch", "--test-only", "--gres=gpu:64", str(script)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "Requested node configuration is not available" in proc.stderr
