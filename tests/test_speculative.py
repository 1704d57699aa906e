"""A speculative-decoding draft model's lines are read apart from the target's (issue 51), on the constructed logs of
fixtures/constructed-round4 (what real-logs-4's excerpts do not show whole: a launch from start to ready), and the
budget reads the figures the KV sizing used; vLLM 0.2x's per-worker CUDA graph pool line, on a constructed log too."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import DATA
from launchlab import logparse
from launchlab.logparse import speculative
from launchlab.logparse.parsedlog import Speculative
from launchlab.verdicts import budget

CASES = DATA / "constructed-round4"


def parsed(name: str):
    return logparse.parse_file(CASES / name)


def test_a_draft_loaded_before_the_kv_cache_leaves_every_target_field_the_targets():
    log = parsed("sglang_eagle3_draft_before_kv_tp2.log")
    ranks = log.to_json()["ranks"]
    for rank, own in (("0", 0), ("1", 0.01)):  # TP1 has 0.01 GB more free than TP0 throughout
        r = ranks[rank]
        assert (r["weights_begin_avail_gib"], r["weights_mem_gib"], r["dist_init_mem_gib"]) == pytest.approx(
            (78.60 + own, 7.62, 0.45))
        assert (r["draft_weights_begin_avail_gib"], r["draft_weights_mem_gib"]) == pytest.approx((70.98 + own, 0.79))
        assert (r["kv_k_gib"], r["kv_gib"], r["pool_end_avail_gib"]) == pytest.approx((26.40, 52.8, 17.14 + own))
        assert (r["draft_kv_k_gib"], r["draft_kv_gib"], r["draft_pool_end_avail_gib"]) == pytest.approx(
            (0.83, 1.66, 15.48 + own))
        assert (r["graph_mem_gib"], r["draft_graph_mem_gib"], r["draft_extend_graph_mem_gib"]) == (0.40, 0.10, 0.12)
        assert r["kv_sizing_avail_gib"] == pytest.approx(70.19 + own)  # the draft's "Load weight end": SGLang's avail
    assert log.to_json()["draft_phase_lines"] == {"draft_weights": 14, "draft_kv_cache": 22, "draft_cuda_graph": 30,
                                                  "draft_extend_graph": 34}
    assert {info["model_type"] for info in log.rank_info.values()} == {"LlamaForCausalLM"}
    assert {info["draft_architecture"] for info in log.rank_info.values()} == {"LlamaForCausalLMEagle3"}
    assert log.spec == Speculative("EAGLE3", "/models/EAGLE3-LLaMA3.1-Instruct-8B")
    assert log.ready and log.failure is None


def test_a_draft_after_the_target_graphs_is_told_by_its_second_distributed_init():
    log = parsed("sglang_eagle3_draft_after_graphs_tp2.log")
    r = log.to_json()["ranks"]["0"]
    assert (r["dist_init_mem_gib"], r["draft_dist_init_mem_gib"]) == (0.52, 0.0)
    assert (r["weights_begin_avail_gib"], r["draft_weights_begin_avail_gib"]) == (78.12, 10.88)
    assert (r["kv_tokens"], r["kv_gib"], r["draft_kv_gib"]) == (853424, 58.6, 1.62)
    assert (r["graph_s"], r["graph_mem_gib"], r["graph_end_avail_gib"]) == (8.10, 0.62, 10.88)
    assert (r["draft_graph_s"], r["draft_extend_graph_s"]) == (4.20, 3.05)
    assert "kv_sizing_avail_gib" not in r  # the target's KV cache was sized before the draft loaded
    assert log.to_json()["draft_phase_lines"] == {"draft_weights": 24, "draft_kv_cache": 28, "draft_cuda_graph": 32,
                                                  "draft_extend_graph": 36}


def test_the_sglang_budget_of_a_draft_loaded_first_sizes_from_the_drafts_free_memory():
    log = parsed("sglang_eagle3_draft_before_kv_tp2.log")
    events = pd.DataFrame([{"run_id": "r1", "t_s": 0.0, "rank": e.rank, "field": e.field, "value": e.value}
                           for e in log.events])
    runs = pd.DataFrame([{"run_id": "r1", "variant": "v", "status": "ready"}])
    [row] = budget.recompute("sglang", events, runs).to_dict("records")
    assert row["avail_gib"] == 70.19  # after the draft's weights, not the target's 70.98
    # the pool the sizing made is the target's and the draft's KV caches: the total it gives back is "Load weight
    # begin" within the printed rounding (the target's alone would give 89.9 GiB, more than the card had free)
    assert row["total_gib"] == pytest.approx(78.60, abs=0.1)


def test_vllm_each_worker_reports_its_cuda_graph_pool_against_the_estimate():
    log = parsed("vllm_graph_pool_actual_tp2.log")
    ranks = log.to_json()["ranks"]
    assert (ranks["0"]["graph_pool_actual_gib"], ranks["1"]["graph_pool_actual_gib"]) == (0.55, 0.56)
    assert ranks["0"]["graph_pool_estimated_gib"] == ranks["1"]["graph_pool_estimated_gib"] == 0.62
    assert (ranks["0"]["graph_estimate_gib"], ranks["0"]["graph_mem_gib"]) == (0.62, 0.55)
    assert "graph_mem_gib" not in ranks["1"]  # "Graph capturing finished" is the local first rank's only
    assert log.phase_lines["kv_cache"] == 4 and log.phase_lines["cuda_graph"] == 8 and log.ready


@pytest.mark.parametrize(("args", "method", "model"), [
    ({"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/m/eagle3"}, "EAGLE3", "/m/eagle3"),
    ({"speculative_algorithm": "None"}, None, None),
    ({"speculative_config": "{'method': 'eagle3', 'model': 'yuhuili/EAGLE3-LLaMA3.1', 'num_speculative_tokens': 3}"},
     "eagle3", "yuhuili/EAGLE3-LLaMA3.1"),
    ({"speculative_config": "SpeculativeConfig(method='mtp', model='Qwen/Qwen3-Next', num_spec_tokens=2)"},
     "mtp", "Qwen/Qwen3-Next"),
    ({"draft_model": "/local/Mistral-7B"}, None, "/local/Mistral-7B"),
    ({"speculative_config": "SpeculativeConfig(draft_model='JackFram/llama-68m', num_spec_tokens=5)"}, None,
     "JackFram/llama-68m"),  # V0's engine config line
])
def test_the_servers_arguments_say_the_method_and_the_draft_model(args, method, model):
    spec = Speculative()
    speculative.from_args(spec, args)
    assert (spec.method, spec.draft_model) == (method, model)


def test_a_command_line_in_a_paste_says_them_too_without_reading_max_model_len_as_the_model():
    spec = Speculative()
    speculative.from_text(spec, """vllm serve Q --speculative-config '{"method": "draft_model", "model": "Q/Q-0.6B", """
                                """"max-model-len": 10000}'""")
    assert (spec.method, spec.draft_model) == ("draft_model", "Q/Q-0.6B")


