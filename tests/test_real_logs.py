"""Every real log excerpt in fixtures/real-logs parses to the values its INDEX.md entry lists.

Every key an entry gives is checked: each has a check function below, and a key without one fails the test, so an
oracle can never be skipped silently. Keys that describe the excerpt rather than a parsed value (`line_prefix`,
`check`, `source`) are checked for what they imply about the parse.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import DATA
from launchlab import logparse
from launchlab.logparse import parallel
from launchlab.logparse.common import exception_line, feed_lines
from launchlab.logparse.cuda_oom import gib
from launchlab.logparse.parsedlog import PHASES as PARSER_PHASES
from launchlab.logparse.parsedlog import ParsedLog

LOGS = DATA / "real-logs"
MORE = DATA / "real-logs-more"  # issue 12's excerpts, not from ../shared/data (SOURCES.md there names each thread)
ROUND3 = DATA / "real-logs-round3"  # issue 27's: three more server kinds and the classes round 3 found
TP2 = DATA / "real-logs-tp2"  # issue 31's: vLLM tensor-parallel-size 2, each rank's custom all-reduce state
ROUND4 = DATA / "real-logs-4"  # issue 51's: phases only tracebacks show, failures missed, speculative decoding
MULTIGPU = DATA / "real-logs-multigpu"  # issue 65's: TP 2-32, PP and DP, sizes from rank tags and other words
ROUND5 = DATA / "real-logs-5"  # issue 66's: max seq len vs KV under frames, phases from frames, LMDeploy
PINNED = (MORE, ROUND3, TP2, ROUND4, MULTIGPU, ROUND5)  # folders with their own SHA256SUMS and SOURCES.md
# INDEX.md names → the field names of ARCHITECTURE.md section 4.3
FIELDS = {"weights_begin_avail": "weights_begin_avail_gib", "weights_end_avail": "weights_end_avail_gib",
          "weights_usage": "weights_mem_gib", "dist_init_usage": "dist_init_mem_gib", "kv_tokens": "kv_tokens",
          "k_gib": "kv_k_gib", "v_gib": "kv_v_gib", "pool_end_avail": "pool_end_avail_gib",
          "graph_begin_avail": "graph_begin_avail_gib", "kv_budget_gib": "kv_avail_gib", "kv_avail_gib": "kv_avail_gib",
          "torch_compile_s": "torch_compile_s", "model_load_gib": "weights_mem_gib", "weights_gib": "profile_weights_gib",
          "non_torch_gib": "non_torch_gib", "activation_peak_gib": "activation_peak_gib", "profile_s": "profile_s",
          "total_gpu_gib": "total_gpu_gib", "util": "gpu_memory_utilization", "usable_gib": "usable_gib",
          "capture_bs_count": "capture_bs_count", "capture_bs_max": "capture_bs_max",
          "graph_estimate_gib": "graph_estimate_gib", "max_total_num_tokens": "max_total_num_tokens",
          "available_gpu_mem": "available_gpu_mem_gib", "graph_s": "graph_s", "graph_mem_gib": "graph_mem_gib",
          "graph_pool_actual_gib": "graph_pool_actual_gib", "graph_pool_estimated_gib": "graph_pool_estimated_gib",
          # a draft model's own figures (round 4), never in the target's fields: named as the parser names them
          **{f"draft_{name}": f"draft_{name}" for name in (
              "weights_begin_avail_gib", "weights_end_avail_gib", "weights_mem_gib", "kv_tokens", "kv_k_gib", "kv_v_gib",
              "pool_end_avail_gib", "graph_begin_avail_gib", "graph_s", "graph_mem_gib", "graph_end_avail_gib",
              "extend_graph_begin_avail_gib", "extend_graph_s", "extend_graph_mem_gib", "extend_graph_end_avail_gib")}}
# the fields a draft-only rank must not have: the target's (INDEX round 4, `draft_only_ranks`)
TARGET_FIELD = re.compile(r"^(?:weights|kv|graph|dist_init)_")
GRAPH_END = {"elapsed_s": "graph_s", "usage": "graph_mem_gib", "avail": "graph_end_avail_gib"}
# top-level numbers the engine (or one rank for it) prints: found on some rank
ENGINE = {"model_load_gib": "weights_mem_gib", "kv_avail_gib": "kv_avail_gib", "kv_tokens": "kv_tokens",
          "graph_gib": "graph_mem_gib", "graph_s": "graph_s", "num_gpu_blocks": "kv_blocks", "gpu_blocks": "kv_blocks",
          "max_model_len": "max_model_len", "max_concurrency": "max_concurrency", "init_engine_s": "init_engine_s",
          "model_load_s": "weights_s", "torch_compile_s": "torch_compile_s", "cpu_blocks": "kv_cpu_blocks",
          "kv_capacity_tokens": "kv_tokens", "startup_free_gib": "startup_free_gib", "total_gib": "total_gpu_gib",
          "util": "gpu_memory_utilization", "requested_gib": "requested_gib", "weights_gib": "profile_weights_gib",
          "activation_peak_gib": "activation_peak_gib", "non_torch_gib": "non_torch_gib",
          "cuda_graph_gib": "cuda_graph_gib", "current_kv_cache_gib": "kv_gib", "warmup_run_s": "warmup_run_s",
          "graph_estimate_gib": "graph_estimate_gib", "graph_pool_actual_gib": "graph_pool_actual_gib",
          "graph_pool_estimated_gib": "graph_pool_estimated_gib", "init_engine_compile_s": "init_engine_compile_s",
          "kv_needed_gib": "kv_needed_gib", "estimated_max_model_len": "estimated_max_model_len"}
# rank facts stated in words (ParsedLog.rank_info)
RANK_INFO = ("model_type", "dtype", "graph_kind", "kv_cache_dtype", "draft_architecture")
SCHEDULER_SUMMARY = {"max_total_num_tokens": "max_total_num_tokens", "chunked_prefill_size": "chunked_prefill_size",
                     "max_prefill_tokens": "max_prefill_tokens", "max_running_requests": "max_running_requests",
                     "context_len": "context_len", "available_gpu_mem": "available_gpu_mem_gib"}
# the PyTorch OOM message's numbers (logparse/cuda_oom.py); strings carry their unit, bare numbers are GiB
OOM = {"tried_to_allocate": "oom_request_gib", "gpu_index": "oom_gpu_index", "total_capacity_gib": "oom_total_gib",
       "free": "oom_free_gib", "process_in_use_gib": "oom_process_used_gib",
       "allocated_by_pytorch_gib": "oom_torch_allocated_gib", "private_pools_cuda_graphs": "oom_private_pools_gib",
       "reserved_unallocated": "oom_reserved_unallocated_gib"}
PHASES = {"startup": "startup", "dist_init": "dist_init", "weights": "weights", "kv_cache": "kv_cache",
          "kv_pool": "kv_cache", "profile_run": "kv_cache",
          "kv_sizing": "kv_cache", "profile_run_sampler": "kv_cache", "cuda_graph": "cuda_graph",
          "scheduler_summary": "cuda_graph", "engine_init_done": "warmup", "warmup": "warmup", "http": "http", "ready": "ready"}
REASONS = {"scheduler_exception_unknown": "exception", "no_available_memory_for_cache_blocks": "kv_cache_no_memory",
           "kv_cache_size_invalid": "kv_cache_no_memory", "max_model_len_exceeds_kv_capacity": "max_len_exceeds_kv",
           "custom_allreduce_cuda_error": "custom_allreduce_failed", "cuda_oom": "cuda_oom",
           "cuda_graph_capture_failed": "cuda_graph_failed", "prefill_no_memory": "cuda_oom",
           "model_load_failed": "exception", "kv_cache_no_memory": "kv_cache_no_memory", "exception": "exception",
           "nccl_error": "nccl_error", "custom_allreduce_failed": "custom_allreduce_failed"}
# round 3's `figures`: the index's name → (the parsed field, the factor to its unit); a tuple of fields: any of them
# (llama.cpp's host buffers are kept apart from its GPU's)
MIB = 1 / 1024
FIGURES = {
    "sglang": {"mem_fraction_static": ("kv_error_fraction", 1), "mem_fraction_static_suggested": ("kv_suggested_fraction", 1),
               "mem_fraction_static_min_viable": ("kv_min_fraction", 1)},
    "tgi": {"kv_blocks": ("kv_blocks", 1), "kv_block_size": ("kv_block_tokens", 1),
            "max_batch_total_tokens": ("kv_tokens", 1), "max_input_tokens": ("max_input_tokens", 1),
            "max_total_tokens": ("max_total_tokens", 1), "prefill_tokens": ("prefill_tokens", 1),
            "shard_ready_s": ("weights_s", 1), "oom_tried_to_allocate_mib": ("oom_request_gib", MIB),
            "oom_gpu_total_capacity_gib": ("oom_total_gib", 1)},
    "trtllm": {"kv_cache_gib": ("kv_gib", 1), "kv_cache_bytes": ("kv_gib", 2**-30),
               "max_tokens_in_paged_kv_cache": ("kv_tokens", 1), "kv_blocks": ("kv_blocks", 1),
               "kv_secondary_blocks": ("kv_cpu_blocks", 1), "tokens_per_block": ("kv_block_tokens", 1),
               "max_kv_blocks_per_sequence": ("kv_blocks_per_seq", 1), "max_blocks_per_seq": ("kv_blocks_per_seq", 1),
               "max_kv_pages_per_sequence": ("kv_blocks_per_seq", 1), "max_seq_len": ("max_model_len", 1),
               "gpu_mem_mib_after_context": ("gpu_in_use_gib", MIB), "gpu_total_gib": ("total_gpu_gib", 1),
               "gpu_available_gib": ("kv_sizing_free_gib", 1), "gpu_free_before_kv_cache_gib": ("kv_sizing_free_gib", 1),
               "engine_size_mib": ("engine_gib", MIB), "requested_gpu_bytes": ("oom_request_gib", 2**-30)},
    "lmdeploy": {"kv_block_mib": ("kv_block_gib", MIB), "kv_blocks": ("kv_blocks", 1),
                 "kv_chunk_blocks": ("kv_chunk_blocks", 1)},
    "llamacpp": {"n_cuda_devices": ("cuda_devices", 1), "device_total_mib": ("device_total_gib", MIB),
                 "device_free_mib": ("device_free_gib", MIB), "failed_alloc_mib": ("oom_request_gib", MIB),
                 "offloaded_layers": ("gpu_layers", 1), "total_layers": ("model_layers", 1),
                 "model_buffer_mib": ("weights_mem_gib", MIB), "kv_buffer_mib": (("kv_gib", "kv_host_gib"), MIB),
                 "kv_self_mib": ("kv_self_gib", MIB),
                 "compute_buffer_mib": (("compute_buffer_gib", "compute_buffer_host_gib"), MIB),
                 "n_ctx": ("n_ctx", 1), "n_ctx_seq": ("n_ctx_seq", 1), "n_ctx_slot": ("n_ctx_slot", 1),
                 "draft_context_mib": ("draft_context_gib", MIB)},
}
# SGLang's two CUDA-graph captures, kept apart (round 3): the index's name → the field of each
GRAPHS = {"sglang_graph": {"begin_avail_gib": "graph_begin_avail_gib", "end_avail_gib": "graph_end_avail_gib",
                           "usage_gib": "graph_mem_gib", "elapsed_s": "graph_s"},
          "sglang_piecewise_graph": {"begin_avail_gib": "piecewise_graph_begin_avail_gib",
                                     "end_avail_gib": "piecewise_graph_end_avail_gib",
                                     "usage_gib": "piecewise_graph_mem_gib", "elapsed_s": "piecewise_graph_s"}}


def oracles(folder: Path) -> dict[str, dict]:
    text = (folder / "INDEX.md").read_text()
    entries = {}
    for name, block in re.findall(r"^### (\S+\.log)\n.*?```yaml\n(.*?)```", text, re.S | re.M):
        entries[name] = yaml.safe_load(block)
    return entries


ORACLES = {name: oracle for folder in (LOGS, *PINNED) for name, oracle in oracles(folder).items()}
FOLDER = {p.name: folder for folder in (LOGS, *PINNED) for p in folder.glob("*.log")}


@dataclass(frozen=True)
class Case:
    name: str
    oracle: dict
    parsed: ParsedLog
    data: dict  # parsed.to_json()


def tp_part(key: str) -> str:
    """The TP rank in a parser's rank key ("pp1.3" → "3")."""
    return key.rsplit(".", 1)[-1]


