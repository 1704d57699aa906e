"""A server that floods its log (issue 23): a real process on the simulated host writes as fast as it can, one line
of 5 MB among a few hundred MB of short lines, then dies with a traceback. The run reaches its final status, the
run folder keeps the log's head and tail (lines cut) and says how much was cut, and the kit's processes (the
`launchlab run` process and its kernels) stay small while they watch, collect and parse it."""

import json
import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import LAUNCHLAB_EXEC, descendants, write_params
from launchlab.logparse.common import LINE_BYTES
from launchlab.store.keptlog import HEAD_BYTES, TAIL_BYTES

FLOOD_BYTES = 400 * 2**20  # a few hundred MB proves the bound (the server wrote 2.6 GB)
FLOOD_S = 8.0  # or as much as it writes in this time on a slow disk
PEAK_RSS_MB = 600  # the kit's processes; before issue 23 a run kernel held the flood in memory (well over this)
# what a flood may add to a kit process's peak over the same run without it, as a share of what the server wrote:
# the kit reads a log a few MiB at a time, so a process that held the raw log once would add all of it
FLOOD_SHARE = 0.25
FLOOD = """\
import sys, time
out = sys.stdout.buffer
out.write(b"flood server (simulated): starting\\n")
out.write(b"L" * 5_000_000 + b"\\n")  # one line of 5 MB
line = b"[flood] decode batch, #running-req: 12, #token: 1234, token usage: 0.12, gen throughput (token/s): 98.7\\n"
block, written, t0 = line * 10_000, 0, time.monotonic()
while written < {flood_bytes} and time.monotonic() - t0 < {flood_s}:
    out.write(block)
    written += len(block)
out.flush()
raise RuntimeError("flooded: the simulated server gives up")
"""


class PeakMemory(threading.Thread):
    """The highest VmHWM (peak resident memory) of a process and its descendants that are the kit's (the flooding
    server is left out: it is the server, not the kit), sampled every 50 ms until stopped."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peaks, self.done = pid, {}, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            for pid in (self.pid, *descendants(self.pid)):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                if b"flood.py" in cmdline:
                    continue
                hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
                name = cmdline.replace(b"\0", b" ")[:120].decode(errors="replace")
                if hwm / 1024 > self.peaks.get(pid, (0, ""))[0]:
                    self.peaks[pid] = (hwm / 1024, name)

    def highest(self) -> tuple[float, str]:
        return max(self.peaks.values(), default=(0.0, ""))

    def by_role(self) -> dict[str, float]:
        """The highest peak of each kind of kit process: the `launchlab run` process, its kernels (the kernel-fork
        server and the kernels forked from it), the rest (the simulated host's commands)."""
        roles: dict[str, float] = {}
        for mb, name in self.peaks.values():
            role = next((r for r, m in ROLES.items() if m in name), "other")
            roles[role] = max(roles.get(role, 0.0), mb)
        return roles


ROLES = {"launchlab run": "launchlab.cli", "kernels": "launchlab.runner.kernelfork"}


def run_batch(tmp_path: Path, flood_bytes: int) -> tuple[subprocess.CompletedProcess, PeakMemory]:
    """`launchlab run` of one run whose server writes flood_bytes of short lines (and one line of 5 MB) and dies
    with a traceback, with the peak memory of the kit's processes while it runs."""
    tmp_path.mkdir()
    script = tmp_path / "flood.py"
    script.write_text(FLOOD.format(flood_bytes=flood_bytes, flood_s=FLOOD_S))
    path = write_params(tmp_path, f"""\
        experiment: flood
        hosts:
          box: {{transport: sim, gpus: 1, pace: 0.05, workdir: {tmp_path / "hostwork"}}}
        server:
          kind: generic
          command: [python3, {script}]
          ready: {{timeout_s: 60, log_pattern: "never printed"}}
          stop_grace_s: 2
        drain: {{timeout_s: 10, tolerance_mib: 64}}
        """)
    proc = subprocess.Popen([*LAUNCHLAB_EXEC, "run", "--no-html", str(path), "--out", str(tmp_path / "out")],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ.copy(), start_new_session=True)
    memory = PeakMemory(proc.pid)
    memory.start()
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its kernels too
        out, err = proc.communicate()
        pytest.fail(f"`launchlab run` did not end within 180 s; peak memory so far {memory.highest()}")
    finally:
        memory.done.set()
        memory.join()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), memory


