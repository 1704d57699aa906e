"""SGLang's KV-cache budget as the report recomputes it from the figures its log states (ServerKind.budget of the
SGLang kind, logparse/sglang.py): one row per run with its memory before the weights, what the weights left, the
pool it sized and the --mem-fraction-static any KV cache needs (its break-even); and what a rank had free at the
end of its startup (the report's budget chart)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from launchlab.logparse.serverkind import POOL_BELOW_CONTEXT

if TYPE_CHECKING:  # annotations only: the kind's record imports this module, and parsing a log never loads pandas
    import pandas as pd


# Where a run's `total` (SGLang's `pre_model_load_memory`, the free memory it measured before the weights) comes
# from, best first. SGLang 0.5.17 measures it when its distributed init ends, and something takes memory between
# that and "Load weight begin" (0.10 GiB on an H200: its debug line said pre=139.19 GB where "Load weight begin"
# said 139.09), so that line's figure put the break-even at 0.00216 where SGLang's own was 0.0029. `avail` is
# "Load weight end" avail: the debug line's avail matched it within 0.003 GiB.
TOTAL_FROM_ERROR = "SGLang's minimum viable share (its KV error)"
TOTAL_FROM_POOL = "the KV pool it allocated"
TOTAL_FROM_WEIGHTS = "Load weight begin"


def _total(v, avail: float, fraction: float, ready: bool) -> tuple[float | None, str]:
    """(total, where it came from) of one run's logged numbers. A failed launch whose error states SGLang's minimum
    viable share z = 1 − avail/pre gives pre = avail / (1 − z); a ready one gives it back from its pool, the pool
    (K + V) being what SGLang made of rest = avail − pre × (1 − fraction): pre = (avail − pool) / (1 − fraction);
    otherwise "Load weight begin" avail."""
    from launchlab.logparse import budgetrows as budget

    minimum, pool = v.get("kv_min_fraction"), v.get("kv_gib")
    if not budget.missing(v.get("kv_sizing_avail_gib"), v.get("draft_kv_gib"), pool):
        pool += v.get("draft_kv_gib")  # a draft loaded before the sizing: its KV cache was sized from the same rest
    if not budget.missing(minimum) and minimum < 1:
        return avail / (1 - minimum), TOTAL_FROM_ERROR
    if ready and not budget.missing(pool) and pool > 0 and fraction < 1:
        return (avail - pool) / (1 - fraction), TOTAL_FROM_POOL
    begin = v.get("weights_begin_avail_gib")
    return (None, "") if budget.missing(begin) else (begin, TOTAL_FROM_WEIGHTS)


def kv_budget(events, runs, telemetry):
    """One row per run with the numbers SGLang's KV sizing used (reference/log-formats.md 2.4): total (the free
    memory before the weights: _total says from which numbers), avail (the MIN over ranks of "Load weight end"
    avail; the draft model's where a speculative draft was loaded before the sizing, `kv_sizing_avail_gib`),
    fraction; rest = avail − total × (1 − fraction), recomputed, against an instrumentation line's when the
    server printed one (`DEBUG profile_available_bytes: … rest=`, the patch of params/patches, or the older
    `DEBUG profile_max_num_token`: agrees); the break-even fraction 1 − avail/total (SGLang's own where its error
    states it); and the card's capacity from nvidia-smi with the gap explained. A launch has a KV cache iff
    rest > 0."""
    import pandas as pd  # loaded when a report asks, never to parse a log or validate params

    from launchlab.logparse import budgetrows as budget

    rows = []
    cards = budget.card_totals(telemetry)
    for run, v in budget.logged(events, runs):
        # the free memory the sizing started from: after the draft's weights where the draft was loaded first
        avail = v.get("weights_end_avail_gib") if budget.missing(v.get("kv_sizing_avail_gib")) else v["kv_sizing_avail_gib"]
        fraction = v.get("mem_fraction_static")
        if budget.missing(avail, fraction):
            continue
        # a pool capped by a flag (--max-total-tokens) is smaller than the room the fraction left: it gives no total
        started = run["status"] == "ready" or run.get("failure_reason") == POOL_BELOW_CONTEXT  # its pool allocated
        total, source = _total(v, avail, fraction, started and not bool(run.get("pool_capped")))
        if total is None:
            continue
        rest = avail - total * (1 - fraction)
        logged = next((float(v[f"debug.{name}.rest"]) for name in ("profile_available_bytes", "profile_max_num_token")
                       if not budget.missing(v.get(f"debug.{name}.rest"))), None)
        minimum = v.get("kv_min_fraction")
        row = {"run_id": run["run_id"], "variant": run["variant"], "status": run["status"], "total_gib": total,
               "total_from": source, "avail_gib": avail, "fraction": fraction, "reserved_gib": total * (1 - fraction),
               "rest_gib": rest, "logged_rest_gib": logged,
               "agrees": None if logged is None else abs(logged - rest) <= budget.DISAGREE_GIB,
               "break_even_fraction": float(minimum) if source == TOTAL_FROM_ERROR else 1 - avail / total,
               "kv_gib": v.get("kv_gib") if "kv_gib" in v else None}
        row.update(budget.card_gap(cards, run["run_id"], total, v.get("dist_init_mem_gib")))
        rows.append(row)
    return pd.DataFrame(rows)


def free_memory(memory: pd.DataFrame) -> pd.Series | None:
    """What a rank had free after the last startup phase that ran (the report's budget chart): "Capture cuda graph
    end" avail, else "Load weight end" avail less the KV pool's size; "Load weight end" avail where no run of the
    table reached a graph capture."""
    if "graph_end_avail_gib" not in memory:
        return memory.get("weights_end_avail_gib")
    return memory["graph_end_avail_gib"].fillna(memory.get("weights_end_avail_gib", 0) - memory.get("kv_gib", 0).fillna(0))