def rank_key(rank: Any) -> str:
    return "0" if rank == "unknown" else str(rank)


def rank_values(case: Case, field: str) -> list[float]:
    return [f[field] for f in case.data["ranks"].values() if field in f]


def assert_on_some_rank(case: Case, field: str, want: float, key: str) -> None:
    values = rank_values(case, field)
    assert want in [pytest.approx(v) for v in values], f"{key}: {field} on the ranks is {values}"


def no_check(key: str) -> Callable[[Case, Any], None]:
    def fail(case: Case, want: Any) -> None:
        pytest.fail(f"{case.name}: INDEX key {key!r} has no check in tests/test_real_logs.py — add one")
    return fail


# --- ranks ----------------------------------------------------------------------------------------------------------

def check_rank_field(case: Case, rank: str, key: str, want: Any) -> None:
    got = case.data["ranks"].get(rank, {})
    if key == "graph_end":
        for sub, ours in GRAPH_END.items():
            assert got.get(ours) == pytest.approx(want[sub]), f"rank {rank} {ours}"
    elif key == "capture_bs":
        assert ast.literal_eval(case.parsed.rank_info.get(rank, {}).get("capture_bs", "None")) == want, f"rank {rank}"
    elif key in RANK_INFO:
        assert case.parsed.rank_info.get(rank, {}).get(key) == want, f"rank {rank} {key}: {case.parsed.rank_info}"
    elif key in FIELDS:
        assert got.get(FIELDS[key]) == pytest.approx(want), f"rank {rank} {key}"
    else:
        no_check(f"ranks.{key}")(case, want)


