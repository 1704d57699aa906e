"""The drain after a run waits for the run's processes to be gone, not only for the memory figure to look back
to normal: on the simulated box a starting server's processes hold no memory yet, so memory alone reads
"drained" at once."""

import os
import subprocess
import time
from pathlib import Path

from conftest import connect
from launchlab import params, tags
from launchlab.hosts import nodes
from launchlab.run import cleanup, lifecycle
from launchlab.store import records


def drain_with(small_params, tmp_path, process_s: float, drain_timeout_s: float):
    path = small_params()
    path.write_text(path.read_text().replace("drain: {timeout_s: 10", f"drain: {{timeout_s: {drain_timeout_s}"))
    exp = params.load(path)
    host = connect(exp)
    tag = f"drain/{tmp_path.name}/01_run"
    node = nodes.Node(0, host, str(tmp_path), tag, preflight=lifecycle._preflight(host))
    result = records.RunRecord("01_run", "v", 1, host.name, {})
    straggler = subprocess.Popen(["sleep", str(process_s)], env={**os.environ, tags.RUN_ID_ENV: tag})
    # Until the child has exec'd, /proc shows the parent's environment, without the tag: on a loaded machine the
    # drain could then find no process of the run and return at once (seen in CI).
    environ = Path(f"/proc/{straggler.pid}/environ")
    while tag.encode() not in environ.read_bytes():
        time.sleep(0.005)
    try:
        tic = time.monotonic()
        cleanup._drain(exp, node, result, spare=set())
        return result, time.monotonic() - tic, straggler
    finally:
        straggler.kill()
        straggler.wait()


def test_the_drain_waits_until_no_process_of_the_run_is_left_even_when_memory_reads_back(small_params, tmp_path):
    result, took_s, _ = drain_with(small_params, tmp_path, process_s=1.5, drain_timeout_s=10)
    assert took_s > 1.2, "the drain waited for the run's last process"
    assert result.drained is True and result.drain_s > 1.2
    assert result.notes == []


def test_a_process_of_the_run_still_alive_after_the_drain_timeout_is_named_in_the_notes(small_params, tmp_path):
    result, _, straggler = drain_with(small_params, tmp_path, process_s=60, drain_timeout_s=1)
    assert result.drained is False
    assert result.notes == [f"processes of the run were still alive on node 0 (box) after 1 s: pids {straggler.pid}"]
