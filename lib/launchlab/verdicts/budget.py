"""Memory budgets recomputed from the server's own numbers: why a launch had (no) room for its KV cache.

Each server kind declares its own recomputation and break-even in its module of logparse/ (`budget` and
`break_even` of its ServerKind: SGLang's `1 − avail/total` in `mem_fraction_static`, vLLM's
`(weights + non-torch + activation) / total` in `gpu_memory_utilization`); this module holds what they share —
each run's logged numbers, the card's capacity against the formula's total, the per-variant summary — and
dispatches through the kinds registry, so nothing here knows a server's flags.
"""

from __future__ import annotations

import pandas as pd

from launchlab.escaping import md
from launchlab.logparse.kinds import KINDS
from launchlab.logparse.serverkind import BreakEven
from launchlab.numtext import ASKED, significant
from launchlab.verdicts import consistency
from launchlab.verdicts.ledger import Ledger


def with_weights(budget: pd.DataFrame, facts: dict[str, dict]) -> pd.DataFrame:
    """The budget rows with a `weights` column where the runs' model paths held different weights (provenance
    `model`, confounds.model_differences): each build named by the first run that had it, so that summarize never
    averages figures across two builds. Unchanged when every run had the same weights (or none was recorded)."""
    if budget.empty:
        return budget
    import json

    key = {r: json.dumps(m, sort_keys=True) for r in budget["run_id"]
           if isinstance(m := (facts.get(r) or {}).get("model"), dict)}
    if len(set(key.values())) < 2:
        return budget
    first: dict[str, str] = {}
    for r in budget["run_id"]:
        if r in key:
            first.setdefault(key[r], f"as in {r}")
    return budget.assign(weights=[first.get(key.get(r), "not recorded") for r in budget["run_id"]])


def without_logged(budget: pd.DataFrame, runs: set[str]) -> pd.DataFrame:
    """The budget rows with the instrumentation's own figure (`logged_*`, `agrees`) removed from `runs`: what their
    outcome contradicts is not a budget figure (consistency.contradicted_instrumentation)."""
    if budget.empty or not runs:
        return budget
    out = budget.copy()
    hit = out["run_id"].isin(runs)
    for column in [c for c in out.columns if c.startswith("logged_")]:
        out.loc[hit, column] = None
    if "agrees" in out:
        out["agrees"] = out["agrees"].astype(object)
        out.loc[hit, "agrees"] = None
    return out


def summarize(budget: pd.DataFrame) -> pd.DataFrame:
    """One row per variant (per variant and weights, where the model path held other weights in some runs: never an
    average over two builds): mean of the budget figures, and whether logged and recomputed values agreed."""
    if budget.empty:
        return budget
    by = ["variant", "weights"] if "weights" in budget else ["variant"]
    numeric = [c for c in budget.columns if c not in ("run_id", "variant", "status", "agrees", "gap_note", "borrowed_from",
                                                      "weights")
               and pd.api.types.is_numeric_dtype(budget[c])]
    groups = budget.groupby(by, sort=False)
    out = groups[numeric].mean()
    out.insert(0, "n", groups["run_id"].count())
    out["outcome"] = groups["status"].agg(lambda s: ", ".join(sorted(set(s))))
    if "agrees" in budget:
        out["logged_agrees"] = groups["agrees"].agg(lambda s: None if s.isna().all() else bool(s.dropna().all()))
    if "total_from" in budget:  # which numbers gave a kind's total (SGLang: logparse/sglang.py _total)
        out["total_from"] = groups["total_from"].agg(lambda s: "; ".join(dict.fromkeys(s.dropna())))
    if "borrowed_from" in budget:
        out["profile_from"] = groups["borrowed_from"].agg(_profile_from)
    return out.reset_index()


def _profile_from(borrowed: pd.Series) -> str:
    """Where a variant's rows took the figures their logs lack: "own log", or how many other runs lent them."""
    lenders = {r for text in borrowed.fillna("") if text for r in text.split(", ")}
    own = "own log" if (borrowed.fillna("") == "").any() else ""
    return ", ".join(x for x in (own, f"{len(lenders)} other runs" if lenders else "") if x)