def check_ranks(case: Case, want: dict) -> None:
    for rank, fields in want.items():
        for key, value in fields.items():
            check_rank_field(case, rank_key(rank), key, value)


def check_workers_by_pid(case: Case, want: dict) -> None:
    """The rank whose lines carry that pid has those fields (V0 workers are known only by pid)."""
    by_pid = {pid: rank for rank, pid in case.parsed.rank_pids.items()}
    for pid, fields in want.items():
        assert pid in by_pid, f"no rank carries pid {pid}: {case.parsed.rank_pids}"
        for key, value in fields.items():
            assert key in FIELDS, f"workers_by_pid.{key} has no check"
            check_rank_field(case, by_pid[pid], key, value)


def check_model_load_gib_per_rank(case: Case, want: float) -> None:
    assert sorted({f["weights_mem_gib"] for f in case.data["ranks"].values()}) == [want]


def check_min_weights_begin_avail(case: Case, want: float) -> None:
    assert min(rank_values(case, "weights_begin_avail_gib")) == pytest.approx(want)


def check_tp(case: Case, want: int) -> None:
    """Every rank the log names is a TP rank below tp; where the server printed its arguments, they say tp too."""
    seen = set(case.data["ranks"]) | set(case.data["custom_ar"]) | set(case.parsed.rank_pids)
    assert {int(tp_part(r)) for r in seen} <= set(range(want)), f"ranks {sorted(seen)} with tp={want}"
    for name in ("tp_size", "tensor_parallel_size"):
        if name in case.parsed.args:
            assert case.parsed.args[name] == str(want)
    # the size parse --json states: tp itself where the log states it, never more than tp where it is a lower bound
    shown = case.data["parallel"]
    assert shown["tp"] <= want if shown["tp_at_least"] else shown["tp"] == want, shown


