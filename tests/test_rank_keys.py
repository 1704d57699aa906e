"""Rank keys other than a bare TP rank (a pipeline stage's "pp1.0"; any key a future kind may name) work wherever
the kit reads rank keys: the custom all-reduce sentence of the level checks, the per-run effect metrics, the per-rank facts that
several nodes' logs merge, and the run notebook's rank table — each in rank order, none lost or merged."""

import pandas as pd

from launchlab.logparse import sglang
from launchlab.runner import runview
from launchlab.store import rundir
from launchlab.verdicts import effects, frames, levelchecks

# pipeline parallelism: both stages have a TP rank 0 (the tags of sglang issue #17941)
TWO_STAGES = [
    "[2025-04-03 20:06:30 PP0 TP0] Load weight end. avail mem=41.00 GB, mem usage=29.00 GB.\n",
    "[2025-04-03 20:06:30 PP1 TP0] Load weight end. avail mem=40.00 GB, mem usage=30.00 GB.\n",
    "[2025-04-03 20:06:31 PP0 TP0] KV Cache is allocated. #tokens: 1200, KV size: 6.00 GB\n",
    "[2025-04-03 20:06:31 PP1 TP0] KV Cache is allocated. #tokens: 1000, KV size: 5.00 GB\n",
]


def test_the_level_checks_name_every_keyed_rank_in_order_after_the_plain_tp_ranks():
    assert levelchecks.ranks_text(["3", "1", "2", "0"]) == "0–3"
    assert levelchecks.ranks_text(["pp1.0", "pp10.0", "pp0.0", "pp2.0"]) == "pp0.0, pp1.0, pp2.0, pp10.0"
    # before issue 12 a log keyed by stage lost its stages here: only the plain ranks were named
    assert levelchecks.ranks_text(["pp1.0", "0", "pp0.0"]) == "0, pp0.0, pp1.0"


def test_a_runs_effect_metrics_come_from_its_first_rank_when_the_log_keys_ranks_by_stage():
    parsed = sglang.parse(TWO_STAGES)
    events = pd.DataFrame([{"run_id": "r1", "t_s": None, "rank": e.rank, "field": e.field, "value": e.value}
                           for e in parsed.events])
    runs = pd.DataFrame([{"run_id": "r1", "variant": "baseline", "peak_mem_used_mib": 1.0, "startup_s": 2.0}])
    metrics = effects.run_metrics(runs, events)
    # the first stage's values: before, only a rank keyed "0" counted, and a log keyed by stage had none
    assert metrics.loc["r1", "kv_tokens"] == 1200 and metrics.loc["r1", "weights_mem_gib"] == 29.0


def test_the_ranks_of_two_nodes_logs_merge_in_rank_order_and_the_rank_table_shows_them_so(tmp_path):
    node0 = {"ranks": {"pp0.0": {"kv_gib": 6.0}, "pp1.0": {"kv_gib": 5.0}}, "custom_ar": {}}
    node1 = {"ranks": {"pp10.0": {"kv_gib": 4.0}, "pp2.0": {"kv_gib": 3.0}, "pp1.0": {"kv_gib": 9.9}}}
    merged = frames._merge_parsed(node0, node1)
    assert list(merged["ranks"]) == ["pp0.0", "pp1.0", "pp2.0", "pp10.0"]
    assert merged["ranks"]["pp1.0"] == {"kv_gib": 5.0}  # node 0's own line wins
    folder = rundir.RunDir(tmp_path).run("r1")
    folder.path.mkdir(parents=True)
    rundir.write_json(folder.parsed, merged)
    table = runview.rank_table(tmp_path, "r1")
    assert table.columns == ["rank pp0.0", "rank pp1.0", "rank pp2.0", "rank pp10.0"]
    assert table.rows[0] == ("kv_gib", ["6.0", "5.0", "3.0", "4.0"])
