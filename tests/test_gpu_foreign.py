"""GPU memory of processes outside a run, while it runs: real batches on the simulated host, with a "GPU hog" — a
process that takes simulated memory during one chosen run, after its preflight — started by a wrapper in the
server command, detached from the run (its own session, without the run id), and stopped by its pid."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, write_params

pytestmark = pytest.mark.slow

HOG_MIB = 2048
HOG_NAME = "gpu-hog"
# the hog: takes HOG_MIB on its GPU of the simulated box, says so in a file (its pid), and goes when the run's folder
# on the host is removed (the kit's last step of the run, after it stopped the server: the next run's preflight
# finds the GPUs free), or after a minute at the latest
HOG = """\
import os, sys, time
from pathlib import Path
from launchlab.sim import state
folder, gpu, mib, ready = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), Path(sys.argv[4])
state.set_allocation(state.state_dir(), os.getpid(), gpu, mib, sys.argv[5])
ready.with_suffix(".tmp").write_text(str(os.getpid()))
ready.with_suffix(".tmp").replace(ready)
deadline = time.monotonic() + 60
while folder.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
"""


# a hog that comes and goes while the server starts: it holds its memory from before the server's launch (after
# the run's preflight) until the server's log says it captures its CUDA graphs, then frees it and exits — before the
# server is ready, so the looks when watching ends and before the stop find nothing of it
TRANSIENT_HOG = """\
import os, sys, time
from pathlib import Path
from launchlab.sim import state
folder, gpu, mib, ready = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), Path(sys.argv[4])
box = Path(state.state_dir())
state.set_allocation(box, os.getpid(), gpu, mib, sys.argv[5])
ready.with_suffix(".tmp").write_text(str(os.getpid()))
ready.with_suffix(".tmp").replace(ready)
deadline = time.monotonic() + 60
log = folder / "server.log"
while time.monotonic() < deadline:
    if log.exists() and "Capture cuda graph begin" in log.read_text(errors="replace"):
        break
    time.sleep(0.02)
(box / "alloc" / f"{os.getpid()}.json").unlink()
ready.with_name("hog.freed").write_text(str(time.time()))
"""


def hog_wrapper(folder: Path, seq: str | None, gpu: int = 0, mib: int = HOG_MIB, hog: str = HOG) -> Path:
    """A /bin/sh wrapper for the server command: in the run numbered seq (`03`) it starts the hog outside the run
    (setsid, the run id removed from its environment) and waits until it holds its memory, then execs the
    server. In every other run (and with seq None) it only execs the server."""
    (folder / "hog.py").write_text(hog)
    pidfile = folder / "hog.pid"
    script = folder / "hogwrap.sh"
    hog = shlex.join([sys.executable, str(folder / "hog.py")])
    script.write_text(f"""#!/bin/sh
case "$LAUNCHLAB_RUN_ID" in
  */{seq or "never"}_*)
    env -u LAUNCHLAB_RUN_ID setsid {hog} "$PWD" {gpu} {mib} {shlex.quote(str(pidfile))} {HOG_NAME} </dev/null >/dev/null 2>&1 &
    while [ ! -s {shlex.quote(str(pidfile))} ]; do sleep 0.02; done ;;