@pytest.mark.parametrize(("name", "cut", "error", "draft"), [
    # the draft loaded before the target's KV cache: the sizing that fails is the target's, counting the draft
    ("sglang_eagle3_draft_before_kv_tp2.log", 17, "Not enough memory. Please try to increase --mem-fraction-static.",
     False),
    # the draft loaded after the target's graphs: its own KV pool fails
    ("sglang_eagle3_draft_after_graphs_tp2.log", 27, "Not enough memory. Please try to increase --mem-fraction-static.",
     True),
    # the draft's graph capture runs out of memory
    ("sglang_eagle3_draft_after_graphs_tp2.log", 33, "Scheduler hit an exception: Traceback (most recent call last):",
     True),
])
def test_a_failure_in_the_draft_models_startup_is_the_drafts(tmp_path, name, cut, error, draft):
    lines = (CASES / name).read_text().splitlines(keepends=True)[:cut]
    log = tmp_path / name
    log.write_text("".join(lines) + f"[2026-11-20 10:00:30 TP0] {error}\n")
    failure = logparse.parse_file(log).failure
    assert failure is not None and failure.draft is draft, failure


DRAFTER = """\
(Worker_TP0 pid=661) INFO 06-20 19:18:32 [default_loader.py:430] Loading weights took 14.18 seconds
(Worker_TP0 pid=661) INFO 06-20 19:18:32 [gpu_model_runner.py:5173] Loading drafter model...
{done}(Worker_TP0 pid=661) ERROR 06-20 19:18:40 [multiproc_executor.py:597] WorkerProc failed to start.
(Worker_TP0 pid=661) ERROR 06-20 19:18:40 [multiproc_executor.py:597] Traceback (most recent call last):
"""
DONE = "(Worker_TP0 pid=661) INFO 06-20 19:18:39 [gpu_model_runner.py:5200] Model loading took 15.2 GiB memory and 20.1 seconds\n"


@pytest.mark.parametrize(("done", "draft"), [("", True), (DONE, False)])
def test_a_vllm_worker_that_fails_while_loading_its_drafter_fails_in_the_drafts_weights(done, draft):
    from launchlab.logparse import vllm

    log = vllm.parse(DRAFTER.format(done=done).splitlines(keepends=True))
    assert log.failure is not None and log.failure.phase == "weights" and log.failure.draft is draft
    assert log.draft_phase_lines == {"draft_weights": 2}


def test_vllm_v0s_second_weight_load_of_a_speculative_launch_is_the_draft_models():
    from launchlab.logparse import vllm

    log = vllm.parse([
        "INFO 10-01 10:00:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='m', "
        "speculative_config=SpeculativeConfig(draft_model='JackFram/llama-68m', num_spec_tokens=5), "
        "tensor_parallel_size=1, seed=0\n",
        "INFO 10-01 10:00:10 model_runner.py:1067] Loading model weights took 14.9888 GB\n",
        "INFO 10-01 10:00:12 model_runner.py:1067] Loading model weights took 0.1270 GB\n"])
    assert log.ranks["0"]["weights_mem_gib"] == 14.9888 and log.ranks["0"]["draft_weights_mem_gib"] == 0.127
    assert log.spec.draft_model == "JackFram/llama-68m" and log.draft_phase_lines == {"draft_weights": 3}