def check_dp(case: Case, want: int | list[int]) -> None:
    """`dp: 2`: the log's DP tags name DP ranks 0 and 1; `dp: [4]`: an excerpt that shows only some DP ranks."""
    wanted = range(want) if isinstance(want, int) else want
    assert case.parsed.dp_ranks == {str(i) for i in wanted}, case.parsed.dp_ranks


def check_parallel(case: Case, want: dict) -> None:
    """The sizes the log shows (logparse/parallel.py), as `launchlab parse --json` prints them under `parallel`."""
    got = case.data["parallel"]
    assert {key: got[key] for key in want} == want, got["said"]


def check_rank_info_everywhere(key: str) -> Callable[[Case, Any], None]:
    """A top-level word fact (model_type, kv_cache_dtype): stated by at least one rank and contradicted by none."""
    def check(case: Case, want: str) -> None:
        stated = [info[key] for info in case.parsed.rank_info.values() if key in info]
        assert stated and set(stated) == {want}, f"{key}: {case.parsed.rank_info}"
    return check


def check_scheduler_summary(case: Case, want: dict) -> None:
    for key, value in want.items():
        if key not in SCHEDULER_SUMMARY:
            no_check(f"scheduler_summary.{key}")(case, value)
        assert_on_some_rank(case, SCHEDULER_SUMMARY[key], value, f"scheduler_summary.{key}")


