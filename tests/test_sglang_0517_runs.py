"""Real SGLang 0.5.17 logs from the lent H200 (values in tests/fixtures/sglang-0.5.17-h200/INDEX.md, read off
the lines before the parser changed): the parser reads 0.5.17's KV-sizing error with SGLang's own break-even, both
graph captures, the IPC reservation and the seed's debug line; the budget puts the break-even where SGLang does
(0.0029), not at 0.00216 from the "Load weight" lines."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import ROOT
from launchlab.logparse import sglang
from launchlab.verdicts import budget

# the logs, by the names INDEX.md gives them: the example batches' own server.log files, read where the batches keep
# them (copies in the fixture folder were the same bytes, twice in a tracked tree that has a size limit)
KV, THRESHOLD = "examples/h200-sglang-kv/20261203-092613/runs", "examples/h200-sglang-threshold/20261203-093428/runs"
LOGS = {
    "sglang-0.5.17-frac0.002-kv-error.log": f"{KV}/02_fraction-0.002.graphs-off.debug-off.custom_ar-on_rep1",
    "sglang-0.5.17-frac0.004-graphs.log": f"{KV}/03_fraction-0.004.graphs-cuda.debug-off.custom_ar-on_rep1",
    "sglang-0.5.17-frac0.004-debug-print.log": f"{KV}/05_fraction-0.004.graphs-off.debug-print.custom_ar-on_rep1",
    "sglang-0.5.17-frac0.0030-tiny-pool.log": f"{THRESHOLD}/04_graphs-off.mem_fraction_static-0.0030_rep1",
}
SGLANG_MINIMUM = 0.0029  # "minimum viable = 1 - available/pre = 0.0029"
RESOLUTION = 0.0005  # params/sglang-threshold.yaml


def _parse(name: str):
    with open(ROOT / LOGS[name] / "server.log", encoding="utf-8") as fh:
        return sglang.parse(fh)


def _budget(*names_statuses: tuple[str, str]) -> pd.DataFrame:
    events, runs = [], []
    for name, status in names_statuses:
        log = _parse(name)
        events += [{"run_id": name, "t_s": 0.0, "rank": e.rank, "field": e.field, "value": e.value} for e in log.events]
        runs.append({"run_id": name, "variant": name, "status": status})
    return budget.recompute("sglang", pd.DataFrame(events), pd.DataFrame(runs)).set_index("run_id")


def test_the_kv_error_gives_sglangs_own_break_even_and_the_failure_its_phase():
    log = _parse("sglang-0.5.17-frac0.002-kv-error.log")
    assert not log.ready and log.failure.reason == "kv_cache_no_memory" and log.failure.phase == "kv_cache"
    assert log.failure.message.startswith("ValueError: Loaded weights leave no GPU memory for the KV cache under "
                                          "--mem-fraction-static=0.002. Raise --mem-fraction-static above 0.003")
    rank = log.ranks["0"]
    assert rank["kv_min_fraction"] == SGLANG_MINIMUM and rank["kv_suggested_fraction"] == 0.003
    assert rank["weights_begin_avail_gib"] == 139.09 and rank["weights_end_avail_gib"] == 138.79
    assert rank["weights_mem_gib"] == 0.31 and rank["dist_init_mem_gib"] == 0.09 and rank["ipc_reserve_gib"] == 1.0
    assert log.args["mem_fraction_static"] == "0.002" and log.args["tp_size"] == "1"
    assert log.args["disable_custom_all_reduce"] == "False"


def test_both_graph_captures_are_summed_and_the_pool_read():
    log = _parse("sglang-0.5.17-frac0.004-graphs.log")
    assert log.ready and log.failure is None
    rank = log.ranks["0"]
    assert rank["graph_mem_gib"] == pytest.approx(0.37 + 0.09) and rank["graph_s"] == pytest.approx(3.61 + 3.45)
    assert rank["graph_captures"] == 2 and rank["graph_end_avail_gib"] == 138.04
    assert rank["kv_tokens"] == 19729 and rank["kv_gib"] == 0.16 and rank["pool_end_avail_gib"] == 138.59


def test_the_seeds_debug_line_is_data_and_agrees_with_the_kits_own_budget():
    log = _parse("sglang-0.5.17-frac0.004-debug-print.log")
    rank = log.ranks["0"]
    assert rank["debug.profile_available_bytes.avail"] == 138.787415
    assert rank["debug.profile_available_bytes.pre"] == 139.193665
    assert rank["debug.profile_available_bytes.rest"] == 0.150525
    assert [r["key"] for r in log.debug] == ["avail", "pre", "fraction", "slack", "rest"]
    row = _budget(("sglang-0.5.17-frac0.004-debug-print.log", "ready")).iloc[0]
    assert row["agrees"] and row["logged_rest_gib"] == 0.150525
    assert row["total_gib"] == pytest.approx(139.193665, abs=0.02)  # SGLang's pre, not "Load weight begin" 139.09
    assert row["avail_gib"] == pytest.approx(138.787415, abs=0.005)


def test_the_budget_puts_the_break_even_where_sglang_does_within_the_searchs_resolution():
    rows = _budget(("sglang-0.5.17-frac0.002-kv-error.log", "failed"), ("sglang-0.5.17-frac0.004-graphs.log", "ready"),
                   ("sglang-0.5.17-frac0.0030-tiny-pool.log", "ready"))
    failed = rows.loc["sglang-0.5.17-frac0.002-kv-error.log"]
    assert failed["break_even_fraction"] == SGLANG_MINIMUM and failed["total_from"].startswith("SGLang's minimum")
    assert failed["rest_gib"] < 0
    for name in ("sglang-0.5.17-frac0.004-graphs.log", "sglang-0.5.17-frac0.0030-tiny-pool.log"):
        row = rows.loc[name]
        assert row["total_from"] == "the KV pool it allocated" and row["rest_gib"] > 0
        assert abs(row["break_even_fraction"] - SGLANG_MINIMUM) < RESOLUTION / 2, row
    # what the "Load weight" lines alone give: the kit's prediction before issue 38
    assert 1 - 138.79 / 139.09 == pytest.approx(0.00216, abs=1e-5)
