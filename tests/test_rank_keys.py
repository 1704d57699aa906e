"""Rank keys that name a DP group or a pipeline stage ("dp1.0", "dp4.pp0.4", issue 12) work wherever the kit reads
rank keys: the custom all-reduce sentence of the level checks, the per-run effect metrics, the per-rank facts that
several nodes' logs merge, and the run notebook's rank table — each in rank order, none lost or merged."""

import pandas as pd

from launchlab import analysis, frames, levelchecks, rundir, runview
from launchlab.logparse import sglang

# data parallelism without DP attention: both DP groups have a TP rank 0 (the tags of sglang issue #5034)
TWO_DP_GROUPS = [
    "[2025-04-03 20:06:30 DP0 TP0] Load weight end. avail mem=41.00 GB, mem usage=29.00 GB.\n",
    "[2025-04-03 20:06:30 DP1 TP0] Load weight end. avail mem=40.00 GB, mem usage=30.00 GB.\n",
    "[2025-04-03 20:06:31 DP0 TP0] KV Cache is allocated. #tokens: 1200, KV size: 6.00 GB\n",
    "[2025-04-03 20:06:31 DP1 TP0] KV Cache is allocated. #tokens: 1000, KV size: 5.00 GB\n",
]


def test_the_level_checks_name_every_keyed_rank_in_order_after_the_plain_tp_ranks():
    assert levelchecks.ranks_text(["3", "1", "2", "0"]) == "0–3"
    assert levelchecks.ranks_text(["dp1.0", "dp10.0", "dp0.0", "dp2.0"]) == "dp0.0, dp1.0, dp2.0, dp10.0"
    # before issue 12 a log keyed by stage lost its stages here: only the plain ranks were named
    assert levelchecks.ranks_text(["pp1.0", "0", "pp0.0"]) == "0, pp0.0, pp1.0"


def test_a_runs_effect_metrics_come_from_its_first_rank_when_the_log_keys_ranks_by_dp_group():
    parsed = sglang.parse(TWO_DP_GROUPS)
    events = pd.DataFrame([{"run_id": "r1", "t_s": None, "rank": e.rank, "field": e.field, "value": e.value}
                           for e in parsed.events])
    runs = pd.DataFrame([{"run_id": "r1", "variant": "baseline", "peak_mem_used_mib": 1.0, "startup_s": 2.0}])
    metrics = analysis.run_metrics(runs, events)
    # DP0's values: before, both groups were keyed "0" and the last line printed (DP1's) counted
    assert metrics.loc["r1", "kv_tokens"] == 1200 and metrics.loc["r1", "weights_mem_gib"] == 29.0


def test_the_ranks_of_two_nodes_logs_merge_in_rank_order_and_the_rank_table_shows_them_so(tmp_path):
    node0 = {"ranks": {"dp0.0": {"kv_gib": 6.0}, "dp1.0": {"kv_gib": 5.0}}, "custom_ar": {}}
    node1 = {"ranks": {"dp10.0": {"kv_gib": 4.0}, "dp2.0": {"kv_gib": 3.0}, "dp1.0": {"kv_gib": 9.9}}}
    merged = frames._merge_parsed(node0, node1)
    assert list(merged["ranks"]) == ["dp0.0", "dp1.0", "dp2.0", "dp10.0"]
    assert merged["ranks"]["dp1.0"] == {"kv_gib": 5.0}  # node 0's own line wins
    folder = rundir.RunDir(tmp_path).run("r1")
    folder.path.mkdir(parents=True)
    rundir.write_json(folder.parsed, merged)
    table = runview.rank_table(tmp_path, "r1")
    assert table.columns == ["rank dp0.0", "rank dp1.0", "rank dp2.0", "rank dp10.0"]
    assert table.rows[0] == ("kv_gib", ["6.0", "5.0", "3.0", "4.0"])
