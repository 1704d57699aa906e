"""Memory budgets recomputed from the server's own numbers: why a launch had (no) room for its KV cache.

SGLang (reference/log-formats.md 2.4): rest = avail − total × (1 − mem_fraction_static), where total is the
pre-load free memory (the MIN over ranks of "Load weight begin" avail) and avail the post-load free memory
(the MIN of "Load weight end" avail). A launch has a KV cache iff rest > 0; the break-even fraction is
1 − avail / total. vLLM (section 3.2): kv = total × gpu_memory_utilization − (weights + non-torch +
activation peak); the utilization needed is (weights + non-torch + activation) / total.
"""

from __future__ import annotations

import math

import pandas as pd

DISAGREE_GIB = 0.02  # logged and recomputed values are printed with 2-3 decimals
GAP_EXPLAIN_GIB = 1.0


def _logged(events: pd.DataFrame, runs: pd.DataFrame):
    """(run, numbers) for every run whose log gave numbers: per field the MIN over ranks (what SGLang's
    distributed MIN uses)."""
    if events.empty:
        return
    table = events.pivot_table(index="run_id", columns="field", values="value", aggfunc="min")
    for _, run in runs.iterrows():
        if run["run_id"] in table.index:
            yield run, table.loc[run["run_id"]]


def _missing(*values) -> bool:
    return any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values)


def sglang_budget(events: pd.DataFrame, runs: pd.DataFrame, telemetry: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per run with the numbers needed: total_gib, avail_gib, fraction, rest_gib (recomputed),
    logged_rest_gib (from a `DEBUG profile_max_num_token` line, if any), agrees, break_even_fraction,
    and the card's capacity from nvidia-smi with the gap explained."""
    rows = []
    # each run's card capacity in one pass: selecting a run's rows of millions of samples, run by run, took seconds
    cards = telemetry.groupby("run_id")["mem_total_mib"].min() if telemetry is not None and len(telemetry) else None
    for run, v in _logged(events, runs):
        total, avail = v.get("weights_begin_avail_gib"), v.get("weights_end_avail_gib")
        fraction = v.get("mem_fraction_static")
        if _missing(total, avail, fraction):
            continue
        rest = avail - total * (1 - fraction)
        logged = v.get("debug.profile_max_num_token.rest")
        logged = None if logged is None or math.isnan(logged) else float(logged)
        row = {"run_id": run["run_id"], "variant": run["variant"], "status": run["status"], "total_gib": total,
               "avail_gib": avail, "fraction": fraction, "reserved_gib": total * (1 - fraction), "rest_gib": rest,
               "logged_rest_gib": logged,
               "agrees": None if logged is None else abs(logged - rest) <= DISAGREE_GIB,
               "break_even_fraction": 1 - avail / total,
               "kv_gib": v.get("kv_gib") if "kv_gib" in v else None}
        row.update(_card_gap(cards, run["run_id"], total, v.get("dist_init_mem_gib")))
        rows.append(row)
    return pd.DataFrame(rows)


def _card_gap(cards: pd.Series | None, run_id: str, total_gib: float, dist_gib: float | None) -> dict:
    """The formula's `total` against the card's memory.total at the same moment (nvidia-smi); cards: the smallest
    memory.total sampled per run id."""
    if cards is None or run_id not in cards.index or pd.isna(cards[run_id]):
        return {"card_total_gib": None, "gap_gib": None, "gap_note": ""}
    card = float(cards[run_id]) / 1024
    gap = card - total_gib
    note = ""
    if gap > GAP_EXPLAIN_GIB:
        dist = f"{dist_gib:.2f} GiB by distributed init (logged), " if dist_gib and not math.isnan(dist_gib) else ""
        note = (f"{gap:.2f} GiB of the {card:.1f} GiB card was not free before the weights: {dist}the rest by the "
                "driver's reserved memory, the CUDA context and any other process on the GPU (see the preflight)")
    return {"card_total_gib": card, "gap_gib": gap, "gap_note": note}


def vllm_budget(events: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run that logged vLLM's memory profile: the KV budget recomputed and the utilization needed."""
    rows = []
    for run, v in _logged(events, runs):
        total, util = v.get("total_gpu_gib"), v.get("gpu_memory_utilization")
        parts = [v.get("profile_weights_gib", v.get("weights_mem_gib")), v.get("non_torch_gib"), v.get("activation_peak_gib")]
        if _missing(total, util, *parts):
            continue
        used = sum(parts)
        kv = total * util - used
        logged = v.get("kv_avail_gib")
        logged = None if _missing(logged) else logged
        rows.append({"run_id": run["run_id"], "variant": run["variant"], "status": run["status"], "total_gib": total,
                     "utilization": util, "non_kv_gib": used, "kv_gib": kv, "logged_kv_gib": logged,
                     "agrees": None if logged is None else abs(logged - kv) <= DISAGREE_GIB,
                     "break_even_utilization": used / total})
    return pd.DataFrame(rows)


def summarize(budget: pd.DataFrame) -> pd.DataFrame:
    """One row per variant: mean of the budget figures, and whether logged and recomputed values agreed."""
    if budget.empty:
        return budget
    numeric = [c for c in budget.columns if c not in ("run_id", "variant", "status", "agrees", "gap_note")
               and pd.api.types.is_numeric_dtype(budget[c])]
    out = budget.groupby("variant", sort=False)[numeric].mean()
    out.insert(0, "n", budget.groupby("variant", sort=False)["run_id"].count())
    out["outcome"] = budget.groupby("variant", sort=False)["status"].agg(lambda s: ", ".join(sorted(set(s))))
    if "agrees" in budget:
        out["logged_agrees"] = budget.groupby("variant", sort=False)["agrees"].agg(
            lambda s: None if s.isna().all() else bool(s.dropna().all()))
    return out.reset_index()