def own_figures(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows a kind recomputed from their own run's log alone: a row that took figures from other runs
    (`borrowed_from`: a failed vLLM launch) repeats their break-even and predicts nothing of its own."""
    if frame.empty or "borrowed_from" not in frame:
        return frame
    return frame[frame["borrowed_from"].fillna("") == ""]


def recompute(kind: str, events: pd.DataFrame, runs: pd.DataFrame, telemetry: pd.DataFrame | None = None
              ) -> pd.DataFrame:
    """The server kind's budget, one row per run whose log gave the numbers; empty for a kind without one."""
    budget = KINDS[kind].budget
    return pd.DataFrame() if budget is None else budget(events, runs, telemetry)


def observed(kind: str, led: Ledger, events: pd.DataFrame, runs: pd.DataFrame, *,
             telemetry: pd.DataFrame | None = None) -> pd.DataFrame:
    """The kind's budget over the observations, less those the ledger says ran another variant than the rest of
    their own (ran_otherwise: its figures would skew the variant's mean and break-even) — each knowing whether
    a flag capped its pool (whose size then says nothing of the memory left); an instrumentation value its own
    run's outcome contradicts is no figure of it (consistency.py's finding says what it printed and why)."""
    odd = {r.run_id for r in led.ran_otherwise()}
    declared = {r.run_id: r.pool_capped for r in led.observations if r.run_id not in odd}
    mine = runs[runs["run_id"].isin(declared)]
    found = recompute(kind, events, mine.assign(pool_capped=[declared[r] for r in mine["run_id"]]), telemetry)
    return without_logged(found, {r.run_id for r, _, _ in consistency.contradicted_instrumentation(led, events)})


def break_even_of(frame: pd.DataFrame) -> BreakEven | None:
    """The break-even a budget frame (per run, or summarized per variant) holds: the kind whose column it has."""
    return next((k.break_even for k in KINDS.values() if k.break_even and k.break_even.column in frame), None)


def break_even_markdown(summary: pd.DataFrame) -> str:
    """The verdict's break-even sentence, in the argument of the server kind whose budget the summary holds:
    said once per distinct value, with the variants that share it. Empty when the budget predicts none."""
    found = break_even_of(summary) if not summary.empty else None
    if found is None:
        return ""
    by_value: dict[str, list[str]] = {}
    for name, value in zip(summary["variant"], summary[found.column], strict=True):
        if pd.notna(value):
            # three significant digits: 0.744 of the card, vLLM's small share 0.00565 (numtext.BREAK_EVEN_DIGITS)
            by_value.setdefault(significant(value), []).append(name)
    if not by_value:
        return ""
    head = f"**Break-even `{found.arg}`** (from the logged numbers: {md(found.formula)}): "
    if len(by_value) == 1:
        [value] = by_value
        return head + f"{value} in every variant. A launch has room for a KV cache only above it."
    return (head + "; ".join(f"{value} for {md(' · '.join(names))}" for value, names in by_value.items())
            + ". A launch has room for a KV cache only above it." + _between(summary, found))


def _between(summary: pd.DataFrame, found: BreakEven) -> str:
    """Why an outcome depends on the variant where the break-even moves: an asked value that lies between two
    break-evens starts above the lower and fails below the higher (the seed's symptom: custom all-reduce's buffers
    move SGLang's from 0.748 to 0.753, and 0.75 then fails with them only). Empty where no asked value lies between."""
    asked = next((c for c in ASKED if c in summary), None)
    values = summary[found.column].dropna()
    if asked is None or values.nunique() < 2:
        return ""
    low, high = values.min(), values.max()
    said = []
    for value in sorted(summary[asked].dropna().unique()):
        if not low < value < high:
            continue
        rows = summary[summary[asked] == value].dropna(subset=[found.column])
        below = rows[rows[found.column] < value]
        above = rows[rows[found.column] > value]
        if below.empty or above.empty:
            continue
        names = _differing(rows["variant"])
        sides = [f"{' · '.join(names[v] for v in side['variant'])} (break-even {significant(side[found.column].max())})"
                 for side in (below, above)]
        said.append(f"{found.arg} = {value:g} lies between them: it leaves room for a KV "
                    f"cache with {sides[0]} and none with {sides[1]}")
    if not said:
        return ""
    return (f" **Why the outcome depends on the variant:** the break-even moves from {significant(low)} to "
            f"{significant(high)}; " + md("; ".join(said)) + ".")


def _differing(variants: pd.Series) -> dict[str, str]:
    """Each variant named by the levels it does not share with the others at the same asked value
    (`custom_ar=on` for `custom_ar=on, mem_fraction=0.75`); its whole name where names are not `factor=level` lists."""
    parts = {v: v.split(", ") for v in variants}
    common = set.intersection(*(set(p) for p in parts.values())) if parts else set()
    return {v: ", ".join(x for x in p if x not in common) or v for v, p in parts.items()}