def check_engine_number(key: str) -> Callable[[Case, Any], None]:
    def check(case: Case, want: float) -> None:
        assert_on_some_rank(case, ENGINE[key], want, key)
    return check


def check_suggested_kv_cache_memory_bytes(case: Case, want: list[int]) -> None:
    """The two `--kv-cache-memory=` values vLLM suggests: to fit the requested memory, and to fill the GPU."""
    fields = ("suggested_kv_cache_memory_bytes", "max_kv_cache_memory_bytes")
    assert [v for f in fields for v in rank_values(case, f)] == want


def check_note(case: Case, want: str) -> None:
    """`check: "23.35 - 21.21 - 0.20 - 0.37 = 1.57"`: the sum holds, and one rank's parsed fields hold every number."""
    left, right = want.split("=")
    terms = re.findall(r"([-+]?)\s*([\d.]+)", left)
    total = sum(float(n) * (-1 if sign == "-" else 1) for sign, n in terms)
    assert total == pytest.approx(float(right), abs=0.011), want
    numbers = [float(n) for _, n in terms] + [float(right)]
    assert any(all(n in [pytest.approx(v) for v in f.values()] for n in numbers) for f in case.data["ranks"].values()), \
        f"no rank parsed all of {numbers}"


def check_line_prefix(case: Case, want: str) -> None:
    """Lines behind a foreign prefix parse exactly as they do with the prefix taken off."""
    lines = (FOLDER[case.name] / case.name).read_text().splitlines(keepends=True)
    prefixed = [line for line in lines if line.startswith(want)]
    assert prefixed, f"no line starts with {want!r}"
    bare = [line[len(want):] if line.startswith(want) else line for line in lines]
    without = feed_lines(logparse.parser_for(case.parsed.server), bare)
    without.parallel = parallel.read(without)  # as logparse.parse_file fills it
    assert without.to_json() == case.data
    assert without.custom_ar == case.parsed.custom_ar and without.rank_info == case.parsed.rank_info


# --- custom all-reduce, processes, HTTP ------------------------------------------------------------------------------

def check_custom_ar(case: Case, want: dict) -> None:
    got = case.data["custom_ar"]
    assert set(got) == {rank_key(r) for r in want}, got
    for rank, fields in want.items():
        ours = got[rank_key(rank)]
        for key, value in fields.items():
            if key == "state":
                assert ours["state"] == value
            elif key == "error":
                assert value in ours["message"]
            elif key == "reason":
                assert ours["reason"] == value, ours
            else:
                no_check(f"custom_ar.{key}")(case, value)


def check_pid(role: str) -> Callable[[Case, int], None]:
    def check(case: Case, want: int) -> None:
        assert case.parsed.pids.get(role) == want, case.parsed.pids
    return check