@pytest.mark.slow
def test_a_flooding_server_ends_with_a_final_status_its_log_cut_to_head_and_tail_and_the_kit_stays_small(
        tmp_path, sim_root):
    quiet, quiet_memory = run_batch(tmp_path / "quiet", flood_bytes=0)  # the same run, its server writing little
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    proc, memory = run_batch(tmp_path / "flood", flood_bytes=FLOOD_BYTES)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, err[-3000:]
    run_dir = Path(out.strip().splitlines()[-1])
    folder = next((run_dir / "runs").iterdir())
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "done" and status["status"] == "failed", status
    # the traceback the server died with is in the tail the kit kept, and the run's failure names it
    assert status["failure_reason"] == "exception"
    assert "RuntimeError: flooded" in status["failure_message"]

    log = folder / "server.log"
    kept = log.read_bytes()
    assert len(kept) <= HEAD_BYTES + TAIL_BYTES + 4096
    assert max(len(line) for line in kept.split(b"\n")) <= LINE_BYTES + 100  # the 5 MB line, cut and marked
    assert b"[launchlab: line cut at 64.0 KiB, 4,934,464 more bytes not kept]" in kept
    assert b"bytes of this server log not kept here" in kept
    [record] = status["logs"]
    assert record["name"] == "server.log" and record["complete"] is True
    assert record["written_bytes"] >= 200 * 2**20, record  # a few hundred MB were written
    assert record["kept_bytes"] == len(kept)
    assert record["cut_bytes"] >= record["written_bytes"] - HEAD_BYTES - TAIL_BYTES
    assert record["lines_cut"] == 1
    assert any(n.startswith("server.log: ") and " cut" in n for n in status["notes"])
    # and `launchlab run` says so
    said = r"server\.log: [\d.]+ MiB written, [\d.]+ MiB kept \(head [\d.]+ MiB \+ tail 8\.0 MiB\), [\d.]+ MiB cut"
    assert re.search(said, err), err[-2000:]

    peak_mb, which = memory.highest()
    print("peak memory of the kit's processes:", *(f"{mb:.0f} MB {name[:70]}" for mb, name in
                                                     sorted(memory.peaks.values(), reverse=True)[:3]), sep="\n  ")
    assert 0 < peak_mb < PEAK_RSS_MB, f"the kit's processes peaked at {peak_mb:.0f} MB ({which})"
    # and what the flood added to each kind of kit process is a small share of what the server wrote
    written_mb, quiet_peaks = record["written_bytes"] / 2**20, quiet_memory.by_role()
    added = {role: mb - quiet_peaks.get(role, 0.0) for role, mb in memory.by_role().items()}
    print(f"added by {written_mb:.0f} MB of log:", {role: f"{mb:+.0f} MB" for role, mb in added.items()})
    assert set(ROLES) <= set(added), added  # both kinds were measured, in both runs
    assert set(ROLES) <= set(quiet_peaks), quiet_peaks
    assert all(mb < FLOOD_SHARE * written_mb for mb in added.values()), (added, f"{written_mb:.0f} MB written")


def test_a_run_whose_collection_runs_past_its_deadline_ends_as_an_error_that_says_why(tmp_path, sim_root, monkeypatch):
    from conftest import connect
    from launchlab import params
    from launchlab.run import cleanup, lifecycle
    from launchlab.runner import runview
    from launchlab.runner.plan import make_plan
    from launchlab.store import rundir

    path = write_params(tmp_path, f"""\
        experiment: slow-collect
        hosts:
          box: {{transport: sim, gpus: 1, workdir: {tmp_path / "w"}}}
        server:
          kind: generic
          command: [bash, -c, "echo starting up; sleep 0.3; exit 3"]
          ready: {{timeout_s: 20, log_pattern: "never printed"}}
        """)
    monkeypatch.setattr(cleanup, "COLLECT_S", 0.0)  # a host too slow for any deadline
    exp = params.load(path)
    run = make_plan(exp)[0]
    run_dir = runview.ensure_run_dir(path)
    record = lifecycle.run_one(exp, run, run_dir, {run.host: connect(exp, run.host)})
    folder = rundir.RunDir(run_dir).run(run.run_id).path
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "done" and status["status"] == "error" == record.status
    assert "collecting the raw files of node 0 (box) ran past its deadline (0 s)" in status["failure_message"]
    assert "The server's log is still on the host" in status["failure_message"]
    assert (folder / "server.log").read_text() == "starting up\n"  # what the watcher saw is kept
