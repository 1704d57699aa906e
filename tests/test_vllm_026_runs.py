"""vLLM 0.26.0's real logs from the kit's own runs on an H200 — its first batch of the two examples (2026-12-01), whose
run directories examples/h200-vllm-kv and examples/h200-vllm-threshold have since been replaced by the 2026-12-02
batch; copied to tests/fixtures/vllm-0.26-h200, see its INDEX.md for where each came from — read through
`launchlab parse --json` and the facts the kit takes from a log (logfacts). Every expected value below was read off
the log lines (quoted) before the parser was run on these files. The committed 2026-12-02 runs of the same run ids
print the same figures (checked last)"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import DATA
from launchlab import logparse
from launchlab.logparse import logfacts

LOGS = DATA / "vllm-0.26-h200"

# the oracles, from the logs
READY = {
    # "Available KV cache memory: 41.21 GiB", "GPU KV cache size: 5,401,344 tokens", "Graph capturing finished in
    # 1 secs, took 0.26 GiB", "Free memory on device (139.29/139.8 GiB) on startup. Desired GPU memory utilization
    # is (0.3, 41.94 GiB). Actual usage is 0.3 GiB for weight, 0.21 GiB for peak activation, 0.22 GiB for
    # non-torch memory, and 0.26 GiB for CUDAGraph memory. … Current kv cache memory in use is 41.21 GiB."
    # (the compile cache warm: 0.21 GiB peak activation, against 0.27 in the cold start of
    # vllm-0.26-util0.3-graphs.log)
    "vllm-0.26-util0.3-graphs-warm.log": dict(
        args={"max_model_len": "2048", "gpu_memory_utilization": "0.3"},
        ranks={"kv_avail_gib": 41.21, "kv_tokens": 5401344, "graph_mem_gib": 0.26, "startup_free_gib": 139.29,
               "total_gpu_gib": 139.8, "gpu_memory_utilization": 0.3, "requested_gib": 41.94,
               "profile_weights_gib": 0.3, "activation_peak_gib": 0.21, "non_torch_gib": 0.22,
               "cuda_graph_gib": 0.26, "kv_gib": 41.21, "weights_mem_gib": 0.3}),
    # "Available KV cache memory: 0.25 GiB", "GPU KV cache size: 32,432 tokens", "… Desired GPU memory utilization
    # is (0.007, 0.98 GiB). Actual usage is 0.3 GiB for weight, 0.21 GiB for peak activation, 0.22 GiB for
    # non-torch memory, and 0.26 GiB for CUDAGraph memory." — just above the break-even: a small cache, ready
    "vllm-0.26-util0.007-graphs.log": dict(
        args={"max_model_len": "2048", "gpu_memory_utilization": "0.007"},
        ranks={"kv_avail_gib": 0.25, "kv_tokens": 32432, "graph_mem_gib": 0.26, "startup_free_gib": 139.29,
               "total_gpu_gib": 139.8, "gpu_memory_utilization": 0.007, "requested_gib": 0.98,
               "profile_weights_gib": 0.3, "activation_peak_gib": 0.21, "non_torch_gib": 0.22,
               "cuda_graph_gib": 0.26, "weights_mem_gib": 0.3}),
}
FAILED = {
    # "Model loading took 0.3 GiB", "Available KV cache memory: -0.17 GiB", then in the EngineCore's traceback
    # "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` …" and in the
    # API server's "RuntimeError: Engine core initialization failed. See root cause above. …"
    "vllm-0.26-util0.004-graphs.log": dict(args={"gpu_memory_utilization": "0.004"}, kv_avail_gib=-0.17),
    # the same with 'enforce_eager': True in the non-default args, just below the break-even:
    # "Available KV cache memory: -0.03 GiB"
    "vllm-0.26-util0.005-enforce-eager.log": dict(args={"gpu_memory_utilization": "0.005", "enforce_eager": "True"},
                                                  kv_avail_gib=-0.03),
}


def parse_json(name) -> dict:
    """`launchlab parse --json` on one fixture (or another log's path), as a user runs it."""
    out = subprocess.run([sys.executable, "-m", "launchlab.cli", "parse", "--json", str(LOGS / name)],
                         capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", sorted(READY | FAILED))
def test_the_banner_version_and_the_non_default_args_are_read_from_a_real_vllm_026_log(name):
    oracle = (READY | FAILED)[name]
    parsed = parse_json(name)
    assert parsed["server"] == "vllm"
    # "… █ ▀▄▀ █  version 0.26.0" (the ASCII banner)
    assert logfacts.read(LOGS / name, logparse.parse_file(LOGS / name))["server_version"] == "0.26.0"
    # "non-default args: {'model_tag': '/tmp/launchlab-vllm-model', 'host': '127.0.0.1', 'port': …,
    #  'model': '/tmp/launchlab-vllm-model', 'max_model_len': 2048, ['enforce_eager': True,]
    #  'gpu_memory_utilization': …}"
    assert parsed["args"]["model"] == "/tmp/launchlab-vllm-model"
    assert {k: parsed["args"].get(k) for k in oracle["args"]} == oracle["args"]
    assert ("enforce_eager" in oracle["args"]) == (parsed["args"].get("enforce_eager") == "True")


@pytest.mark.parametrize("name", sorted(READY))
def test_a_ready_real_vllm_026_log_gives_its_kv_cache_and_its_memory_profile(name):
    parsed = parse_json(name)
    assert parsed["ready"] is True and parsed["failure"] is None and parsed["phase_reached"] == "ready"
    rank = parsed["ranks"]["0"]
    assert {k: rank.get(k) for k in READY[name]["ranks"]} == pytest.approx(READY[name]["ranks"])


@pytest.mark.parametrize("name", sorted(FAILED))
def test_a_real_vllm_026_launch_below_the_break_even_fails_at_kv_sizing_with_its_negative_kv_memory(name):
    parsed = parse_json(name)
    assert parsed["ready"] is False
    assert parsed["ranks"]["0"]["kv_avail_gib"] == FAILED[name]["kv_avail_gib"]
    assert parsed["ranks"]["0"]["weights_mem_gib"] == 0.3
    assert "kv_tokens" not in parsed["ranks"]["0"]  # it never sized a cache
    assert (parsed["failure"]["reason"], parsed["failure"]["phase"]) == ("kv_cache_no_memory", "kv_cache")


@pytest.mark.parametrize("name", sorted(FAILED))
def test_a_real_vllm_026_kv_sizing_failure_is_told_by_the_engine_cores_exception(name):
    failure = parse_json(name)["failure"]
    lines = (LOGS / name).read_bytes().decode().split("\n")  # numbered as `grep -n` does: a tqdm bar's \r is no break
    # "(EngineCore pid=…) ERROR … [core.py:1330] ValueError: No available memory for the cache blocks. Try
    # increasing `gpu_memory_utilization` when initializing the engine …", the root cause the API server's
    # "RuntimeError: Engine core initialization failed. See root cause above." points to
    assert failure["message"].startswith("ValueError: No available memory for the cache blocks")
    assert "ValueError: No available memory for the cache blocks" in lines[failure["line"] - 1]


# "(APIServer pid=…) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
# the last line of each failed log: the API server's traceback (run_server → … → wait_for_engine_startup), ending
# after the EngineCore's own traceback ("ValueError: No available memory for the cache blocks …") has been written
ENGINE_CORE_FAILED = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"


def _numbered(name: str) -> list[str]:
    return (LOGS / name).read_bytes().decode().split("\n")  # numbered as `grep -n` does


@pytest.mark.parametrize("name", sorted(FAILED))
def test_the_api_servers_engine_core_initialization_failed_line_ends_the_watch_but_never_hides_the_root_cause(name):
    lines = _numbered(name)
    [api] = [n for n, line in enumerate(lines, 1) if "Engine core initialization failed" in line]
    assert lines[api - 1].startswith("(APIServer pid=") and lines[api - 1].endswith(ENGINE_CORE_FAILED)
    # the watch stops on it (a fatal line of the kind): the server will not become ready
    assert [p for p in logparse.kinds.KINDS["vllm"].fatal_patterns if re.search(p, lines[api - 1])]
    # and the failure stays the EngineCore's ValueError, written above it ("See root cause above")
    failure = parse_json(name)["failure"]
    assert failure["line"] < api and lines[failure["line"] - 1].startswith("(EngineCore pid=")
    assert "Engine core initialization failed" not in failure["message"]


@pytest.mark.parametrize("name", sorted(FAILED))
def test_an_engine_core_that_dies_without_its_traceback_fails_on_the_api_servers_line(tmp_path, name):
    """The same log without the EngineCore's error lines (its "EngineCore failed to start." and both of its
    tracebacks), as when the engine core is killed before it can write them: the API server's line is then all the
    log says about the failure — an exception with that message, on that line, where the log had got to
    ("Available KV cache memory", the KV-cache phase)."""
    lines = _numbered(name)
    start = next(n for n, line in enumerate(lines) if "EngineCore failed to start." in line)
    cut = [line for n, line in enumerate(lines) if n < start or not line.startswith("(EngineCore pid=")]
    assert not [line for line in cut[start:] if "ValueError" in line]  # no root cause left
    log = tmp_path / name
    log.write_bytes("\n".join(cut).encode())
    out = subprocess.run([sys.executable, "-m", "launchlab.cli", "parse", "--json", str(log)],
                         capture_output=True, text=True, check=True, timeout=120)
    parsed = json.loads(out.stdout)
    [api] = [n for n, line in enumerate(cut, 1) if "Engine core initialization failed" in line]
    assert parsed["ready"] is False
    assert parsed["failure"] == {"reason": "exception", "phase": "kv_cache", "message": ENGINE_CORE_FAILED,
                                 "line": api, "draft": False}


# the committed examples' runs of the fixtures' run ids (the 2026-12-02 batch), INDEX.md's "from run"
COMMITTED = {"vllm-0.26-util0.3-graphs-warm.log": "h200-vllm-kv/2*/runs/03_utilization-0.3.graphs-cuda_rep1",
             "vllm-0.26-util0.004-graphs.log": "h200-vllm-kv/2*/runs/01_utilization-0.004.graphs-cuda_rep1",
             "vllm-0.26-util0.007-graphs.log": "h200-vllm-threshold/2*/runs/02_graphs-cuda.gpu_memory_utilization-0.007_rep1",
             "vllm-0.26-util0.005-enforce-eager.log":
                 "h200-vllm-threshold/2*/runs/03_graphs-eager.gpu_memory_utilization-0.005_rep1"}
TIMINGS = {"weights_s", "torch_compile_s", "warmup_run_s", "graph_s", "init_engine_s", "init_engine_compile_s"}


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_the_committed_examples_run_of_the_same_id_prints_the_fixtures_figures(name):
    """INDEX.md: the fixtures come from the 2026-12-01 batch; the committed 2026-12-02 runs of the same run ids are
    other launches with the same figures (timings aside)."""
    from conftest import ROOT

    [folder] = ROOT.glob(f"examples/{COMMITTED[name]}")
    assert (folder / "server.log").read_bytes() != (LOGS / name).read_bytes()  # another launch, not a copy
    fixture, committed = parse_json(name), parse_json(folder / "server.log")
    assert {k: v for k, v in committed["ranks"]["0"].items() if k not in TIMINGS} == pytest.approx(
        {k: v for k, v in fixture["ranks"]["0"].items() if k not in TIMINGS})
    assert committed["ready"] == fixture["ready"]
    assert (committed["failure"] or {}).get("reason") == (fixture["failure"] or {}).get("reason")
