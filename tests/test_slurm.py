"""The slurm transport against a real single-node Slurm (tests/slurmd.py): each run one job that runs the
simulated SGLang server and nvidia-smi on the node; queue, stop, time limit, refusal and provenance through
the scheduler."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import LAUNCHLAB, ROOT, write_params

pytestmark = pytest.mark.slow

SMALL_SLURM = """\
experiment: small-slurm
hosts:
  cl:
    transport: slurm
    partition: gpu
    gres: "gpu:{gres}"
    time: "{time}"
    max_jobs: {max_jobs}
    workdir: {workdir}
    simulate: {{gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: {pace}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"]
  env: {{WEIRD: "a'b \\"c\\" $HOME `x` ; y"}}
  ready: {{timeout_s: {timeout}, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  mem_fraction:
    "0.55": {{flags: {{--mem-fraction-static: "0.55"}}}}
    "0.85": {{flags: {{--mem-fraction-static: "0.85"}}}}
baseline: {{mem_fraction: "0.85"}}
repetitions: 1
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


# the server as SGLang goes down when Slurm signals its job: a rank's TERM read as a fatal line, and the process
# tree taking seconds to exit (the job says COMPLETING meanwhile, longer than the watch's grace after a fatal line)
DYING_SLOWLY = ('[bash, -c, "python3 -m launchlab.sim.sglang_server --tp 2 --host 127.0.0.1 --port {{port}} \\"$@\\" & '
                "trap 'echo Received sigquit from a child process. It usually means the child failed.; sleep 6; exit 1' TERM; "
                'wait", server]')


def small(tmp_path: Path, *, gres: int = 2, time_limit: str = "00:05:00", max_jobs: int = 1, pace: float = 0.3,
          timeout: float = 60, dies_slowly: bool = False) -> Path:
    text = SMALL_SLURM.format(gres=gres, time=time_limit, max_jobs=max_jobs, pace=pace, timeout=timeout,
                              workdir=tmp_path / "shared")
    if dies_slowly:
        plain = 'command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{port}"]'
        assert plain in text
        text = text.replace(plain, "command: " + DYING_SLOWLY.format())
    return write_params(tmp_path, text)


def run_one_each(params_path: Path, run_dir: Path, box: Path, only: str | None = None):
    from launchlab import hosts, params
    from launchlab.run import lifecycle
    from launchlab.runner import plan

    exp = params.load(params_path)
    host = hosts.connect("cl", exp.hosts["cl"], sim_box=box)
    return [lifecycle.run_one(exp, run, run_dir, host) for run in plan.make_plan(exp) if only in (None, run.variant.name)]


def test_each_run_is_one_job_that_fails_or_gets_ready_as_on_the_simulated_host(slurm, tmp_path, sim_root):
    low, high = run_one_each(small(tmp_path), tmp_path / "rd", sim_root / "box")
    assert (low.status, low.failure_reason, low.failure_phase) == ("failed", "kv_cache_no_memory", "kv_cache")
    assert high.status == "ready" and high.startup_s is not None and high.peak_mem_used_mib > 80000
    for record in (low, high):
        assert record.queue_s is not None and record.queue_s >= 0
        [job] = record.scheduler
        assert job["JobId"].isdigit() and job["NodeList"] == slurm.node and job["Partition"] == "gpu"
        assert job["JobName"] == f"launchlab:{record.run_id}" and "gpu:2" in job["gres"]
        folder = tmp_path / "rd" / "runs" / record.run_id
        prov = json.loads((folder / "provenance.json").read_text())
        assert prov["scheduler"] == record.scheduler
        # the provenance is the node's, gathered inside the job: its environment, its (simulated) GPUs
        assert prov["host_env"]["SLURM_JOB_ID"] == job["JobId"] and prov["hostname"] == slurm.node
        assert prov["host_env"]["LAUNCHLAB_SIM_STATE"].endswith(f"/{record.run_id}/simbox")
        assert prov["host_facts"]["driver"] == "580.159.04" and len(prov["host_facts"]["gpus"]) == 2
        assert "pydantic" in prov["interpreter"]["packages"] and prov["integrity"]["package"] == "launchlab"
        assert [p["pid"] for p in json.loads((folder / "processes.json").read_text())] == [int(job["JobId"])] * 2
        assert gzip.decompress((folder / "nvidia-smi.csv.gz").read_bytes()).count(b"\n") > 1  # the sampler ran inside the job
    assert high.stopped_with == "TERM"  # scancel --signal=TERM stopped the ready server within its grace
    # pin_node: the second run asks for the node the first one got
    assert low.scheduler[0]["ReqNodeList"] == "(null)" and high.scheduler[0]["ReqNodeList"] == slurm.node
    assert slurm.jobs() == [] or all(" COMPLETED " in j or "CANCELLED" in j for j in slurm.jobs())


def test_every_env_value_reaches_the_server_inside_the_job_byte_for_byte(slurm, tmp_path, sim_root):
    from launchlab.hosts import commands
    from launchlab.hosts.commands import slurm as cmd

    folder = tmp_path / "job"
    folder.mkdir()
    value = "a'b \"c\" $HOME `x` ; y\nz"
    (folder / "server.env").write_text(commands.env_file_text({"WEIRD": value}))
    (folder / "server.sh").write_text(cmd.launch_script(
        ["python3", "-c", "import os, sys; sys.stdout.write(os.environ['WEIRD'])"], env_file="server.env",
        log_name="server.log"))
    (folder / "job.sh").write_text(cmd.job_script(str(folder)))
    job = subprocess.run(cmd.sbatch(str(folder / "job.sh"), run_id="envcheck", batch="-", folder=str(folder),
                                    partition="gpu", time="00:01:00", gres=None, account=None, nodes=1),
                         shell=True, capture_output=True, text=True, check=True).stdout.strip()
    deadline = time.monotonic() + 30
    while not (folder / "server.exit").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job.isdigit() and (folder / "server.exit").read_text().strip() == "0"
    assert (folder / "server.log").read_text() == value


def test_an_impossible_gres_is_refused_before_anything_is_submitted(slurm, tmp_path, sim_root):
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(small(tmp_path, gres=64)), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode != 0
    assert "Slurm refuses the host's job" in proc.stderr and "Requested node configuration is not available" in proc.stderr
    assert "Nothing was submitted" in proc.stderr
    assert slurm.jobs() == []
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("status.json"))


def test_a_job_that_outlives_its_time_limit_ends_as_a_named_reason(slurm, tmp_path, sim_root):
    # a minute is Slurm's smallest limit; at pace 40 the simulated server is far from ready by then
    [record] = run_one_each(small(tmp_path, time_limit="00:01:00", pace=40, timeout=600), tmp_path / "rd",
                            sim_root / "box", only="mem_fraction=0.85")
    assert (record.status, record.failure_reason) == ("failed", "job_time_limit"), record.failure_message
    assert "time limit" in record.failure_message and "00:01:00" in record.failure_message
    [end] = record.scheduler_end
    assert end["JobState"] == "TIMEOUT" and end["Reason"] == "TimeLimit" and end["NodeList"] == slurm.node
    # exit code and signal as Slurm gives them: the job's shell ends on the SIGTERM, or on the SIGKILL that follows
    # KillWait seconds later when a loaded machine is slow to wind its steps down (seen: "0:9")
    assert end["JobId"] == record.scheduler[0]["JobId"] and re.fullmatch(r"\d+:(0|9|15)", end["ExitCode"])
    # the test cluster keeps no accounting (no slurmdbd): sacct says so, and the controller's record is used
    assert end["source"] == "scontrol" and "accounting storage is disabled" in end["sacct_unavailable"]


def launchlab_jobs(slurm) -> list[str]:
    """The jobs of the kit the controller lists in a live state."""
    return [j for j in slurm.jobs() if "launchlab:" in j and j.split()[1] not in ("COMPLETED", "CANCELLED", "FAILED",
                                                                                 "TIMEOUT")]


def test_the_seed_demo_through_slurm_gives_the_verdict_of_the_simulated_host_two_jobs_at_a_time(slurm, tmp_path,
                                                                                               sim_root):
    most, done = [0], threading.Event()

    def count_running() -> None:
        while not done.is_set():
            most[0] = max(most[0], sum(" RUNNING " in f" {j} " for j in slurm.jobs() if "launchlab:" in j))
            time.sleep(0.3)

    watcher = threading.Thread(target=count_running, daemon=True)
    watcher.start()
    try:
        proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(ROOT / "params/sglang-custom-ar-slurm.yaml"), "--out",
                               str(tmp_path / "out")], capture_output=True, text=True, timeout=900, cwd=ROOT)
    finally:
        done.set()
        watcher.join()
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    assert most[0] == 2  # max_jobs: 2 jobs in flight at once, never more
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["controlled"] is True, verdict["confounds"]
    assert verdict["excluded_runs"] == []
    # 2 runs a side: the simulated host's decisions, at p = 0.33 — observed, not settled (issue 63)
    assert verdict["conclusive"] is False and all(d["settled"] is False for d in verdict["factors"].values())
    assert verdict["outcome_factors"] == ["mem_fraction"] and verdict["neutral_factors"] == ["custom_ar"]
    [kv] = [e for e in verdict["effects"] if (e["factor"], e["level"], e["metric"]) == ("custom_ar", "on", "kv_tokens")]
    assert kv["n"] == 2 and kv["diff"] < 0 and 0.9 < kv["ratio"] < 1
    runs = pd.read_parquet(run_dir / "runs.parquet")
    assert set(runs[runs["mem_fraction"] == "0.55"]["failure_reason"]) == {"kv_cache_no_memory"}
    assert set(runs[runs["mem_fraction"] == "0.85"]["status"]) == {"ready"}
    assert runs["queue_s"].notna().all() and set(runs["job_node"]) == {slurm.node}
    jobs = {json.loads((run_dir / "runs" / r / "provenance.json").read_text())["scheduler"][0]["JobId"]
            for r in runs["run_id"]}
    assert len(jobs) == 8  # one job per run
    assert launchlab_jobs(slurm) == []
    # the node a job ran on is a host fact: had one run landed elsewhere (pin_node: false), it is a confound
    from launchlab.verdicts import confounds
    facts = {r: json.loads((run_dir / "runs" / r / "provenance.json").read_text()) for r in runs["run_id"]}
    assert confounds.find(runs, facts, verdict["baseline"]) == []
    target = runs["run_id"][2]
    facts[target]["scheduler"][0]["NodeList"] = "gpu-node-17"
    [found] = confounds.find(runs, facts, verdict["baseline"])
    assert found["kind"] == "host" and "node the job ran on" in found["detail"] and found["runs"] == [target]


def test_ctrl_c_mid_batch_leaves_no_job_and_resume_finishes_the_batch(slurm, tmp_path, sim_root):
    import os
    import signal

    params_path = small(tmp_path, pace=1.0)
    proc = subprocess.Popen([*LAUNCHLAB, "run", "--no-html", str(params_path), "--out", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    deadline = time.monotonic() + 120
    while not any(" RUNNING " in f" {j} " for j in launchlab_jobs(slurm)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert launchlab_jobs(slurm), "no job of the batch ever ran"
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode != 0 and "--resume" in err, err[-2000:]
    assert launchlab_jobs(slurm) == []  # scancel'ed, not left in squeue
    run_dir = next((tmp_path / "out" / "small-slurm").iterdir())
    resumed = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(params_path), "--resume", str(run_dir)], capture_output=True,
                             text=True, timeout=600, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    runs = pd.read_parquet(run_dir / "runs.parquet")
    assert sorted(runs["status"]) == ["failed", "ready"]
    assert launchlab_jobs(slurm) == []


def test_a_job_of_a_dead_batch_is_a_leftover_that_stop_leftovers_cancels(slurm, tmp_path, sim_root):
    script = tmp_path / "sleep.sh"
    script.write_text("#!/bin/bash\nsleep 600\n")
    job = subprocess.run(["sbatch", "--parsable", "--comment=launchlab:01_x_rep1@deadbatch0000000",
                          "--job-name=launchlab:01_x_rep1", f"--output={tmp_path / 'sleep.out'}", str(script)],
                         capture_output=True, text=True, check=True).stdout.strip()
    params_path = small(tmp_path)
    refused = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(params_path), "--out", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert refused.returncode != 0 and f"pgid {job}" in refused.stderr and "--stop-leftovers" in refused.stderr
    assert any(j.startswith(f"{job} ") for j in launchlab_jobs(slurm))
    stopped = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(params_path), "--out", str(tmp_path / "out"),
                              "--stop-leftovers"],
                             capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert f"stopped leftover process group {job}" in stopped.stderr
    assert launchlab_jobs(slurm) == []


def slow_run_in_background(slurm, tmp_path, sim_root, **options) -> tuple[threading.Thread, dict]:
    """One slow run (pace 20) started in a thread, returned once its job RUNS (or after 2 minutes): the run's
    records land in result["runs"] when the thread ends."""
    result: dict = {}
    worker = threading.Thread(target=lambda: result.setdefault("runs", run_one_each(
        small(tmp_path, pace=20, timeout=600, **options), tmp_path / "rd", sim_root / "box", only="mem_fraction=0.85")))
    worker.start()
    deadline = time.monotonic() + 120
    while not any(" RUNNING " in f" {j} " for j in launchlab_jobs(slurm)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return worker, result


def test_a_node_that_fails_under_a_running_job_ends_the_run_as_a_node_failure(slurm, tmp_path, sim_root):
    worker, result = slow_run_in_background(slurm, tmp_path, sim_root)
    try:
        subprocess.run(["scontrol", "update", f"nodename={slurm.node}", "state=down", "reason=launchlab-test"],
                       check=True, capture_output=True)
        worker.join(timeout=300)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={slurm.node}", "state=resume"], capture_output=True)
    [record] = result["runs"]
    assert (record.status, record.failure_reason) == ("failed", "node_failure"), record.failure_message
    assert "launchlab-test" in record.failure_message or "node" in record.failure_message
    deadline = time.monotonic() + 60
    while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, "the node did not come back"
        time.sleep(0.5)


def test_a_queued_job_says_why_and_its_wait_is_queue_time_not_startup_time(slurm, tmp_path, sim_root):
    blocker = subprocess.run(["sbatch", "--parsable", "--gres=gpu:16", f"--output={tmp_path / 'block.out'}",
                              "--wrap", "sleep 300"], capture_output=True, text=True, check=True).stdout.strip()
    deadline = time.monotonic() + 30
    while not any(j.startswith(f"{blocker} RUNNING") for j in slurm.jobs()) and time.monotonic() < deadline:
        time.sleep(0.2)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.setdefault("runs", run_one_each(
        small(tmp_path), tmp_path / "rd", sim_root / "box", only="mem_fraction=0.85")))
    worker.start()
    status = tmp_path / "rd" / "runs" / "02_mem_fraction-0.85_rep1" / "status.json"
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while "Resources" not in seen and time.monotonic() < deadline:
        try:
            progress = json.loads(status.read_text())
        except (OSError, ValueError):
            progress = {}
        if progress.get("state") == "queued":
            seen.append(progress.get("detail"))
        time.sleep(0.1)
    time.sleep(5)
    subprocess.run(["scancel", blocker], check=True)
    worker.join(timeout=120)
    [record] = result["runs"]
    assert "Resources" in seen  # Slurm's reason, in the progress the batch prints
    assert record.status == "ready" and record.queue_s >= 5
    assert record.scheduler_end[0]["JobState"] not in ("PENDING", "RUNNING")  # read after the job ended
    assert record.startup_s < record.queue_s  # the ready clock started when the job ran


def test_a_job_preempted_by_a_higher_tier_partition_ends_the_run_as_a_preemption(slurm, tmp_path, sim_root):
    # the server writes a fatal line as it is signalled and takes seconds to go: the scheduler's PREEMPTED, known
    # only once the job is gone, is still the reason (CI saw 'exception' once: the sigquit line read as the cause)
    worker, result = slow_run_in_background(slurm, tmp_path, sim_root, dies_slowly=True)
    assert launchlab_jobs(slurm), "the run's job never ran"
    # preempted only once the server runs (its first line in the kit's copy of its log): a job preempted between
    # RUNNING and the server's start (seen under load) ends the same way but has no server to write the fatal line
    log = tmp_path / "rd" / "runs" / "02_mem_fraction-0.85_rep1" / "server.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and log.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.2)
    # a job of the higher PriorityTier that needs every GPU of the node: Slurm cancels the run's job for it
    urgent = subprocess.run(["sbatch", "--parsable", "--partition=urgent", "--gres=gpu:16",
                             f"--output={tmp_path / 'urgent.out'}", "--wrap", "sleep 3"],
                            capture_output=True, text=True, check=True).stdout.strip()
    worker.join(timeout=300)
    assert not worker.is_alive(), "the run hung after its job was preempted"
    [record] = result["runs"]
    assert (record.status, record.failure_reason) == ("failed", "job_preempted"), record.failure_message
    assert "preempted" in record.failure_message and record.scheduler[0]["JobId"] in record.failure_message
    assert "(None)" not in record.failure_message and "--resume" in record.failure_message
    assert record.scheduler_end[0]["JobState"] == "PREEMPTED"
    assert "sigquit" in (tmp_path / "rd" / "runs" / record.run_id / "server.log").read_text()  # the case in point
    deadline = time.monotonic() + 60
    while any(j.startswith(f"{urgent} ") and " RUNNING " in f" {j} " for j in slurm.jobs()):
        assert time.monotonic() < deadline, "the urgent job did not end"
        time.sleep(0.5)


def test_what_slurm_sets_per_job_is_not_an_environment_confound_but_an_undeclared_variable_still_is():
    from launchlab.verdicts import confounds

    def job(run: str, job_id: str, gpus: str, extra: dict | None = None) -> dict:
        env = {"PATH": "/usr/bin", "SLURM_JOB_ID": job_id, "SLURM_JOB_GPUS": gpus, "CUDA_VISIBLE_DEVICES": gpus,
               "LAUNCHLAB_SIM_STATE": f"/shared/{run}/simbox", **(extra or {})}
        return {"host_env": env, "scheduler": [{"JobId": job_id, "NodeList": "gpu-node-1"}]}

    facts = {"r1": job("r1", "11", "0,1"), "r2": job("r2", "12", "2,3")}
    assert confounds.env_differences(["r1", "r2"], facts) == []
    facts["r2"] = job("r2", "12", "2,3", {"NCCL_P2P_DISABLE": "1"})
    [found] = confounds.env_differences(["r1", "r2"], facts)
    assert found["kind"] == "environment" and "NCCL_P2P_DISABLE" in found["detail"] and found["runs"] == ["r2"]
    # on hosts without a scheduler, a CUDA_VISIBLE_DEVICES that differs is the user's doing: a confound
    plain = {r: {"host_env": f["host_env"]} for r, f in facts.items()}
    assert {"CUDA_VISIBLE_DEVICES", "NCCL_P2P_DISABLE"} <= {
        f["detail"].split()[3] for f in confounds.env_differences(["r1", "r2"], plain)}
