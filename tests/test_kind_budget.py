"""The memory budget and break-even per server kind, through the kinds registry: vLLM 0.26 from its real logs
(tests/fixtures/vllm-0.26-h200, numbers read off the logs first, see its INDEX.md), in `gpu_memory_utilization`;
SGLang's stays in `mem_fraction_static` (tests/test_budget.py)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from conftest import DATA
from launchlab import logparse, search
from launchlab.logparse.kinds import KINDS
from launchlab.store.manifest import ManifestEntry
from launchlab.verdicts import budget, thresholds

LOGS = DATA / "vllm-0.26-h200"
RUNS = {"g": ("vllm-0.26-util0.3-graphs.log", "graphs"), "e": ("vllm-0.26-util0.3-enforce-eager.log", "eager"),
        "x": ("vllm-0.26-util0.004-enforce-eager.log", "eager-0.004")}


def frames(statuses: dict[str, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """events and runs of the three real logs, as frames.py lays them out."""
    events, runs = [], []
    for run_id, (name, variant) in RUNS.items():
        parsed = logparse.parse_file(LOGS / name)
        events += [{"run_id": run_id, "t_s": 0.0, "rank": e.rank, "field": e.field, "value": e.value}
                   for e in parsed.events]
        runs.append({"run_id": run_id, "variant": variant,
                     "status": "ready" if parsed.ready else "failed"})
    return pd.DataFrame(events), pd.DataFrame(runs)


def test_vllm_026_kv_budget_and_break_even_are_recomputed_from_the_logged_profile():
    events, runs = frames()
    rows = budget.recompute("vllm", events, runs).set_index("run_id")
    # oracle, from the lines: "Free memory on device (139.29/139.8 GiB) … (0.3, 41.94 GiB) … 0.3 GiB for weight,
    # 0.27 GiB for peak activation, 0.22 GiB for non-torch memory, and 0.26 GiB for CUDAGraph memory" and
    # "Available KV cache memory: 41.15 GiB" (graphs); 0.21 GiB peak activation, 41.21 GiB (eager)
    g, e = rows.loc["g"], rows.loc["e"]
    assert (g["total_gib"], g["utilization"], g["non_kv_gib"], g["graph_gib"]) == (139.8, 0.3, pytest.approx(0.79), 0.26)
    assert g["kv_gib"] == pytest.approx(41.15) and g["logged_kv_gib"] == 41.15 and bool(g["agrees"])
    assert e["kv_gib"] == pytest.approx(41.21) and e["logged_kv_gib"] == 41.21 and bool(e["agrees"])
    assert g["break_even_utilization"] == pytest.approx(0.79 / 139.8)
    assert e["break_even_utilization"] == pytest.approx(0.73 / 139.8)
    assert "x" not in rows.index  # the failed run never printed its profile summary: no numbers are made up


def test_the_real_failed_launch_lies_below_the_predicted_break_even_by_what_its_log_says():
    events, runs = frames()
    eager = budget.recompute("vllm", events, runs).set_index("run_id").loc["e"]
    failed = events[(events["run_id"] == "x") & (events["field"] == "kv_avail_gib")]["value"].tolist()
    assert failed == [-0.17]  # "Available KV cache memory: -0.17 GiB" at --gpu-memory-utilization 0.004
    assert 0.004 < eager["break_even_utilization"] < 0.3  # failed below it, ready above it
    assert eager["total_gib"] * 0.004 - eager["non_kv_gib"] == pytest.approx(-0.17, abs=0.005)


def test_the_verdict_sentence_names_the_break_even_in_the_kinds_own_argument():
    events, runs = frames()
    text = budget.break_even_markdown(budget.summarize(budget.recompute("vllm", events, runs)))
    assert text.startswith("**Break-even `gpu_memory_utilization`** (from the logged numbers: (weights + non-torch + "
                           "activation peak) / total): 0.00565 for graphs; 0.00522 for eager.")
    assert "mem_fraction_static" not in text
    sglang = pd.DataFrame([{"variant": "v", "break_even_fraction": 0.7441}])
    assert budget.break_even_markdown(sglang).startswith("**Break-even `mem_fraction_static`** (from the logged "
                                                         "numbers: 1 − avail/total): 0.744 in every variant.")
    assert budget.break_even_markdown(pd.DataFrame()) == ""


def test_every_kind_with_a_budget_declares_its_break_even_in_its_own_module():
    declared = {name: k.break_even for name, k in KINDS.items() if k.budget is not None}
    assert {n: (b.arg, b.column) for n, b in declared.items()} == {
        "sglang": ("mem_fraction_static", "break_even_fraction"),
        "vllm": ("gpu_memory_utilization", "break_even_utilization")}
    for kind in KINDS.values():
        if kind.break_even is not None:
            assert budget.break_even_of(pd.DataFrame(columns=[kind.break_even.column])) == kind.break_even


def test_a_vllm_search_predicts_in_gpu_memory_utilization_and_a_search_of_another_flag_predicts_nothing():
    events, runs = frames()
    per_run = budget.recompute("vllm", events, runs)
    bounds = search.Bounds.parse("0.002", "0.010", "0.002")
    probes = [("g", "0.002", "failed"), ("e", "0.010", "ready"), ("x", "0.006", "ready"), ("y", "0.004", "failed")]
    planned = [ManifestEntry(r, n, f"gpu_memory_utilization={v}", {"gpu_memory_utilization": v}, 1, "box", stratum="s",
                             why="probed") for n, (r, v, _) in enumerate(probes, 1)]
    found = thresholds.table(bounds, ["s"], pd.DataFrame([{"run_id": r, "status": st, "gpu_memory_utilization": v}
                                                          for r, v, st in probes]), planned,
                             factor="gpu_memory_utilization", budget=per_run)
    row = found.iloc[0]
    assert (row["state"], row["interval_low"], row["interval_high"]) == ("converged", 0.004, 0.006)
    # the mean of the two runs with a profile (g and e): (0.79 + 0.73) / 2 / 139.8
    assert row["predicted_break_even"] == pytest.approx(0.76 / 139.8) and row["predicted_in_interval"]
    assert row["pre_load_free_gib"] == 139.8
    other = thresholds.table(bounds, ["s"], pd.DataFrame([{"run_id": r, "status": st, "max_num_seqs": v}
                                                          for r, v, st in probes]),
                             [dataclasses.replace(p, levels={"max_num_seqs": p.levels["gpu_memory_utilization"]})
                              for p in planned], factor="max_num_seqs", budget=per_run)
    assert other.iloc[0]["predicted_break_even"] is None
