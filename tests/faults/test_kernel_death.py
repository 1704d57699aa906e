"""A run whose notebook kernel dies is finished by the batch: every process it started (recorded or not) is
stopped, found by its run id, and the drain waits until none is left, so the next run starts on a clean box."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import LAUNCHLAB_EXEC, connect, descendants, processes_using
from launchlab import params
from launchlab.hosts import commands, nodes
from launchlab.run import recovery
from launchlab.runner import runview
from launchlab.runner.plan import make_plan
from launchlab.store import rundir

pytestmark = pytest.mark.slow


def kernel_of(batch_pid: int) -> int | None:
    """The batch's first kernel: named `ipykernel` (forked from the kit's kernel server, kernelfork.py), or started as
    `python -m ipykernel_launcher`."""
    for pid in descendants(batch_pid):
        try:
            if (Path(f"/proc/{pid}/comm").read_text().strip() == "ipykernel"
                    or b"ipykernel_launcher" in Path(f"/proc/{pid}/cmdline").read_bytes()):
                return pid
        except OSError:
            pass
    return None


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_kernel_killed_while_its_server_starts_leaves_nothing_running_and_the_next_run_starts_clean(
        tmp_path, small_params):
    path = small_params(pace=1.5, timeout=120)
    exp = params.load(path)
    first, second = make_plan(exp)
    proc = subprocess.Popen([*LAUNCHLAB_EXEC, "run", "--no-html", str(path), "--out", str(tmp_path / "out")],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        started = wait_for(lambda: [p for p in (tmp_path / "out").glob(f"*/*/runs/{first.run_id}/processes.json")
                                    if '"server"' in p.read_text()], 120, "the first run's server to start")
        folder = started[0].parent
        time.sleep(1.0)  # the server is starting: its TP scheduler processes hold simulated GPU memory
        assert json.loads((folder / "status.json").read_text())["state"] == "watching"
        os.kill(wait_for(lambda: kernel_of(proc.pid), 10, "the run's kernel"), signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    run_dir = folder.parents[1]
    tag = nodes.run_tag(exp, run_dir, first.run_id)
    assert processes_using(tag) == [], "nothing the killed run started is alive"
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "done" and status["status"] == "error"
    assert "the run notebook failed" in status["failure_message"] and "DeadKernelError" in status["failure_message"]
    recorded = json.loads((folder / "processes.json").read_text())
    assert {p["role"] for p in recorded} == {"server", "sampler"} and all(p["stopped_with"] for p in recorded)
    assert status["drained"] is True
    after = json.loads((rundir.RunDir(run_dir).run(second.run_id).path / "provenance.json").read_text())
    assert [g["mem_used_mib"] for g in after["preflight"]["gpus"]] == [0, 0]
    assert after["preflight"]["compute_apps"] == []
    assert json.loads((rundir.RunDir(run_dir).run(second.run_id).path / "status.json").read_text())["status"] == "ready"


def test_recovering_a_run_stops_the_processes_it_never_recorded(tmp_path, small_params):
    """The kernel died between starting the server and writing processes.json: the run id still finds it."""
    path = small_params(pace=3.0)
    exp = params.load(path)
    run = make_plan(exp)[1]
    run_dir = runview.ensure_run_dir(path)
    host = connect(exp)
    tag = nodes.run_tag(exp, run_dir, run.run_id)
    work = tmp_path / "unrecorded"
    work.mkdir()
    host.write_text(str(work / "server.env"), commands.env_file_text({"LAUNCHLAB_RUN_ID": tag}))
    argv = ["python3", "-m", "launchlab.sim.sglang_server", "--tp", "2", "--port", str(host.free_port())]
    ref = host.start_detached("server", argv, cwd=str(work), log_name="server.log", env_file="server.env")
    wait_for(lambda: len(processes_using(tag)) >= 3, 30, "the server and its two scheduler processes")
    result = recovery.recover(exp, run, run_dir, host, message="the run notebook failed: DeadKernelError: Kernel died")
    assert processes_using(tag) == []
    assert not host.group_alive(ref.pgid)
    assert result.status == "error" and "DeadKernelError" in result.failure_message
    assert any(f"pids {ref.pid}" in n and "outlived its recorded process groups" in n for n in result.notes)
