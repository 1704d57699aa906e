"""The simulated box behaves like the real parts it stands in for: nvidia-smi's exact CSV format, memory
that is forgotten when its process dies, and SGLang's KV formula and failure."""

import subprocess
import sys
import time

import pytest

from conftest import DATA, connect
from launchlab import params
from launchlab.gpu import telemetry
from launchlab.hosts import commands
from launchlab.logparse import sglang


@pytest.fixture
def box(small_params):
    exp = params.load(small_params())
    return exp, connect(exp)


def test_query_gpu_csv_has_the_real_header_and_cell_format(box):
    _, host = box
    fields = "timestamp, index, memory.total [MiB], memory.used [MiB], memory.free [MiB], utilization.gpu [%]"
    real_header = (DATA / "h200-transformers-serve/trace-cb50.csv").read_text().splitlines()[0]
    assert real_header == fields
    out = host.run("nvidia-smi --query-gpu=timestamp,index,memory.total,memory.used,memory.free,utilization.gpu "
                   "--format=csv,nounits").stdout.splitlines()
    assert out[0] == real_header
    cells = out[1].split(", ")
    assert len(cells) == 6 and cells[1] == "0" and cells[2] == "97887"
    assert time.strptime(cells[0][:19], "%Y/%m/%d %H:%M:%S")
    with_units = host.run("nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader").stdout
    assert with_units.splitlines()[0] == "0 MiB, 0 %"


def test_an_invalid_field_fails_like_the_real_one(box):
    _, host = box
    res = host.run("nvidia-smi --query-gpu=memory.bogus --format=csv", check=False)
    assert res.exit_code == 2
    assert res.stdout == 'Field "memory.bogus" is not a valid field to query.\n\n'


def test_memory_of_a_process_is_forgotten_once_it_is_gone(box):
    _, host = box
    from launchlab.sim import state

    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state.set_allocation(host.state_dir, holder.pid, 1, 5000, "python3")
        apps = telemetry.parse_apps(host.run(commands.gpu_apps()).stdout)
        assert apps == [{"gpu_uuid": state.gpu_uuid("box", 1), "pid": holder.pid, "process_name": "python3",
                         "used_mib": 5000.0}]
        assert [g.mem_used_mib for g in telemetry.parse_snapshot(host.run(commands.gpu_snapshot()).stdout)] == [0, 5000]
    finally:
        holder.kill()
        holder.wait()
    assert [g.mem_used_mib for g in telemetry.parse_snapshot(host.run(commands.gpu_snapshot()).stdout)] == [0, 0]


def _run_sim_server(host, tmp_path, fraction: str, extra_env: str = "") -> str:
    port = host.free_port()
    host.write_text(str(tmp_path / "server.env"), extra_env)
    ref = host.start_detached("server", ["python3", "-m", "launchlab.sim.sglang_server", "--tp", "2",
                                         "--port", str(port), "--mem-fraction-static", fraction],
                              cwd=str(tmp_path), log_name="server.log", env_file="server.env")
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and host.group_alive(ref.pgid):
            if host.http_status(f"http://127.0.0.1:{port}/health") == 200:
                break
            time.sleep(0.1)
    finally:
        host.kill_group(ref.pgid, 5)
    return (tmp_path / "server.log").read_text()


def test_sim_server_sizes_the_kv_cache_with_sglangs_formula(box, tmp_path):
    _, host = box
    log = _run_sim_server(host, tmp_path, "0.85", "SIM_DEBUG_PROFILE=1\n")
    parsed = sglang.parse(log.splitlines(keepends=True))
    assert parsed.ready
    debug = {d["key"]: d["value"] for d in parsed.debug}
    rank0 = parsed.ranks["0"]
    # rest = avail − total × (1 − f), from the numbers the simulated server printed itself
    assert debug["rest"] == pytest.approx(debug["avail"] - debug["total"] * (1 - 0.85), abs=0.002)
    assert debug["avail"] == pytest.approx(rank0["weights_end_avail_gib"], abs=0.01)
    assert debug["total"] == pytest.approx(rank0["weights_begin_avail_gib"], abs=0.01)
    cell_bytes = (512 + 64) * 61 * 2
    # rest is printed to 3 decimals (±0.0005 GiB ≈ ±8 tokens at this cell size)
    assert abs(rank0["kv_tokens"] - debug["rest"] * (1 << 30) / cell_bytes) < 10
    assert rank0["kv_gib"] == pytest.approx(rank0["kv_tokens"] * cell_bytes / (1 << 30), abs=0.01)


