"""One run against real processes: the simulated box (a ready run, its host facts, a multi-node batch), a local host
without nvidia-smi, Ctrl-C, the run notebook. Every outcome of the run path's logic is tested in-process against
the in-memory host: tests/test_run_in_memory.py."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, MULTI_NODE, connect, write_params
from launchlab import params
from launchlab.run import lifecycle
from launchlab.runner import notebooks, runview
from launchlab.runner.plan import make_plan
from launchlab.store import rundir


def run_first(path, index=0):
    exp = params.load(path)
    run = make_plan(exp)[index]
    run_dir = runview.ensure_run_dir(path)
    hosts = {name: connect(exp, name) for name in run.hosts}
    return lifecycle.run_one(exp, run, run_dir, hosts), rundir.RunDir(run_dir).run(run.run_id).path


def test_a_ready_run_is_stopped_drained_and_collected(small_params):
    result, folder = run_first(small_params(), index=1)  # mem_fraction 0.85
    assert result.status == "ready"
    assert result.startup_s > 0
    assert result.drained is True
    assert result.stopped_with in ("TERM", "KILL")
    assert result.peak_mem_used_mib > 70 * 1024
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "done" and status["status"] == "ready"
    for name in ("server.log", "nvidia-smi.csv.gz", "provenance.json", "processes.json", "parsed.json"):
        assert (folder / name).is_file(), name
    processes = json.loads((folder / "processes.json").read_text())
    assert {p["role"] for p in processes} == {"server", "sampler"}
    assert all(p["stopped_with"] for p in processes)
    provenance = json.loads((folder / "provenance.json").read_text())
    assert provenance["simulated"] is True
    assert [g["mem_used_mib"] for g in provenance["preflight"]["gpus"]] == [0, 0]


def test_a_second_run_on_a_host_takes_its_table_and_topology_over_and_other_gpus_or_a_new_boot_read_them_again(
        small_params):
    from launchlab.hosts import provenance

    path = small_params(pace=0.01)
    exp = params.load(path)
    plan = make_plan(exp)
    run_dir = runview.ensure_run_dir(path)
    hosts = {name: connect(exp, name) for name in plan[0].hosts}
    for run in plan[:2]:
        lifecycle.run_one(exp, run, run_dir, hosts)
    first, second = (json.loads(rundir.RunDir(run_dir).run(r.run_id).provenance.read_text())["host_facts"]
                     for r in plan[:2])
    assert first["steady_from"] is None and first["topology_text"] and first["driver"] == "580.159.04"
    assert second["steady_from"] == plan[0].run_id  # said where they were read
    assert {k: second[k] for k in first if k != "steady_from"} == {k: first[k] for k in first if k != "steady_from"}

    host = hosts[plan[0].host]  # the real simulated host, its commands seen on the way
    seen, execute = [], host.execute
    host.execute = lambda command, **kw: seen.append(command) or execute(command, **kw)
    assert provenance.host_facts(host, ("r", second))["steady_from"] == plan[0].run_id
    assert not any("topo -m" in c or "nvidia-smi 2>&1" in c for c in seen), "nvidia-smi's table and topology again"
    seen.clear()
    elsewhere = provenance.host_facts(host, ("r", {**second, "steady_key": "0" * 64}))  # another boot or GPU list
    assert elsewhere == first and any("topo -m" in c for c in seen)


def test_ctrl_c_during_a_run_stops_the_server_and_records_the_interruption(small_params, tmp_path):
    path = small_params(pace=3.0, timeout=120)
    code = (f"from launchlab.runner import runview; rd = runview.ensure_run_dir({str(path)!r}); print(rd, flush=True); "
            f"runview.run_variant({str(path)!r}, '', rd)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy())
    run_dir = proc.stdout.readline().strip()
    folder = rundir.RunDir(run_dir).run(make_plan(params.load(path))[0].run_id).path
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (folder / "processes.json").exists() and "server" in (folder / "processes.json").read_text():
            break
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "KeyboardInterrupt" in err
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "done" and status["status"] == "error" and status["failure_reason"] == "interrupted"
    assert "interrupted" in status["failure_message"]
    recorded = json.loads((folder / "processes.json").read_text())
    host = connect(params.load(path))
    assert not any(host.group_alive(p["pgid"]) for p in recorded)


# node 0 serves HTTP after "rendezvous"; node 1 just stays up, or exits when asked to fail.
NODE_SCRIPT = ("import http.server, sys, time; rank, n, master, port = sys.argv[1:5]; "
               "print('node', rank, 'of', n, 'master', master, flush=True); "
               "time.sleep(2.0 if rank == '0' and FAIL else 0.5); "  # a failing worker fails first
               "[sys.exit(3) for _ in [0] if rank == '1' and FAIL]; "
               "print('serving', flush=True) if rank == '0' else None; "
               "http.server.HTTPServer(('127.0.0.1', int(port)), http.server.SimpleHTTPRequestHandler).serve_forever() "
               "if rank == '0' else time.sleep(600)")


def test_launchlab_run_handles_a_multi_node_experiment(tmp_path, sim_root):
    import subprocess

    import pandas as pd

    from conftest import LAUNCHLAB

    path = write_params(tmp_path, MULTI_NODE.format(w=tmp_path, script=NODE_SCRIPT.replace("FAIL", "False")))
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = Path(proc.stdout.strip())
    assert list(pd.read_parquet(run_dir / "runs.parquet")["status"]) == ["ready"]
    assert sorted(pd.read_parquet(run_dir / "telemetry.parquet")["node"].unique()) == [0, 1]


def test_a_run_is_never_run_again_over_its_raw_files(small_params, tmp_path):
    from launchlab.errors import RunDirError

    path = small_params(pace=0.2)
    run_dir = runview.ensure_run_dir(path)
    exp = params.load(path)
    run = make_plan(exp)[1]
    first = runview.run_variant(path, run.run_id, run_dir)
    folder = rundir.RunDir(run_dir).run(run.run_id).path
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    with pytest.raises(RunDirError, match="never overwritten"):
        runview.run_variant(path, run.run_id, run_dir)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    assert first.status == "ready"


@pytest.mark.slow
def test_a_host_without_nvidia_smi_is_refused_before_anything_is_launched(tmp_path):
    path = write_params(tmp_path, f"""\
