"""The result of a threshold search, from the frames of its run directory: per stratum the interval between the
highest failing and the lowest ready value of the searched flag, next to the break-even the server's own
memory numbers predict (budget.py), and the difference between strata in flag units and GiB per GPU.

The intervals are search.py's own reading of the finished runs (the same function that chose the probes), so
the report and the search cannot disagree about what the runs show. Nothing is claimed for a stratum that is
noisy, non-monotone or not bracketed: its interval columns are empty and its note says why.
"""

from __future__ import annotations

import math
from decimal import Decimal

import pandas as pd

from launchlab import budget as budget_mod
from launchlab import search
from launchlab.escaping import md, md_code

COLUMNS = ["stratum", "state", "interval_low", "interval_high", "width", "probes", "runs", "note",
           "predicted_break_even", "predicted_in_interval", "pre_load_free_gib"]


def observations(runs: pd.DataFrame, planned: list[dict], factor: str) -> list[search.Observation]:
    """The finished probe runs (runs.parquet rows) as search.py sees them; planned: the manifest's runs."""
    strata = {p["run_id"]: p.get("stratum") for p in planned}
    found = []
    for _, row in runs.iterrows():
        stratum, value = strata.get(row["run_id"]), row.get(factor)
        if stratum is None or value is None:
            continue
        found.append(search.Observation(stratum, Decimal(str(value)), row["run_id"],
                                        None if row["status"] == "error" else row["status"] == "ready"))
    return found


def _float(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


def table(bounds: search.Bounds, strata: list[str], runs: pd.DataFrame, planned: list[dict], factor: str,
          budget: pd.DataFrame, repetitions: int = 1) -> pd.DataFrame:
    """One row per stratum (the `thresholds` frame). budget: the server kind's per-run budget recomputation
    (run_id, its break-even column, total_gib), empty when its log gives no numbers. The prediction is the kind's
    break-even (budget.break_even_of: SGLang's `mem_fraction_static`, vLLM's `gpu_memory_utilization`), given
    only where the searched flag is that argument (factor: the flag's name in runs.parquet): a break-even in
    another argument's units says nothing of this flag's threshold."""
    stratum_of = {p["run_id"]: p.get("stratum") for p in planned}
    predicts = budget_mod.break_even_of(budget) if not budget.empty else None
    if predicts is not None and predicts.arg != factor:
        predicts = None
    rows = []
    for result in search.step(bounds, strata, observations(runs, planned, factor), repetitions):
        claimed = result.state == search.CONVERGED
        row = {"stratum": result.stratum, "state": result.state,
               "interval_low": _float(result.low) if claimed else None,
               "interval_high": _float(result.high) if claimed else None,
               "width": _float(result.width) if claimed else None, "probes": result.probes,
               "runs": ", ".join(result.runs), "note": result.note,
               "predicted_break_even": None, "predicted_in_interval": None, "pre_load_free_gib": None}
        if predicts is not None:
            mine = budget[budget["run_id"].map(stratum_of) == result.stratum].dropna(subset=[predicts.column])
            if len(mine):
                predicted = float(mine[predicts.column].mean())
                row["predicted_break_even"] = predicted
                row["pre_load_free_gib"] = float(mine["total_gib"].mean())
                if claimed:
                    row["predicted_in_interval"] = bool(row["interval_low"] < predicted <= row["interval_high"])
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def differences(frame: pd.DataFrame, baseline: str, flag: str) -> list[dict]:
    """Each stratum against the baseline stratum, where both have an interval: the measured difference of the
    minimum value that starts, as the range the two intervals allow, in flag units and GiB per GPU (a fraction
    of the free memory before the weights), with the difference the budget predicts next to it."""
    rows = frame.set_index("stratum")
    if baseline not in rows.index or rows.loc[baseline, "state"] != search.CONVERGED:
        return []
    base = rows.loc[baseline]
    out = []
    for stratum, other in rows.iterrows():
        if stratum == baseline or other["state"] != search.CONVERGED:
            continue
        low = other["interval_low"] - base["interval_high"]
        high = other["interval_high"] - base["interval_low"]
        gib = [v for v in (base["pre_load_free_gib"], other["pre_load_free_gib"]) if v is not None and not
               (isinstance(v, float) and math.isnan(v))]
        per_gib = sum(gib) / len(gib) if gib else None
        predicted = None
        if not _missing(base["predicted_break_even"]) and not _missing(other["predicted_break_even"]):
            predicted = other["predicted_break_even"] - base["predicted_break_even"]
        out.append({"stratum": stratum, "baseline": baseline, "flag": flag,
                    "baseline_interval": [base["interval_low"], base["interval_high"]],
                    "interval": [other["interval_low"], other["interval_high"]],
                    "difference_low": low, "difference_high": high,
                    "difference_low_gib": None if per_gib is None else low * per_gib,
                    "difference_high_gib": None if per_gib is None else high * per_gib,
                    "predicted_difference": predicted,
                    "predicted_difference_gib": None if predicted is None or per_gib is None else predicted * per_gib,
                    "summary": _sentence(stratum, baseline, flag, base, other, low, high, per_gib, predicted)})
    return out


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _sentence(stratum, baseline, flag, base, other, low, high, per_gib, predicted) -> str:
    """One line a reader can paste: the measured change as the range both intervals allow, then the prediction."""
    if low > 0:
        verb = "raises"
    elif high < 0:
        verb = "lowers"
    elif low == 0:
        verb = "does not lower"
    else:
        verb = "may not change"
    gib = "" if per_gib is None else f" (≈ {low * per_gib:+.2f} to {high * per_gib:+.2f} GiB per GPU)"
    text = (f"{stratum} {verb} the minimum {flag} that starts, from ({base['interval_low']:g}, "
            f"{base['interval_high']:g}] at {baseline} to ({other['interval_low']:g}, {other['interval_high']:g}]: "
            f"by {low:+.4g} to {high:+.4g}{gib}")
    if predicted is not None:
        text += (f"; the server's own numbers predict {predicted:+.4f}"
                 + ("" if per_gib is None else f" ≈ {predicted * per_gib:+.2f} GiB per GPU"))
    return text


def markdown(found: dict) -> str:
    """The threshold section of report.md and the summary: per stratum its interval and the predicted
    break-even next to it, then each stratum against the baseline's."""
    lines = [f"## Threshold of {md_code(found['flag'])} (searched from {md(found['low'])} to {md(found['high'])}, "
             f"resolution {md(found['resolution'])})", ""]
    for row in found["strata"]:
        if row["state"] == "converged":
            predicted = row["predicted_break_even"]
            side = ("" if predicted is None else f"; the server's own numbers predict the break-even at "
                    f"{predicted:.4f} ({'inside' if row['predicted_in_interval'] else 'OUTSIDE'} the interval)")
            lines.append(f"- **{md(row['stratum'])}**: ready from a value in ({row['interval_low']:g}, "
                         f"{row['interval_high']:g}] ({row['probes']} probed values){side}")
        else:
            lines.append(f"- **{md(row['stratum'])}**: {md(row['state'])} — {md(row['note'])}")
    if found["differences"]:
        lines += [""] + [f"- {md(d['summary'])}" for d in found["differences"]]
    return "\n".join(lines)
