"""A child that leaves its server's process group (`setsid`) is still the run's: it carries the run id, so it is
found and stopped after the run, and the run's status says which processes escaped."""

import json
import os
import re
import subprocess

from conftest import connect, processes_using, write_params
from launchlab import params
from launchlab.hosts import commands, nodes
from launchlab.run import lifecycle
from launchlab.runner import runview
from launchlab.runner.plan import make_plan
from launchlab.store import rundir

# a server that starts a helper in a session of its own (it inherits the environment, and so the run id)
ESCAPING_SERVER = ("import subprocess, time; "
                   "helper = subprocess.Popen(['setsid', 'sleep', '300']); "
                   "print('helper', helper.pid, flush=True); print('serving', flush=True); time.sleep(600)")


def test_a_child_that_left_the_servers_group_with_setsid_is_stopped_and_noted(tmp_path, sim_root):
    path = write_params(tmp_path, f"""\
        experiment: escapes
        hosts:
          box: {{transport: sim, gpus: 1, workdir: {tmp_path / "w"}}}
        server:
          kind: generic
          command: [python3, -c, "{ESCAPING_SERVER}"]
          ready: {{timeout_s: 20, log_pattern: "serving"}}
          stop_grace_s: 2
        """)
    exp = params.load(path)
    run = make_plan(exp)[0]
    run_dir = runview.ensure_run_dir(path)
    result = lifecycle.run_one(exp, run, run_dir, connect(exp))
    folder = rundir.RunDir(run_dir).run(run.run_id).path
    helper = int(re.search(r"helper (\d+)", (folder / "server.log").read_text())[1])
    tag = nodes.run_tag(exp, run_dir, run.run_id)
    assert result.status == "ready"
    assert processes_using(tag) == [], "no process carrying the run id is left"
    assert not os.path.exists(f"/proc/{helper}") or open(f"/proc/{helper}/stat").read().split()[2] == "Z"
    status = json.loads((folder / "status.json").read_text())
    escaped = [n for n in status["notes"] if "outlived its recorded process groups" in n]
    assert len(escaped) == 1 and f"pids {helper};" in escaped[0] and "stopped with TERM" in escaped[0]


def test_the_run_id_listing_is_checked_and_signals_only_processes_that_still_carry_the_run_id():
    listing = commands.find_tagged("LAUNCHLAB_RUN_ID")
    assert listing.startswith("for f in $(grep -l -s -e 'LAUNCHLAB_RUN_ID=' /proc/[0-9]*/environ); do ")
    assert listing.endswith(f"done; echo '{commands.TAGGED_END}'")
    assert commands.signal_tagged("LAUNCHLAB_RUN_ID", "e x/20260101-000000/01_a", [12, 34], "TERM") == (
        "for p in 12 34; do tr '\\0' '\\n' 2>/dev/null < /proc/$p/environ | "
        "grep -qxF -e 'LAUNCHLAB_RUN_ID=e x/20260101-000000/01_a' && kill -TERM $p 2>/dev/null; done; true")
    tagged = subprocess.Popen(["sleep", "30"], env={**os.environ, "LAUNCHLAB_RUN_ID": "e x/d/01_a"})
    other = subprocess.Popen(["sleep", "30"], env={**os.environ, "LAUNCHLAB_RUN_ID": "e x/d/01_ab"})
    try:
        out = subprocess.run(["sh", "-c", listing], capture_output=True, text=True).stdout.splitlines()
        assert f"{tagged.pid} {os.getpgid(tagged.pid)} e x/d/01_a" in out and out[-1] == commands.TAGGED_END
        pids = [tagged.pid, other.pid]
        subprocess.run(["sh", "-c", commands.signal_tagged("LAUNCHLAB_RUN_ID", "e x/d/01_a", pids, "KILL")], check=True)
        assert tagged.wait(5) == -9
        assert other.poll() is None, "a process of another run (a longer id) is spared"
    finally:
        for p in (tagged, other):
            p.kill()
            p.wait()


def test_nodes_on_one_machine_share_the_run_id_without_stopping_each_others_samplers(tmp_path, sim_root):
    path = write_params(tmp_path, f"""\
        experiment: two-nodes-one-machine
        nodes: [head, worker]
        hosts:
          head: {{transport: sim, gpus: 1, workdir: {tmp_path}/head}}
          worker: {{transport: sim, gpus: 1, workdir: {tmp_path}/worker}}
        server:
          kind: generic
          command: [python3, -c, "import time; print('serving', flush=True); time.sleep(600)"]
          ready: {{timeout_s: 20, log_pattern: serving}}
          stop_grace_s: 2
        """)
    exp = params.load(path)
    run = make_plan(exp)[0]
    run_dir = runview.ensure_run_dir(path)
    result = lifecycle.run_one(exp, run, run_dir, {name: connect(exp, name) for name in run.hosts})
    assert result.status == "ready"
    processes = json.loads((rundir.RunDir(run_dir).run(run.run_id).path / "processes.json").read_text())
    assert {(p["node"], p["role"]): p["stopped_with"] for p in processes} == {
        (0, "sampler"): "TERM", (0, "server"): "TERM", (1, "sampler"): "TERM", (1, "server"): "TERM"}
    assert not [n for n in result.notes if "outlived" in n]
    assert processes_using(nodes.run_tag(exp, run_dir, run.run_id)) == []