def test_sim_server_fails_like_sglang_when_the_rest_is_negative(box, tmp_path):
    _, host = box
    log = _run_sim_server(host, tmp_path, "0.55")
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." in log
    assert "Received sigquit from a child process" in log
    parsed = sglang.parse(log.splitlines(keepends=True))
    assert not parsed.ready
    assert (parsed.failure.reason, parsed.failure.phase) == ("kv_cache_no_memory", "kv_cache")
    assert "SIMULATED" in log.splitlines()[0]


def test_the_simulated_nvidia_smi_starts_without_site_and_finds_the_kit_with_no_pythonpath(box, tmp_path):
    # started half a dozen times per run: site's .pth files cost each start more than its work (bench/run_overhead.py)
    import os

    import launchlab
    from launchlab.sim import state

    _, host = box
    script = (host.state_dir / "bin" / "nvidia-smi").read_text()
    assert script.startswith(f"#!/bin/sh\nexec {sys.executable} -S -c ")
    assert repr(os.path.dirname(os.path.dirname(launchlab.__file__))) in script
    env = {k: v for k, v in {**os.environ, **host.env}.items() if k != "PYTHONPATH"}
    out = subprocess.run(["nvidia-smi", "-L"], env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[0].startswith("GPU 0: ") and f"(UUID: {state.gpu_uuid('box', 0)})" in out.stdout


def test_the_servers_interpreter_is_asked_once_for_its_packages_and_installed_files_with_the_same_answers(box):
    from launchlab.hosts import provenance

    _, host = box
    argv = ["python3", "-m", "launchlab.sim.sglang_server"]
    assert provenance.python_facts(host, argv) == (provenance.interpreter_facts(host, argv),
                                                   provenance.integrity(host, argv))
    interpreter, installed = provenance.python_facts(host, ["python3", "-m", "no_such_package_here"])
    assert "launchlab" in interpreter["packages"]  # the interpreter's part stands when the package's fails
    assert installed["package"] == "no_such_package_here" and "PackageNotFoundError" in installed["error"]
    assert provenance.python_facts(host, ["python3", "script.py"])[1] is None
    assert provenance.python_facts(host, ["bash", "-c", "true"]) == (None, None)


def test_a_rank_reaped_by_the_poll_the_shutdown_interrupted_counts_as_ended_not_as_a_crash():
    # Slurm's time limit signals the server and its ranks at once; the shutdown handler may run right after a
    # waitpid reaped a rank and before its status was kept — the next waitpid then finds no child (seen in CI)
    import os

    from launchlab.sim.sglang_server import _Forked

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    rank = _Forked(pid)
    assert rank.poll() is not None and rank.wait() == rank.poll()


def test_the_fault_injection_prints_the_free_memory_after_the_weights_off_by_the_offset_and_says_so(box, tmp_path):
    """SIM_FAULT_AVAIL_OFFSET_GIB: a server whose log lies about its memory (test_threshold_search.py searches it).
    It sizes its KV cache from what it really has (the DEBUG line), while its "Load weight end" line is off."""
    _, host = box
    log = _run_sim_server(host, tmp_path, "0.85", "SIM_DEBUG_PROFILE=1\nSIM_FAULT_AVAIL_OFFSET_GIB=2\n")
    parsed = sglang.parse(log.splitlines(keepends=True))
    assert parsed.ready and parsed.failure is None
    debug = {d["key"]: d["value"] for d in parsed.debug}
    assert parsed.ranks["0"]["weights_end_avail_gib"] == pytest.approx(debug["avail"] + 2, abs=0.01)
    assert debug["rest"] == pytest.approx(debug["avail"] - debug["total"] * (1 - 0.85), abs=0.002)
    assert "SIMULATED FAULT (SIM_FAULT_AVAIL_OFFSET_GIB=2)" in log.splitlines()[1]
    honest = _run_sim_server(host, tmp_path, "0.85", "SIM_DEBUG_PROFILE=1\n")
    assert "SIMULATED FAULT" not in honest