def check_rank_pids(case: Case, want: dict) -> None:
    """Each TP rank's worker process, as its tag names it (`(VllmWorker rank=1 pid=2061)` → rank "1")."""
    assert case.parsed.rank_pids == {rank_key(r): pid for r, pid in want.items()}, case.parsed.rank_pids


def check_phase_lines(case: Case, want: dict) -> None:
    """The line where each phase's first line is (INDEX phase names; several map to one parser phase)."""
    got = case.data["phase_lines"]
    for phase, line in want.items():
        assert got.get(PHASES[phase]) == line, f"{phase}: {got}"


# --- speculative decoding (round 4) ------------------------------------------------------------------------------------

def check_draft_phase_lines(case: Case, want: dict) -> None:
    """The line of each draft sub-phase's first line (the draft's weights, KV cache, context, graphs)."""
    got = case.data["draft_phase_lines"]
    for phase, line in want.items():
        assert got.get(phase) == line, f"{phase}: {got}"


def check_draft_only_ranks(case: Case, want: list) -> None:
    """Every line of these ranks is the draft model's: none of the target's fields is filled on them."""
    for rank in want:
        target = [f for f in case.data["ranks"].get(rank_key(rank), {}) if TARGET_FIELD.match(f)]
        assert not target, f"rank {rank} has the target's {target}: {case.data['ranks'][rank_key(rank)]}"


def check_spec(case: Case, want: dict) -> None:
    """What the log states about speculative decoding: its method, draft model, whether the draft's weights count."""
    got = case.data["spec"]
    for key, value in want.items():
        assert got.get(key) == value, f"spec.{key}: {got}"


def check_reload(case: Case, want: dict) -> None:
    """A model put to sleep and reloaded after ready (llama-server's router): its own lines and phases."""
    got = case.data["reload"]
    assert got is not None, "no reload read"
    for key, value in want.items():
        if key == "phase_lines":
            for phase, line in value.items():
                assert got["phase_lines"].get(PHASES[phase]) == line, f"reload {phase}: {got}"
        elif key == "phase_reached":
            assert got["phase_reached"] == PHASES[value], got
        elif key in ("sleep", "wake"):
            assert got[key] == value, got
        else:
            no_check(f"reload.{key}")(case, value)


def check_http_up(case: Case, want: bool) -> None:
    up = PARSER_PHASES.index(case.data["phase_reached"]) >= PARSER_PHASES.index("http")
    assert up == want and (case.parsed.http_url is not None) == want


def check_dead_worker(case: Case, want: dict) -> None:
    deaths = [(d.pid, d.exit_code) for d in case.parsed.worker_deaths]
    assert (want.get("dead_worker_pid"), want.get("dead_worker_exit_code")) in deaths, deaths


# --- failure -----------------------------------------------------------------------------------------------------------

def check_failure(case: Case, want: dict | None) -> None:
    got = case.data["failure"]
    if want is None:
        assert got is None, got
        return
    assert got is not None
    # the message is what went wrong, never the header of the traceback that leads to it (issue 12)
    assert "Traceback (most recent call last)" not in got["message"], got
    # the log got at least as far as the phase it failed in (issue 12)
    assert PARSER_PHASES.index(case.data["phase_reached"]) >= PARSER_PHASES.index(got["phase"]), case.data
    from_title = want.get("source") == "title"  # the excerpt stops before the failure: the thread's title names it
    for key, value in want.items():
        if key == "reason":
            if from_title:  # the excerpt may show only a generic wrapper, but never a different specific reason
                assert got["reason"] in ("exception", REASONS[value]), got
            else:
                assert got["reason"] == REASONS[value], got
        elif key == "phase":
            if from_title:  # the excerpt cannot have got further than where the title says it failed
                assert PARSER_PHASES.index(got["phase"]) <= PARSER_PHASES.index(PHASES[value]), got
            else:
                assert got["phase"] == PHASES[value], got
        elif key == "source":
            assert value == "title", f"unknown failure source {value!r}"
        elif key == "line":  # where the failure is read from, so a user can jump into the log (issue 12)
            assert got["line"] == value, got
        elif key == "detail":
            assert value in got["message"], got
        elif key == "exception":
            assert (exception_line(got["message"]) or ("", ""))[0] == value, got
        elif key == "dead_worker":
            assert value in [d.name for d in case.parsed.worker_deaths], case.parsed.worker_deaths
        elif key == "draft":  # the failure's frames or lines are the draft model's (round 4)
            assert got["draft"] is value, got
        elif key in OOM:
            expected = gib(value) if isinstance(value, str) else float(value)
            assert_on_some_rank(case, OOM[key], expected, f"failure.{key}")
        else:
            no_check(f"failure.{key}")(case, value)


