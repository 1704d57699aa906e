"""A dropped SSH connection is never evidence about the server: a command the drop cut off is run again on a
reopened connection and the watch goes on; a host that stays away ends the run as `error`, never `failed`."""

import json
import subprocess
import sys
import threading
import time

import pytest

from conftest import LAUNCHLAB, connect, write_params
from launchlab import params
from launchlab.hosts import nodes
from launchlab.run import lifecycle, recovery
from launchlab.runner import runview
from launchlab.runner.plan import make_plan
from launchlab.store import rundir

pytestmark = pytest.mark.ssh

LIVENESS_CHECK = "ps -e -o pgid="  # what the watch runs on the host every poll to see whether the server lives


def slow_ssh_run(tmp_path, server, reconnect_s: float, pace: float = 1.5):
    """The simulated SGLang server over the real sshd, on a box slow enough that the watch lasts seconds."""
    path = write_params(tmp_path, f"""\
        experiment: lost-connection
        hosts:
          gpu: {{transport: ssh, address: 127.0.0.1, port: {server.port}, identity_file: {server.client_key},
                 workdir: {tmp_path / 'remote'}, reconnect_s: {reconnect_s}}}
        server:
          kind: sglang
          command: [{sys.executable}, -m, launchlab.sim.sglang_server, --tp, "2", --port, "{{port}}",
                    --mem-fraction-static, "0.85"]
          ready: {{timeout_s: 120, health_url: "http://127.0.0.1:{{port}}/health"}}
          stop_grace_s: 5
        drain: {{timeout_s: 10, tolerance_mib: 64}}
        """)
    box = tmp_path / "sim/sshbox/host.json"
    state = json.loads(box.read_text())
    state["pace"] = pace
    box.write_text(json.dumps(state))
    exp = params.load(path)
    run = make_plan(exp)[0]
    run_dir = runview.ensure_run_dir(path)
    return exp, run, run_dir


def when_watching_and_checking_liveness(server, folder, action, times: int = 1, log_bytes: int = 0) -> threading.Thread:
    """Run action() `times` times, each at a moment the watch's liveness check is running over the connection
    (and, with log_bytes, once the kit's copy of the server log holds more than that)."""

    def cutter() -> None:
        done = 0
        while done < times and not thread.finished.is_set():
            watching = (folder / "status.json").exists() and '"watching"' in (folder / "status.json").read_text()
            seen = not log_bytes or ((folder / "server.log").exists() and (folder / "server.log").stat().st_size > log_bytes)
            if watching and seen and server.running(LIVENESS_CHECK):
                action()
                done += 1
                cuts.append(time.monotonic())
                time.sleep(1.0)
            time.sleep(0.002)

    cuts: list[float] = []
    thread = threading.Thread(target=cutter, daemon=True)
    thread.cuts, thread.finished = cuts, threading.Event()
    thread.start()
    return thread


def test_a_connection_dropped_while_the_server_starts_is_reopened_and_the_run_becomes_ready(tmp_path, sshd):
    # pace 3: the start lasts long enough for both cuts with the second a second after the first reconnected (at
    # pace 1.5 a loaded machine once saw the server ready before the cutter caught a second liveness check)
    exp, run, run_dir = slow_ssh_run(tmp_path, sshd, reconnect_s=20, pace=3.0)
    host = connect(exp)
    cutter = when_watching_and_checking_liveness(sshd, rundir.RunDir(run_dir).run(run.run_id).path, sshd.drop_sessions,
                                                 times=2)
    try:
        result = lifecycle.run_one(exp, run, run_dir, host)
    finally:
        cutter.finished.set()
        cutter.join()
        host.close()
    assert result.status == "ready", (result.failure_reason, result.failure_message, result.notes)
    assert len(cutter.cuts) == 2, "the connection was cut twice while the liveness check ran"
    assert result.failure_reason is None
    assert result.stopped_with in ("TERM", "KILL") and result.drained is True


def test_a_host_that_stays_unreachable_ends_the_run_as_an_error_keeps_what_was_seen_and_leaves_a_found_leftover(
        tmp_path, sshd):
    exp, run, run_dir = slow_ssh_run(tmp_path, sshd, reconnect_s=2)
    host = connect(exp)
    folder = rundir.RunDir(run_dir).run(run.run_id).path
    cutter = when_watching_and_checking_liveness(sshd, folder, sshd.stop, log_bytes=200)
    try:
        result = lifecycle.run_one(exp, run, run_dir, host)
    finally:
        cutter.finished.set()
        cutter.join()
        host.close()
    try:
        assert result.status == "error", (result.failure_reason, result.failure_message)
        assert len(cutter.cuts) == 1
        assert result.failure_reason is None
        assert "lost the connection to host 'gpu' while watching" in result.failure_message
        assert "could not be reopened within 2 s" in result.failure_message
        status = json.loads((folder / "status.json").read_text())
        assert status["state"] == "done" and status["status"] == "error"
        assert "SIMULATED SGLang server" in (folder / "server.log").read_text()  # what was seen before the cut is kept
        assert any("could not collect" in n for n in result.notes)
    finally:
        sshd.start()  # the box is back: what the lost run left there is found by its run id
        host = connect(params.load(run_dir / "experiment.yaml"))
        tag = nodes.run_tag(exp, run_dir, run.run_id)  # other runs on this machine carry other tags
        left = [g for g in recovery.leftovers(host) if g["run"] == tag]
        # a batch on the host now refuses to launch beside them, and says how to stop them
        refused = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(tmp_path / "exp.yaml"), "--out",
                                  str(tmp_path / "out2")], capture_output=True, text=True, timeout=120)
        for group in left:
            host.kill_group(group["pgid"], 5)
        gone = [g for g in recovery.leftovers(host) if g["run"] == tag]
        host.close()
    assert len(left) == 2, "the server and the sampler kept running while the host was away"
    assert refused.returncode == 1 and "--stop-leftovers" in refused.stderr, refused.stderr[-2000:]
    assert gone == []
