"""Every real log excerpt in fixtures/real-logs parses to the values its INDEX.md entry lists."""

import re

import pytest
import yaml

from conftest import DATA
from launchlab import logparse

LOGS = DATA / "real-logs"
# INDEX.md names → the field names of ARCHITECTURE.md section 4.3
FIELDS = {"weights_begin_avail": "weights_begin_avail_gib", "weights_end_avail": "weights_end_avail_gib",
          "weights_usage": "weights_mem_gib", "dist_init_usage": "dist_init_mem_gib", "kv_tokens": "kv_tokens",
          "k_gib": "kv_k_gib", "v_gib": "kv_v_gib", "pool_end_avail": "pool_end_avail_gib",
          "graph_begin_avail": "graph_begin_avail_gib", "kv_budget_gib": "kv_avail_gib", "kv_avail_gib": "kv_avail_gib",
          "torch_compile_s": "torch_compile_s", "model_load_gib": "weights_mem_gib", "weights_gib": "profile_weights_gib",
          "non_torch_gib": "non_torch_gib", "activation_peak_gib": "activation_peak_gib", "profile_s": "profile_s",
          "total_gpu_gib": "total_gpu_gib", "util": "gpu_memory_utilization", "usable_gib": "usable_gib"}
GRAPH_END = {"elapsed_s": "graph_s", "usage": "graph_mem_gib", "avail": "graph_end_avail_gib"}
ENGINE = {"model_load_gib": "weights_mem_gib", "kv_avail_gib": "kv_avail_gib", "kv_tokens": "kv_tokens",
          "graph_gib": "graph_mem_gib", "graph_s": "graph_s", "num_gpu_blocks": "kv_blocks", "gpu_blocks": "kv_blocks",
          "max_model_len": "max_model_len", "max_concurrency": "max_concurrency", "init_engine_s": "init_engine_s",
          "model_load_s": "weights_s", "torch_compile_s": "torch_compile_s"}
PHASES = {"dist_init": "dist_init", "weights": "weights", "kv_pool": "kv_cache", "profile_run": "kv_cache",
          "kv_sizing": "kv_cache", "profile_run_sampler": "kv_cache", "cuda_graph": "cuda_graph",
          "scheduler_summary": "cuda_graph", "engine_init_done": "warmup", "http": "http", "ready": "ready"}
REASONS = {"scheduler_exception_unknown": "exception", "no_available_memory_for_cache_blocks": "kv_cache_no_memory",
           "kv_cache_size_invalid": "kv_cache_no_memory", "max_model_len_exceeds_kv_capacity": "max_len_exceeds_kv",
           "custom_allreduce_cuda_error": "custom_allreduce_failed", "cuda_oom": "cuda_oom"}


def oracles() -> dict[str, dict]:
    text = (LOGS / "INDEX.md").read_text()
    entries = {}
    for name, block in re.findall(r"^### (\S+\.log)\n.*?```yaml\n(.*?)```", text, re.S | re.M):
        entries[name] = yaml.safe_load(block)
    return entries


ORACLES = oracles()


def test_every_log_in_the_folder_has_an_oracle():
    assert {p.name for p in LOGS.glob("*.log")} <= set(ORACLES)


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_real_log_parses_to_its_index_values(name):
    oracle = ORACLES[name]
    parsed = logparse.parse_file(LOGS / name)
    data = parsed.to_json()
    assert data["server"] == ("sglang" if name.startswith("sglang") else "vllm")
    ranks = data["ranks"]
    for rank, fields in (oracle.get("ranks") or {}).items():
        got = ranks.get("0" if rank == "unknown" else str(rank), {})
        for key, want in fields.items():
            if key == "graph_end":
                for sub, ours in GRAPH_END.items():
                    assert got.get(ours) == pytest.approx(want[sub]), f"rank {rank} {ours}"
            elif key in FIELDS:
                assert got.get(FIELDS[key]) == pytest.approx(want), f"rank {rank} {key}"
    for key, ours in ENGINE.items():
        if key in oracle and "ranks" not in oracle or (key in oracle and key in ("kv_tokens", "num_gpu_blocks",
                                                                                   "gpu_blocks", "max_model_len",
                                                                                   "max_concurrency", "init_engine_s")):
            values = [f.get(ours) for f in ranks.values() if ours in f]
            assert oracle[key] in [pytest.approx(v) for v in values], f"{key}: {values}"
    if "model_load_gib_per_rank" in oracle:
        assert sorted({f["weights_mem_gib"] for f in ranks.values()}) == [oracle["model_load_gib_per_rank"]]
    for pid, fields in (oracle.get("workers_by_pid") or {}).items():
        assert any(all(f.get(FIELDS[k]) == pytest.approx(v) for k, v in fields.items()) for f in ranks.values()), pid
    assert data["ready"] == oracle["ready"]
    if oracle.get("failure") is None:
        assert data["failure"] is None, data["failure"]
    else:
        assert data["failure"] is not None
        want = oracle["failure"]
        if want.get("source") != "title":
            assert data["failure"]["reason"] == REASONS[want["reason"]], data["failure"]
        if want.get("phase") in PHASES and want.get("source") != "title":
            assert data["failure"]["phase"] == PHASES[want["phase"]], data["failure"]
    if "phase_reached" in oracle:
        assert data["phase_reached"] == PHASES[oracle["phase_reached"]]