def check_figures(case: Case, want: dict) -> None:
    for key, value in want.items():
        if key not in FIGURES.get(case.data["server"], {}):
            no_check(f"figures.{key}")(case, value)
        names, factor = FIGURES[case.data["server"]][key]
        names = (names,) if isinstance(names, str) else names
        values = [v for name in names for v in rank_values(case, name)]
        assert value * factor in [pytest.approx(v) for v in values], f"figures.{key}: {names} on the ranks is {values}"


def check_graphs(kind: str) -> Callable[[Case, Any], None]:
    def check(case: Case, want: dict) -> None:
        got = case.data["ranks"].get("0", {})
        for key, value in want.items():
            assert got.get(GRAPHS[kind][key]) == pytest.approx(value), f"{kind}.{key}: {got}"
    return check


def check_version(case: Case, want: str) -> None:
    from launchlab.logparse import logfacts

    assert logfacts.read(FOLDER[case.name] / case.name, case.parsed).get("server_version") == want


def check_args(case: Case, want: dict) -> None:
    for key, value in want.items():
        assert case.parsed.args.get(key) == value, f"args.{key}: {case.parsed.args}"


CHECKS: dict[str, Callable[[Case, Any], None]] = {
    "server": lambda case, want: assert_equal(case.data["server"], want),
    "version": check_version,
    "figures": check_figures,
    "args": check_args,
    "sglang_graph": check_graphs("sglang_graph"),
    "sglang_piecewise_graph": check_graphs("sglang_piecewise_graph"),
    "ready": lambda case, want: assert_equal(case.data["ready"], want),
    "failure": check_failure,
    "phase_reached": lambda case, want: assert_equal(case.data["phase_reached"], PHASES[want]),
    "ranks": check_ranks,
    "workers_by_pid": check_workers_by_pid,
    "model_load_gib_per_rank": check_model_load_gib_per_rank,
    "min_weights_begin_avail": check_min_weights_begin_avail,
    "tp": check_tp,
    "dp": check_dp,
    "parallel": check_parallel,
    "server_named": lambda case, want: assert_equal(want, True),  # read by the test itself (the kind it names)
    # LMDeploy calls its engine (TurboMind, PyTorch) the backend, as its `--backend` flag does
    "engine": lambda case, want: assert_equal(
        case.parsed.facts.get("backend" if case.data["server"] == "lmdeploy" else "engine"), want),
    "nccl_version": lambda case, want: assert_equal(case.data["nccl_version"], want),
    "custom_ar": check_custom_ar,
    "rank_pids": check_rank_pids,
    "mem_fraction_static_auto": lambda case, want: assert_equal(float(case.data["adjusted_args"]["mem_fraction_static"]),
                                                                pytest.approx(want)),
    "model_type": check_rank_info_everywhere("model_type"),
    "kv_cache_dtype": check_rank_info_everywhere("kv_cache_dtype"),
    "scheduler_summary": check_scheduler_summary,
    "http_server_pid": check_pid("http_server"),
    "api_server_pid": check_pid("api_server"),
    "engine_core_pid": check_pid("engine_core"),
    "http_up": check_http_up,
    "http_url": lambda case, want: assert_equal(case.parsed.http_url, want),
    "routes_seen": lambda case, want: assert_equal(case.parsed.routes, want),
    "dead_worker_pid": lambda case, want: check_dead_worker(case, case.oracle),
    "dead_worker_exit_code": lambda case, want: check_dead_worker(case, case.oracle),
    "suggested_kv_cache_memory_bytes": check_suggested_kv_cache_memory_bytes,
    "check": check_note,
    "phase_lines": check_phase_lines,
    "line_prefix": check_line_prefix,
    "draft_phase_lines": check_draft_phase_lines,
    "draft_only_ranks": check_draft_only_ranks,
    "draft_architecture": check_rank_info_everywhere("draft_architecture"),
    "spec": check_spec,
    "reload": check_reload,
    **{key: check_engine_number(key) for key in ENGINE},
}