experiment: no-smi
hosts:
  box: {{transport: local, workdir: {tmp_path / 'work'}}}
server:
  kind: generic
  command: [python3, -m, http.server, "{{port}}", --bind, 127.0.0.1]
  ready: {{timeout_s: 30, health_url: "http://127.0.0.1:{{port}}/"}}
""")
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # this machine has no nvidia-smi
    proc = subprocess.run([*LAUNCHLAB, "run", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "host 'box'" in proc.stderr and "nvidia-smi not found on PATH=" in proc.stderr
    assert "sampler: {kind: none}" in proc.stderr and "Traceback" not in proc.stderr
    assert not list((tmp_path / "out").rglob("processes.json"))


@pytest.mark.slow
def test_sampler_none_runs_without_nvidia_smi_and_the_report_says_there_is_no_trace(tmp_path):
    import pandas as pd

    path = write_params(tmp_path, f"""\
experiment: cpu-box
hosts:
  box: {{transport: local, workdir: {tmp_path / 'work'}}}
server:
  kind: generic
  command: [python3, -m, http.server, "{{port}}", --bind, 127.0.0.1]
  ready: {{timeout_s: 30, health_url: "http://127.0.0.1:{{port}}/"}}
  stop_grace_s: 3
sampler: {{kind: none}}
""")
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # no nvidia-smi on this machine
    proc = subprocess.run([*LAUNCHLAB, "run", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip())
    runs = pd.read_parquet(run_dir / "runs.parquet")
    assert list(runs["status"]) == ["ready"] and runs["peak_mem_used_mib"].isna().all()
    assert pd.read_parquet(run_dir / "telemetry.parquet").empty
    assert "No GPU trace" in (run_dir / "summary.html").read_text()
    status = json.loads(next(run_dir.glob("runs/*/status.json")).read_text())
    assert not any("could not collect" in n for n in status["notes"]), status["notes"]


def test_a_run_notebook_that_fails_is_recorded_with_its_exception_and_an_edited_params_file_is_refused(small_params,
                                                                                                      tmp_path):
    import papermill

    from conftest import ROOT

    path = small_params()
    run_dir = runview.ensure_run_dir(path)
    with pytest.raises(papermill.PapermillExecutionError) as info:
        papermill.execute_notebook(str(ROOT / "notebooks/run_variant.ipynb"), str(tmp_path / "out.ipynb"),
                                   parameters={"experiment": str(path), "run_id": "", "run_dir": str(run_dir),
                                               "params_sha256": "0" * 64},
                                   kernel_name="python3", progress_bar=False, cwd=str(ROOT / "notebooks"))
    message = notebooks.notebook_error(info.value)
    assert message.startswith("ParamsError: ") and "changed after the batch validated it" in message
    assert not list(run_dir.glob("runs/*/processes.json"))  # nothing was launched


def test_a_failed_launch_takes_the_schedulers_reason_unless_the_kit_cancelled_the_job_itself():
    """lifecycle._ended_by_scheduler: Node.ended_why (read right after the stop) overrides the server's last line
    for a preemption; a CANCELLED job is someone else's cancel unless the kit sent `scancel` itself (KILL) — its
    TERM only signals the steps, so after a TERM a CANCELLED job was cancelled from outside."""
    from launchlab.hosts.nodes import Node
    from launchlab.run.lifecycle import _ended_by_scheduler
    from launchlab.store.records import Outcome

    server_said = Outcome("failed", None, "Received sigquit from a child process.")

    def node(ended):
        return Node(0, None, "/x", "tag", ended_why=ended)

    preempted = ("job_preempted", "job 7: Slurm preempted the job")
    cancelled = ("job_cancelled", "job 7: the job was cancelled outside launchlab (CANCELLED)")
    assert _ended_by_scheduler([node(preempted)], server_said, kit_cancelled=True).reason == "job_preempted"
    assert _ended_by_scheduler([node(cancelled)], server_said, kit_cancelled=False).reason == "job_cancelled"
    assert _ended_by_scheduler([node(cancelled)], server_said, kit_cancelled=True) is server_said
    assert _ended_by_scheduler([node(None)], server_said, kit_cancelled=False) is server_said
    ready = Outcome("ready", None, "", 3.0)
    assert _ended_by_scheduler([node(preempted)], ready, kit_cancelled=False) is ready  # only a failure is explained
