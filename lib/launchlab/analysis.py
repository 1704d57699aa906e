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
    return pd.DataFrame(rows, columns=["factor", "changes_launch_outcome", "evidence"])


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


# ---------------------------------------------------------------------------------------------------------
# Effects against the baseline, hyperfine-style

EFFECT_METRICS = ("weights_mem_gib", "kv_tokens", "kv_gib", "graph_mem_gib", "peak_mem_used_mib", "startup_s")
SMALL_N = 3
LARGE_SPREAD = 0.10  # sd / |mean|


def run_metrics(runs: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """One row per run: the effect metrics (log values from rank 0, the last one printed)."""
    logged = events[(events["rank"] == "0") & events["field"].isin(EFFECT_METRICS)]
    wide = logged.pivot_table(index="run_id", columns="field", values="value", aggfunc="last")
    out = runs.set_index("run_id")[["variant", "peak_mem_used_mib", "startup_s"]].join(wide, how="left")
    for metric in EFFECT_METRICS:
        if metric not in out:
            out[metric] = float("nan")
    return out


def _summary(values: pd.Series) -> dict:
    values = values.dropna()
    return {"n": int(len(values)), "mean": values.mean() if len(values) else None,
            "sd": values.std() if len(values) > 1 else None,
            "min": values.min() if len(values) else None, "max": values.max() if len(values) else None}


def factor_effects(runs: pd.DataFrame, events: pd.DataFrame, factors: list[str], baseline: dict[str, str]) -> list[dict]:
    """For each factor level other than the baseline's: its runs against the runs that differ from them only in
    that factor (set to the baseline's level), pooled over the levels of the other factors."""
    metrics = run_metrics(runs, events)
    table = runs.set_index("run_id")[factors].join(metrics)
    effects = []
    for factor in factors:
        others = [f for f in factors if f != factor]
        for level in table[factor].drop_duplicates():
            if level == baseline[factor]:
                continue
            treated, control = [], []
            keys = table[table[factor] == level][others].drop_duplicates().itertuples(index=False) if others else [()]
            for key in keys:
                same = (table[others] == pd.Series(dict(zip(others, key, strict=True)))).all(axis=1) if others else True
                treated.append(table[same & (table[factor] == level)])
                control.append(table[same & (table[factor] == baseline[factor])])
            treated_rows, control_rows = pd.concat(treated), pd.concat(control)
            for metric in EFFECT_METRICS:
                t, c = _summary(treated_rows[metric]), _summary(control_rows[metric])
                if t["n"] == 0 or c["n"] == 0:
                    continue
                diff = t["mean"] - c["mean"]
                effects.append({"factor": factor, "level": level, "baseline_level": baseline[factor], "metric": metric,
                                **t, "baseline_n": c["n"], "baseline_mean": c["mean"], "diff": diff,
                                "ratio": t["mean"] / c["mean"] if c["mean"] else None})
    return effects


def variant_effects(runs: pd.DataFrame, events: pd.DataFrame, baseline_variant: str) -> pd.DataFrame:
    """Per variant and metric: mean ± sd, min … max, n, and the difference and ratio to the baseline variant."""
    metrics = run_metrics(runs, events)
    base = metrics[metrics["variant"] == baseline_variant]
    rows = []
    for variant, group in metrics.groupby("variant", sort=False):
        for metric in EFFECT_METRICS:
            s, b = _summary(group[metric]), _summary(base[metric])
            if s["n"] == 0:
                continue
            rows.append({"variant": variant, "metric": metric, **s, "baseline_mean": b["mean"],
                         "diff": None if b["mean"] is None else s["mean"] - b["mean"],
                         "ratio": None if not b["mean"] else s["mean"] / b["mean"]})
    return pd.DataFrame(rows)


def effect_warnings(effects: list[dict]) -> list[str]:
    """What to do when n is too small or the spread too large to trust a difference (one line per level)."""
    small: dict[str, tuple[int, list[str]]] = {}
    warnings = []
    for e in effects:
        where = f"{e['factor']}={e['level']} vs {e['baseline_level']}"
        n = min(e["n"], e["baseline_n"])
        if n < SMALL_N:
            small.setdefault(where, (n, []))[1].append(e["metric"])
        elif e["sd"] and e["mean"] and e["sd"] / abs(e["mean"]) > LARGE_SPREAD:
            warnings.append(f"{where}, {e['metric']}: the spread (sd {e['sd']:.3g}) is over {LARGE_SPREAD:.0%} of the "
                            "mean; look for a confound (other processes, thermal state) before trusting the difference")
    for where, (n, metrics) in small.items():
        warnings.append(f"{where}: only n={n} runs per side ({', '.join(metrics)}); too few to tell a small "
                        f"difference from run-to-run noise — raise `repetitions:` to {SMALL_N} or more")
    return sorted(warnings)


# ---------------------------------------------------------------------------------------------------------
# Confounds: what differs between runs besides the declared factors

VOLATILE_ENV = {"SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "PWD", "OLDPWD", "SHLVL", "_", "LAUNCHLAB_RUN_ID",
                "JPY_PARENT_PID", "PYDEVD_USE_FRAME_EVAL", "TERM", "COLUMNS", "LINES"}


def _differs(values: dict[str, object]) -> dict[object, list[str]] | None:
    """Group run ids by value; None when every run has the same value."""
    groups: dict[object, list[str]] = {}
    for run_id, value in values.items():
        groups.setdefault(json_key(value), []).append(run_id)
    return groups if len(groups) > 1 else None


def json_key(value: object) -> object:
    import json

    return value if isinstance(value, (str, int, float, type(None))) else json.dumps(value, sort_keys=True)


def confounds(runs: pd.DataFrame, facts: dict[str, dict], baseline_variant: str, tolerance_mib: float = 256) -> list[dict]:
    """Every difference between runs that the design did not declare, with the runs it touches."""
    found: list[dict] = []

    def add(kind: str, detail: str, run_ids: list[str]) -> None:
        found.append({"kind": kind, "detail": detail, "runs": sorted(run_ids)})

    ids = [r for r in runs["run_id"] if r in facts]
    host_facts = {r: facts[r].get("host_facts") or {} for r in ids}
    for key, label in (("driver", "driver version"), ("cuda", "CUDA version"), ("os", "operating system"),
                       ("kernel", "kernel")):
        if groups := _differs({r: host_facts[r].get(key) for r in ids}):
            add("host", f"{label} differs: " + "; ".join(f"{v}: {', '.join(rs)}" for v, rs in groups.items()),
                [r for rs in list(groups.values())[1:] for r in rs])
    interp = {r: facts[r].get("interpreter") or {} for r in ids}
    if groups := _differs({r: interp[r].get("python") for r in ids}):
        add("versions", "Python differs: " + "; ".join(f"{v}: {', '.join(rs)}" for v, rs in groups.items()),
            [r for rs in list(groups.values())[1:] for r in rs])
    packages = sorted({p for r in ids for p in (interp[r].get("packages") or {})})
    for package in packages:
        if groups := _differs({r: (interp[r].get("packages") or {}).get(package) for r in ids}):
            add("versions", f"package {package} differs: " + "; ".join(f"{v}: {', '.join(rs)}" for v, rs in groups.items()),
                [r for rs in list(groups.values())[1:] for r in rs])
    def changed(r: str) -> list[str]:
        integrity = facts[r].get("integrity") or {}
        return sorted((integrity.get("modified") or []) + (integrity.get("added") or []))

    # patches declared as a factor level change files on purpose: those runs are compared by the factor
    unpatched = [r for r in ids if not facts[r].get("patched")]
    if groups := _differs({r: changed(r) for r in unpatched}):
        for rs in groups.values():
            files = changed(rs[0])
            if files:
                add("modified files", f"installed files differ from the release in runs {', '.join(rs)} only: "
                    f"{', '.join(files[:5])}{' …' if len(files) > 5 else ''}", rs)
    if groups := _differs({r: (facts[r].get("integrity") or {}).get("git_dirty") for r in ids}):
        add("modified files", "the server's git checkout had uncommitted changes in some runs only: "
            + "; ".join(f"dirty={v}: {', '.join(rs)}" for v, rs in groups.items()),
            [r for rs in list(groups.values())[1:] for r in rs])
    if groups := _differs({r: (facts[r].get("integrity") or {}).get("git_commit") for r in ids}):
        add("versions", "git commit of the server differs: " + "; ".join(f"{v}: {', '.join(rs)}" for v, rs in groups.items()),
            [r for rs in list(groups.values())[1:] for r in rs])
    env_names = sorted({k for r in ids for k in (facts[r].get("host_env") or {})} - VOLATILE_ENV)
    for name in env_names:
        if groups := _differs({r: (facts[r].get("host_env") or {}).get(name) for r in ids}):
            add("environment", f"undeclared environment variable {name} differs between runs: "
                + "; ".join(f"{v!r}: {', '.join(rs)}" for v, rs in groups.items()),
                [r for rs in list(groups.values())[1:] for r in rs])
    for r in ids:
        pre = facts[r].get("preflight") or {}
        busy = [g for g in pre.get("gpus", []) if (g.get("mem_used_mib") or 0) > tolerance_mib]
        apps = pre.get("compute_apps") or []
        if busy or apps:
            what = ", ".join(f"GPU {g['index']} {g['mem_used_mib']:.0f} MiB" for g in busy)
            procs = ", ".join(f"pid {a['pid']} ({a['process_name']})" for a in apps)
            add("gpu state", f"before run {r} the GPUs were not idle: {what}{'; ' if what and procs else ''}{procs}", [r])
    if "host" in runs and runs["host"].nunique() > 1:
        per_variant = runs.groupby("variant")["host"].apply(lambda h: tuple(sorted(h.value_counts().items())))
        if per_variant.nunique() > 1:
            add("host", "the hosts are not balanced over the variants: "
                + "; ".join(f"{v}: {', '.join(f'{h}×{n}' for h, n in c)}" for v, c in per_variant.items()),
                list(runs["run_id"]))
    base = runs[runs["variant"] == baseline_variant]
    if base["status"].nunique() > 1:
        add("baseline", f"the baseline ({baseline_variant}) is not reproducible: "
            + ", ".join(f"{r}: {s}" for r, s in zip(base["run_id"], base["status"], strict=True)), list(base["run_id"]))
    return found


def _number(value):
    """numpy scalars → Python numbers, NaN → None (for JSON)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def provenance_notes(facts: dict[str, dict]) -> list[str]:
    """What is the same in every run but worth saying: all runs ran modified or uncommitted code."""
    notes = []
    ids = list(facts)
    if not ids:
        return notes
    first = facts[ids[0]].get("integrity") or {}
    files = sorted((first.get("modified") or []) + (first.get("added") or []))
    if files and all(not facts[r].get("patched") for r in ids):
        notes.append(f"every run ran a modified {first.get('package')} ({', '.join(files[:5])}): the results describe "
                     "that code, not the release")
    if all((facts[r].get("integrity") or {}).get("git_dirty") for r in ids):
        notes.append(f"every run ran {first.get('package')} from a git checkout with uncommitted changes "
                     f"({(first.get('git_commit') or '')[:12]}): commit them to make the experiment repeatable")
    return notes


def verdict(runs: pd.DataFrame, events: pd.DataFrame, factors: list[str], baseline: dict[str, str],
            baseline_variant: str, facts: dict[str, dict], budget_rows: list[dict], tolerance_mib: float = 256) -> dict:
    """The machine-readable conclusion of an experiment (verdict.json)."""
    deciders = outcome_deciders(runs, factors)
    effects = factor_effects(runs, events, factors, baseline)
    found = confounds(runs, facts, baseline_variant, tolerance_mib)
    warnings = provenance_notes(facts) + effect_warnings(effects)
    if found:
        warnings.insert(0, f"{len(found)} confound(s): the comparison is not controlled — see `confounds`")
    return {
        "controlled": not found,
        "baseline": baseline_variant,
        "outcome_factors": [d.factor for d in deciders.itertuples() if d.changes_launch_outcome],
        "neutral_factors": [d.factor for d in deciders.itertuples() if not d.changes_launch_outcome],
        "confounds": found,
        "effects": [{k: _number(e[k]) for k in ("factor", "level", "metric", "n", "mean", "sd", "baseline_mean", "diff",
                                                 "ratio")} for e in effects],
        "budget": budget_rows,
        "warnings": warnings,
    }