def assert_equal(got: Any, want: Any) -> None:
    assert got == want


def test_every_log_in_the_folder_has_an_oracle():
    assert set(FOLDER) <= set(ORACLES)


@pytest.mark.parametrize("folder", PINNED, ids=lambda folder: folder.name)
def test_the_excerpts_found_by_the_kit_are_pinned_and_each_names_its_thread(folder):
    """real-logs-more and -round3 are not copies of ../shared: their own SHA256SUMS pins the excerpts, SOURCES.md
    gives each URL."""
    import hashlib

    sums = [line.split(maxsplit=1) for line in (folder / "SHA256SUMS").read_text().splitlines() if line.strip()]
    assert {name for _, name in sums} == {p.name for p in folder.glob("*.log")}
    for digest, name in sums:
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    sources = (folder / "SOURCES.md").read_text()
    for _, name in sums:
        assert re.search(rf"^\| {re.escape(name)} \| https://github\.com/\S+ \|$", sources, re.M), name


def test_the_fixture_copies_are_the_shared_captures_byte_for_byte():
    """SHA256SUMS was written from ../shared/data/real-logs when the copies were made (`make check-fixtures`
    compares them with ../shared again where it is present): the copies are evidence, never edited."""
    import hashlib

    sums = [line.split(maxsplit=1) for line in (LOGS / "SHA256SUMS").read_text().splitlines() if line.strip()]
    assert len(sums) >= 29
    for digest, name in sums:
        assert hashlib.sha256((LOGS / name).read_bytes()).hexdigest() == digest, name


def test_every_index_key_has_a_check():
    unknown = {key for oracle in ORACLES.values() for key in oracle} - set(CHECKS)
    assert not unknown, f"INDEX keys without a check: {sorted(unknown)}"


@pytest.mark.parametrize("name", sorted(FOLDER))
def test_real_log_parses_to_its_index_values(name):
    oracle = ORACLES[name]
    # `server_named`: no line is the kind's own (SGLang 0.1 printed vLLM's kernel paths): named, as `parse --server`
    parsed = logparse.parse_file(FOLDER[name] / name, oracle["server"] if oracle.get("server_named") else "auto")
    case = Case(name, oracle, parsed, parsed.to_json())
    assert case.data["server"] == oracle.get("server", "sglang" if name.startswith("sglang") else "vllm")
    for key in ("ready", "failure"):
        assert key in oracle, f"{name}: INDEX entry without {key!r}"
    for key, want in oracle.items():
        CHECKS.get(key, no_check(key))(case, want)


@pytest.mark.parametrize("kind", ["tgi", "trtllm", "llamacpp"])
def test_launchlab_parse_auto_names_each_new_kind_and_its_failure(kind):
    """The command users run: `launchlab parse --server auto --json` on an excerpt of each kind round 3 added."""
    import json
    import subprocess
    import sys

    failed = sorted(n for n, o in ORACLES.items() if o.get("server") == kind and o.get("failure"))[0]
    proc = subprocess.run([sys.executable, "-m", "launchlab.cli", "parse", "--server", "auto", "--json",
                           str(FOLDER[failed] / failed)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    parsed = json.loads(proc.stdout)
    assert parsed["server"] == kind
    assert parsed["failure"]["reason"] == REASONS[ORACLES[failed]["failure"]["reason"]]
