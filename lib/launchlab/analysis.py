"""Comparisons of runs: pure DataFrame → DataFrame functions over the frames of a run directory."""

from __future__ import annotations

import pandas as pd

STATUSES = ("ready", "failed", "timeout", "degraded", "error")
MEMORY_FIELDS = ("dist_init_mem_gib", "weights_mem_gib", "weights_end_avail_gib", "kv_tokens", "kv_gib",
                 "pool_end_avail_gib", "graph_mem_gib", "graph_end_avail_gib")


def outcomes(runs: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    """One row per variant: how many runs ended in each status, and why the failed ones failed."""
    rows = []
    for variant, group in runs.groupby("variant", sort=False):
        counts = group["status"].value_counts()
        reasons = sorted({r for r in group["failure_reason"].dropna()})
        row = {"variant": variant, **{f: group[f].iloc[0] for f in factors}, "n": len(group)}
        row.update({s: int(counts.get(s, 0)) for s in STATUSES})
        row["outcome"] = f"{row['ready']}/{len(group)} ready"
        row["failure_reasons"] = ", ".join(reasons)
        row["startup_s_mean"] = group["startup_s"].mean()
        row["peak_mem_used_mib_max"] = group["peak_mem_used_mib"].max()
        rows.append(row)
    return pd.DataFrame(rows)


def outcome_deciders(runs: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    """For each factor: does changing only its level change the share of ready runs, the others held fixed?"""
    rows = []
    for factor in factors:
        others = [f for f in factors if f != factor]
        evidence, flips = [], False
        groups = runs.groupby(others, sort=False) if others else [((), runs)]
        for key, group in groups:
            key = key if isinstance(key, tuple) else (key,)
            rates = group.groupby(factor, sort=False)["status"].apply(lambda s: (s == "ready").sum() / len(s))
            counts = group.groupby(factor, sort=False)["status"].apply(lambda s: f"{(s == 'ready').sum()}/{len(s)}")
            if rates.nunique() > 1:
                flips = True
            held = ", ".join(f"{o}={k}" for o, k in zip(others, key, strict=True)) or "alone"
            levels = "; ".join(f"{lv}: {c} ready" for lv, c in counts.items())
            evidence.append(f"[{held}] {levels}")
        rows.append({"factor": factor, "changes_launch_outcome": flips, "evidence": " | ".join(evidence)})
    return pd.DataFrame(rows)


def per_run_memory(events: pd.DataFrame, fields: tuple[str, ...] = MEMORY_FIELDS) -> pd.DataFrame:
    """One row per run and rank, one column per memory field (the last value the log printed)."""
    sel = events[events["field"].isin(fields)]
    if sel.empty:
        return pd.DataFrame(columns=["run_id", "rank", *fields])
    wide = sel.pivot_table(index=["run_id", "rank"], columns="field", values="value", aggfunc="last")
    return wide.reset_index().rename_axis(columns=None)


def rank_memory(events: pd.DataFrame, runs: pd.DataFrame, tolerance: float = 0.05) -> pd.DataFrame:
    """Memory per variant from the server's own log lines (GiB, tokens): the mean over runs and ranks, with
    the ranks whose values differ from the others by more than `tolerance` named in `ranks_differ`."""
    wide = per_run_memory(events).merge(runs[["run_id", "variant"]], on="run_id")
    columns = ["variant", "n_runs", "n_ranks", *MEMORY_FIELDS, "ranks_differ"]
    if wide.empty:
        return pd.DataFrame(columns=columns)
    fields = [f for f in MEMORY_FIELDS if f in wide]
    rows = []
    for variant in runs["variant"].drop_duplicates():
        group = wide[wide["variant"] == variant]
        if group.empty:
            continue
        per_rank = group.groupby("rank")[fields].mean()
        spread = [f for f in fields if (per_rank[f].max() - per_rank[f].min()) > tolerance * max(1.0, abs(per_rank[f].mean()))]
        rows.append({"variant": variant, "n_runs": group["run_id"].nunique(), "n_ranks": len(per_rank),
                     **per_rank.mean().to_dict(), "ranks_differ": ", ".join(spread)})
    keep = [c for c in columns if c in ("variant", "n_runs", "n_ranks", "ranks_differ") or c in fields]
    return pd.DataFrame(rows, columns=keep)


def metric_summary(events: pd.DataFrame, runs: pd.DataFrame, field: str, rank: str = "0") -> pd.DataFrame:
    """mean ± sd, min … max and n of one logged metric per variant (one value per run, from one rank)."""
    sel = events[(events["field"] == field) & (events["rank"] == rank)].groupby("run_id")["value"].last()
    data = runs[["run_id", "variant"]].merge(sel.rename(field), left_on="run_id", right_index=True, how="left")
    out = data.groupby("variant", sort=False)[field].agg(["count", "mean", "std", "min", "max"])
    return out.rename(columns={"count": "n"}).reset_index()


def failures(runs: pd.DataFrame) -> pd.DataFrame:
    cols = ["run_id", "variant", "status", "failure_reason", "failure_phase", "failure_message"]
    return runs.loc[runs["status"] != "ready", cols].reset_index(drop=True)