esac
exec "$@"
""")
    return script


def params(folder: Path, wrapper: Path, repetitions: int = 2, pace: float = 0.05) -> Path:
    """A 2-GPU simulated 2-level design (mem_fraction 0.55 fails, 0.85 is ready), fast pace, the server started
    through the wrapper."""
    return write_params(folder, f"""\
        experiment: foreign
        hosts:
          box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: {pace},
                 workdir: {folder / "hostwork"}}}
        server:
          kind: sglang
          command: [sh, {wrapper}, python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1,
                    --port, "{{port}}"]
          ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
          stop_grace_s: 5
        factors:
          mem_fraction:
            "0.55": {{flags: {{--mem-fraction-static: "0.55"}}}}
            "0.85": {{flags: {{--mem-fraction-static: "0.85"}}}}
        baseline: {{mem_fraction: "0.85"}}
        repetitions: {repetitions}
        drain: {{timeout_s: 1, tolerance_mib: 64}}  # the hog's run cannot drain: it outlives the server
        """)


def run_batch(path: Path, folder: Path) -> Path:
    pidfile = folder / "hog.pid"
    try:
        proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path)], capture_output=True, text=True, timeout=600)
    finally:  # the hog is stopped by its pid, whatever happened to the batch
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def gpu_state_confounds(verdict: dict) -> list[dict]:
    return [c for c in verdict["confounds"] if c["kind"] == "gpu state"]


def provenance(run_dir: Path, run_id: str) -> dict:
    return json.loads((run_dir / "runs" / run_id / "provenance.json").read_text())


def test_a_gpu_hog_during_one_run_after_its_preflight_is_a_gpu_state_confound_on_that_run_alone(tmp_path, sim_root):
    run_dir = run_batch(params(tmp_path, hog_wrapper(tmp_path, "03")), tmp_path)
    hog_pid = int((tmp_path / "hog.pid").read_text())
    verdict = json.loads((run_dir / "verdict.json").read_text())
    run_ids = sorted(p.name for p in (run_dir / "runs").iterdir())
    [disturbed] = [r for r in run_ids if r.startswith("03_")]
    found = gpu_state_confounds(verdict)
    assert [c["runs"] for c in found] == [[disturbed]], found
    assert disturbed in found[0]["detail"] and f"pid {hog_pid} ({HOG_NAME}) {HOG_MIB} MiB on GPU 0" in found[0]["detail"]
    assert verdict["controlled"] is False
    # the hog came after the preflight: the run's start was clean, and its record says who held what during it
    facts = provenance(run_dir, disturbed)
    assert facts["preflight"]["compute_apps"] == []
    state = facts["gpu_state"]
    assert state["foreign_peak_mib"] == HOG_MIB
    assert [(p["pid"], p["process_name"], p["used_mib"]) for p in state["foreign"]] == [(hog_pid, HOG_NAME, HOG_MIB)]
    assert {m["at"] for m in state["moments"]} == {"watched", "end"}
    # the other runs were looked at too, and saw only their own server
    for run_id in run_ids:
        if run_id != disturbed:
            other = provenance(run_dir, run_id)["gpu_state"]
            assert other["foreign"] == [] and other["foreign_peak_mib"] == 0
            if "0.85" in run_id:  # a ready server's own memory is the run's, not foreign
                assert all(m["run_mib"] > 70 * 1024 for m in other["moments"]), other
            assert all(isinstance(g["mem_free_mib"], float) for g in provenance(run_dir, run_id)["preflight"]["gpus"])


def test_a_gpu_hog_that_comes_and_goes_while_the_server_starts_is_seen_at_its_peak_and_confounds_that_run(
        tmp_path, sim_root):
    # pace 2: the server takes seconds to reach its CUDA graphs, so the kit looks at the GPUs while the hog holds
    run_dir = run_batch(params(tmp_path, hog_wrapper(tmp_path, "02", hog=TRANSIENT_HOG), repetitions=1, pace=2),
                        tmp_path)
    hog_pid = int((tmp_path / "hog.pid").read_text())
    assert (tmp_path / "hog.freed").exists(), "the hog freed its memory itself, while the server started"
    run_ids = sorted(p.name for p in (run_dir / "runs").iterdir())
    [disturbed] = [r for r in run_ids if r.startswith("02_")]
    facts = provenance(run_dir, disturbed)
    # the start (preflight) was before the hog, and the looks when watching ended and before the stop after it
    assert facts["preflight"]["compute_apps"] == []
    assert facts["gpu_state"]["foreign"] == [] and facts["gpu_state"]["foreign_peak_mib"] == 0
    assert {m["at"] for m in facts["gpu_state"]["moments"]} == {"watched", "end"}
    # yet it is a confound on that run alone, naming the process
    verdict = json.loads((run_dir / "verdict.json").read_text())
    found = gpu_state_confounds(verdict)
    assert [c["runs"] for c in found] == [[disturbed]], verdict["confounds"]
    assert f"pid {hog_pid} ({HOG_NAME}) {HOG_MIB} MiB on GPU 0" in found[0]["detail"]
    assert verdict["controlled"] is False
    # the looks while watching saw it, at its peak, and say when and how many looks there were
    seen = facts["gpu_watching"]
    assert seen["looks"] >= 1 and seen["every_s"] == 1.0
    assert [(p["pid"], p["process_name"], p["used_mib"]) for p in seen["foreign"]] == [(hog_pid, HOG_NAME, HOG_MIB)]
    [peak] = seen["moments"]
    assert (peak["at"], peak["foreign_mib"], seen["foreign_peak_mib"]) == ("peak", HOG_MIB, HOG_MIB)
    assert 0 < peak["t_s"] < json.loads((run_dir / "runs" / disturbed / "status.json").read_text())["startup_s"]
    [other] = [r for r in run_ids if r != disturbed]
    assert provenance(run_dir, other)["gpu_watching"]["foreign"] == []


def report(run_dir: Path) -> dict:
    (run_dir / "verdict.json").unlink()
    proc = subprocess.run([*LAUNCHLAB, "report", "--no-html", str(run_dir)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run_dir / "verdict.json").read_text())


def test_runs_without_a_hog_have_no_gpu_state_confound_and_an_old_run_directory_still_reports(tmp_path, sim_root):
    run_dir = run_batch(params(tmp_path, hog_wrapper(tmp_path, None), repetitions=1), tmp_path)
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert gpu_state_confounds(verdict) == []
    for folder in (run_dir / "runs").iterdir():
        assert json.loads((folder / "provenance.json").read_text())["gpu_state"]["foreign_peak_mib"] == 0
    # less free memory at one run's start than at the baseline's (memory no process shows, e.g. another container's)
    [other] = [p for p in (run_dir / "runs").iterdir() if "0.55" in p.name]
    facts = json.loads((other / "provenance.json").read_text())
    facts["preflight"]["gpus"][1]["mem_free_mib"] -= 1000
    (other / "provenance.json").write_text(json.dumps(facts))
    [found] = gpu_state_confounds(report(run_dir))
    assert found["runs"] == [other.name] and "1000 MiB less than the baseline runs" in found["detail"]
    # a run directory of a kit that did not look (no gpu_state, no memory.free): not observed, never zero
    for folder in (run_dir / "runs").iterdir():
        facts = json.loads((folder / "provenance.json").read_text())
        del facts["gpu_state"]
        for gpu in facts["preflight"]["gpus"]:
            del gpu["mem_free_mib"]
        (folder / "provenance.json").write_text(json.dumps(facts))
    assert gpu_state_confounds(report(run_dir)) == []


def search_params(folder: Path, wrapper: Path) -> Path:
    """A threshold search of --mem-fraction-static in one stratum on a 2-GPU simulated box (5 probes at most), the
    server started through the wrapper."""
    return write_params(folder, f"""\
        experiment: foreign-search
        hosts:
          box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.05,
                 workdir: {folder / "hostwork"}}}
        server:
          kind: sglang
          command: [sh, {wrapper}, python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1,
                    --port, "{{port}}"]
          ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
          stop_grace_s: 5
        factors:
          custom_ar:
            "off": {{flags: {{--disable-custom-all-reduce: true}}}}
        baseline: {{custom_ar: "off"}}
        search: {{flag: --mem-fraction-static, low: "0.70", high: "0.80", resolution: "0.02", outcome: ready,
                  repetitions: 1}}
        drain: {{timeout_s: 1, tolerance_mib: 64}}  # the hog's run cannot drain: it outlives the server
        """)


def test_a_search_probe_disturbed_by_a_gpu_hog_is_flagged_and_the_prediction_states_its_runs_and_spread(
        tmp_path, sim_root):
    from test_search import sim_break_even

    run_dir = run_batch(search_params(tmp_path, hog_wrapper(tmp_path, "03")), tmp_path)
    verdict = json.loads((run_dir / "verdict.json").read_text())
    run_ids = sorted(p.name for p in (run_dir / "runs").iterdir())
    [disturbed] = [r for r in run_ids if r.startswith("03_")]
    found = verdict["thresholds"]
    # each probe keeps its own prediction; the disturbed one is flagged, the others are not
    probes = {p["runs"][0]: p for p in found["probes"]}
    assert sorted(probes) == run_ids
    assert [r for r, p in probes.items() if p["flagged"]] == [disturbed], found["probes"]
    assert "disagrees" in probes[disturbed]["why"] and probes[disturbed]["predicted_break_even"] > \
        max(p["predicted_break_even"] for r, p in probes.items() if r != disturbed) + 0.005
    # the stratum's prediction rests on the agreeing probes' runs, says how many and their spread, and is not moved
    [stratum] = found["strata"]
    assert disturbed in stratum["flagged_probes"]
    assert stratum["predicted_n"] == len(run_ids) - 1
    assert stratum["predicted_min"] <= stratum["predicted_break_even"] <= stratum["predicted_max"]
    assert stratum["predicted_max"] - stratum["predicted_min"] < 0.0005
    assert abs(stratum["predicted_break_even"] - sim_break_even(False)) < 0.0005
    report = (run_dir / "report.md").read_text()
    assert f"from n={len(run_ids) - 1} runs" in report and "A probe disagrees" in report
    # and the run itself carries its gpu state confound
    assert [c["runs"] for c in gpu_state_confounds(verdict)] == [[disturbed]]
    # the disturbed probe ends the prediction's guidance of the search, and the report says why (issue 30)
    assert stratum["prediction_held"] is None and disturbed in stratum["prediction_note"]
    assert "The prediction was not followed" in report


def test_a_gpu_hog_during_an_end_of_the_search_sends_it_to_bisection_instead_of_the_prediction(tmp_path, sim_root):
    """Issue 30: with foreign memory on the low end's GPU (run 01), its logged figures are off and the kit saw a
    stranger during it: the stratum's prediction is not followed, and every probe after the ends bisects."""
    run_dir = run_batch(search_params(tmp_path, hog_wrapper(tmp_path, "01")), tmp_path)
    verdict = json.loads((run_dir / "verdict.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    [disturbed] = [r for r in manifest["run_ids"] if r.startswith("01_")]
    whys = [e["why"] for e in manifest["runs"]]
    assert whys[2:] and all(w.startswith("bisects (") and "the prediction is not followed" in w for w in whys[2:]), whys
    [stratum] = verdict["thresholds"]["strata"]
    assert stratum["state"] == "converged" and stratum["prediction_held"] is None
    assert f"during run {disturbed} processes outside it held up to {HOG_MIB} MiB" in stratum["prediction_note"]
    assert stratum["launches"] == stratum["blind_launches"] == len(manifest["run_ids"])


def test_a_worker_that_renamed_itself_is_still_the_runs_by_its_session_and_a_stranger_is_not(tmp_path):
    """vLLM's EngineCore calls setproctitle, which writes over /proc/PID/environ: the run id is gone from it (seen
    on a real H200: the run's own engine reported as foreign). The session the kit started the server in stays."""
    from launchlab import params
    from launchlab.hosts import commands
    from launchlab.hosts.sim import SimHost
    from launchlab.sim import state
    from launchlab.tags import RUN_ID_ENV
    from launchlab.verdicts import gpustate

    host = SimHost("box", params.SimSpec(transport="sim", gpus=2, pace=0.3), box=tmp_path / "sim")
    # a session leader (the server, as the kit starts it) whose worker has no run id in its environment
    leader = subprocess.Popen(["setsid", "bash", "-c", f"env -u {RUN_ID_ENV} {sys.executable} -c "
                               "'import time; time.sleep(60)' & echo $! ; wait"],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, RUN_ID_ENV: "01_x"})
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        worker = int(leader.stdout.readline())
        state.set_allocation(host.state_dir, worker, 0, 3000, "VLLM::EngineCore")
        state.set_allocation(host.state_dir, stranger.pid, 1, 1000, "python3")
        text = host.run(commands.gpu_owners(RUN_ID_ENV), timeout=30).stdout
        moment, foreign, _ = gpustate.read_look(text, gpustate.WATCHED, "box", "01_x", sessions=frozenset({leader.pid}))
        assert moment.run_mib == 3000 and [p.pid for p in foreign] == [stranger.pid]
        moment, foreign, _ = gpustate.read_look(text, gpustate.WATCHED, "box", "01_x")
        assert moment.foreign_mib == 4000, "without its session, the renamed worker looks foreign"
    finally:
        for proc in (leader, stranger):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
