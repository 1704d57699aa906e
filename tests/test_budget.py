"""Memory budgets recomputed from the numbers the servers print."""

import pandas as pd
import pytest

from conftest import DATA
from launchlab import logparse
from launchlab.logparse import sglang
from launchlab.verdicts import budget


def frames_of(parsed, status="failed"):
    events = pd.DataFrame([{"run_id": "r1", "t_s": 0.0, "rank": e.rank, "field": e.field, "value": e.value}
                           for e in parsed.events])
    return events, pd.DataFrame([{"run_id": "r1", "variant": "v", "status": status}])


SGLANG_LOG = """\
[2025-11-30 12:00:00] server_args=ServerArgs(model_path='m', host='127.0.0.1', port=30000, mem_fraction_static=0.55, tp_size=2)
[2025-11-30 12:00:01 TP0] Load weight begin. avail mem=93.99 GB
[2025-11-30 12:00:01 TP1] Load weight begin. avail mem=94.10 GB
[2025-11-30 12:00:05 TP0] Load weight end. type=M, dtype=torch.bfloat16, avail mem=21.70 GB, mem usage=72.29 GB.
[2025-11-30 12:00:05 TP1] Load weight end. type=M, dtype=torch.bfloat16, avail mem=21.80 GB, mem usage=72.30 GB.
[2025-11-30 12:00:05 TP0] DEBUG profile_max_num_token: avail=21.700 GiB, total=93.990 GiB, fraction=0.55, \
reserved=42.296 GiB, rest=-20.596 GiB
"""


def test_sglang_rest_and_break_even_from_the_min_over_ranks_agree_with_the_debug_line():
    events, runs = frames_of(sglang.parse(SGLANG_LOG.splitlines(keepends=True)))
    [row] = budget.recompute("sglang", events, runs).to_dict("records")
    assert (row["total_gib"], row["avail_gib"], row["fraction"]) == (93.99, 21.70, 0.55)  # MIN over ranks
    assert row["rest_gib"] == pytest.approx(21.70 - 93.99 * 0.45)
    assert row["logged_rest_gib"] == -20.596 and row["agrees"] is True
    assert row["break_even_fraction"] == pytest.approx(1 - 21.70 / 93.99)


def test_a_logged_value_that_disagrees_with_the_formula_is_flagged():
    events, runs = frames_of(sglang.parse(SGLANG_LOG.replace("rest=-20.596", "rest=-18.000").splitlines(keepends=True)))
    assert budget.recompute("sglang", events, runs)["agrees"].tolist() == [False]


def test_vllm_v0_profile_budget_from_a_real_log():
    parsed = logparse.parse_file(DATA / "real-logs/vllm-pr14447-v0-tp4-memory-profiling-workers.log")
    events, runs = frames_of(parsed)
    [row] = budget.recompute("vllm", events, runs).to_dict("records")
    # 23.58 GiB × 0.99 − (21.21 + 0.20 + 0.37) ≈ 1.57 GiB, as the log says
    assert row["kv_gib"] == pytest.approx(1.57, abs=0.01) and row["agrees"] is True
    assert row["break_even_utilization"] == pytest.approx(21.78 / 23.58)
