"""The result of a threshold search, from the frames of its run directory: per stratum the interval between the
highest failing and the lowest ready value of the searched flag, next to the break-even the server's own
memory numbers predict (budget.py), and the difference between strata in flag units and GiB per GPU.

The intervals are search.py's own reading of the finished runs (the same function that chose the probes), so
the report and the search cannot disagree about what the runs show. Nothing is claimed for a stratum that is
noisy, non-monotone or not bracketed: its interval columns are empty and its note says why.

The prediction also guides the search (`guides`, which searchbatch.py asks before every round and `table` asks
again over every run): the report says per stratum how many launches it took, how many bisection alone would
have taken on the same outcomes, and whether the prediction held.
"""

from __future__ import annotations

import math
from decimal import Decimal

import pandas as pd

from launchlab import search
from launchlab.escaping import md, md_code
from launchlab.numtext import significant
from launchlab.store.manifest import ManifestEntry
from launchlab.verdicts import budget as budget_mod
from launchlab.verdicts import gpustate

# budget_total_gib: the memory the server kind's break-even argument is a fraction of — its budget's `total_gib`
# (SGLang: the free memory before the weights; vLLM: the GPU's total). pre_load_free_gib holds the same value under
# the name it had when SGLang was the only kind with a budget; it stays for the readers of verdict.json and
# thresholds.parquet (keys are added, never dropped).
COLUMNS = ["stratum", "state", "interval_low", "interval_high", "width", "probes", "runs", "note",
           "predicted_break_even", "predicted_in_interval", "pre_load_free_gib",
           "predicted_n", "predicted_min", "predicted_max", "flagged_probes", "budget_total_gib",
           # issue 30: the launches the stratum took, those bisection alone would have taken on the same outcomes
           # (None where it says nothing: noisy, non-monotone, unfinished), and what became of the prediction
           # (True: every outcome agreed with it; False: one contradicted it, prediction_note names it; None: no
           # prediction, or one not followed, prediction_note says why)
           "launches", "blind_launches", "prediction_held", "prediction_note",
           # the prediction the search followed, and where it came from: "params" (`search: predicted`, a diagnosed
           # log's figure) or "runs" (the stratum's own runs' budget) — prediction_held is of this one, which need
           # not be predicted_break_even (the runs' mean: the H100 search followed 0.0052, its runs said 0.00512)
           "guide_prediction", "guide_from"]
PROBE_KEYS = ("stratum", "value", "runs", "predicted_break_even", "pre_load_free_gib", "free_at_start_mib", "flagged",
              "why", "budget_total_gib")
LEGACY_TOTAL = "pre_load_free_gib"


def observations(runs: pd.DataFrame, planned: list[ManifestEntry], factor: str) -> list[search.Observation]:
    """The finished probe runs (runs.parquet rows) as search.py sees them (search.success); planned: the manifest's
    runs."""
    strata = {p.run_id: p.stratum for p in planned}
    found = []
    for _, row in runs.iterrows():
        stratum, value = strata.get(row["run_id"]), row.get(factor)
        if stratum is None or value is None:
            continue
        found.append(search.Observation(stratum, Decimal(str(value)), row["run_id"],
                                        search.success(row["status"], row.get("failure_reason"))))
    return found



def _float(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


def _predicts(budget: pd.DataFrame, factor: str) -> budget_mod.BreakEven | None:
    """The server kind's break-even where the searched flag is its argument (factor: the flag's name in
    runs.parquet): a break-even in another argument's units says nothing of this flag's threshold."""
    found = budget_mod.break_even_of(budget) if not budget.empty else None
    return found if found is not None and found.arg == factor else None


def probes(runs: pd.DataFrame, planned: list[ManifestEntry], factor: str, budget: pd.DataFrame,
           *, facts: dict[str, dict] | None = None, tolerance_mib: float = 256) -> list[dict]:
    """One record per probed value of each stratum (PROBE_KEYS): its runs, its own predicted break-even (the mean of
    its runs' break-even in the server kind's argument: _predicts), the free memory at its runs' start
    (the least over their GPUs, gpustate.py),
    and whether it disagrees with the stratum's other probes — its prediction off their median by more than the
    drain tolerance in memory (the difference × the memory the argument is a fraction of), or its free memory at the start below
    theirs by more than it: a disturbed probe (another process on the GPU) must not move the prediction unseen."""
    stratum_of = {p.run_id: p.stratum for p in planned}
    budget = budget_mod.own_figures(budget)
    predicts = _predicts(budget, factor)
    predicted = budget.set_index("run_id") if predicts is not None else None
    found: dict[tuple[str, str], dict] = {}
    for _, row in runs.iterrows():
        stratum, value = stratum_of.get(row["run_id"]), row.get(factor)
        if stratum is None or value is None:
            continue
        probe = found.setdefault((stratum, str(value)), {"stratum": stratum, "value": str(value), "runs": [],
                                                         "break_even": [], "total_gib": [], "free": []})
        probe["runs"].append(row["run_id"])
        if predicted is not None and row["run_id"] in predicted.index:
            if not math.isnan(be := float(predicted.loc[row["run_id"], predicts.column])):
                probe["break_even"].append(be)
                probe["total_gib"].append(float(predicted.loc[row["run_id"], "total_gib"]))
        if (free := gpustate.free_at_start((facts or {}).get(row["run_id"]) or {})) is not None:
            probe["free"].append(min(free.values()))
    out = [{"stratum": p["stratum"], "value": p["value"], "runs": p["runs"],
            "predicted_break_even": _mean(p["break_even"]), LEGACY_TOTAL: _mean(p["total_gib"]),
            "free_at_start_mib": min(p["free"]) if p["free"] else None, "flagged": False, "why": "",
            "budget_total_gib": _mean(p["total_gib"])}
           for p in found.values()]
    for stratum in dict.fromkeys(p["stratum"] for p in out):
        _flag([p for p in out if p["stratum"] == stratum], tolerance_mib)
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _flag(mine: list[dict], tolerance_mib: float) -> None:
    """Flag the probes of one stratum that disagree with the others (see probes)."""
    predicted = sorted(p["predicted_break_even"] for p in mine if p["predicted_break_even"] is not None)
    middle = (predicted[(len(predicted) - 1) // 2] + predicted[len(predicted) // 2]) / 2 if len(predicted) > 1 else None
    for p in mine:
        why = []
        if middle is not None and p["predicted_break_even"] is not None and p["budget_total_gib"] is not None:
            off_mib = abs(p["predicted_break_even"] - middle) * p["budget_total_gib"] * 1024
            if off_mib > tolerance_mib:
                why.append(f"its predicted break-even {significant(p['predicted_break_even'])} is {off_mib:.0f} MiB off the "
                           f"median of the stratum's probes ({significant(middle)})")
        others = [q["free_at_start_mib"] for q in mine if q is not p and q["free_at_start_mib"] is not None]
        if p["free_at_start_mib"] is not None and others and max(others) - p["free_at_start_mib"] > tolerance_mib:
            why.append(f"its runs started with {max(others) - p['free_at_start_mib']:.0f} MiB less free GPU memory "
                       "than the other probes'")
        if why:
            p["flagged"] = True
            p["why"] = (f"probe {p['value']} (runs {', '.join(p['runs'])}) disagrees with the stratum's other probes: "
                        + "; ".join(why) + f" (tolerance {tolerance_mib:.0f} MiB)")


def _prediction(stratum: str, budget: pd.DataFrame, predicts: budget_mod.BreakEven, *, stratum_of: dict,
                per_probe: list[dict]) -> dict | None:
    """A stratum's predicted break-even from the runs of its probes that agree (all of them when none does), with
    how many runs it rests on and their spread; None when none of its runs gave the figures."""
    agreeing = {r for p in per_probe if p["stratum"] == stratum and not p["flagged"] for r in p["runs"]}
    mine = budget[budget["run_id"].map(stratum_of) == stratum].dropna(subset=[predicts.column])
    if agreeing & set(mine["run_id"]):
        mine = mine[mine["run_id"].isin(agreeing)]
    if not len(mine):
        return None
    low, high = float(mine[predicts.column].min()), float(mine[predicts.column].max())
    total = float(mine["total_gib"].mean())
    # the mean of equal values can land an ulp outside them (3 × 0.748… / 3): kept between its min and max
    return {"predicted_break_even": min(max(float(mine[predicts.column].mean()), low), high),
            "budget_total_gib": total, LEGACY_TOTAL: total, "predicted_n": len(mine),
            "predicted_min": low, "predicted_max": high}


def guides(strata: list[str], runs: pd.DataFrame, planned: list[ManifestEntry], *, factor: str, budget: pd.DataFrame,
           resolution: Decimal, facts: dict[str, dict] | None = None, tolerance_mib: float = 256,
           prior: search.Guide | None = None) -> dict[str, search.Guide]:
    """Each stratum's prediction as search.py follows it (search.Guide). prior: the params' `search: predicted`
    (a diagnosed log's own numbers), which guides every stratum from the first probe to the last — the runs'
    own figures then only stand beside it in the report (the H100 search: probes at 0.0051 and 0.0053 around the
    log's 0.0052 converged, and the same runs' own mean 0.00512 would have sent the search to the range's ends).
    Without one, the predicted break-even of `table`,
    with a slack of the drain tolerance in flag units (the tolerance over the memory the flag is a fraction of),
    at most half the search's resolution (a 512 MiB tolerance is 0.0036 of an H200, wider than a vLLM search's
    range); not to be followed when a probe of the stratum disagrees with the others (`probes`) or processes
    outside its runs held GPU memory during one (gpustate.foreign_gpu_memory). Empty where the kind predicts no
    break-even of the searched flag."""
    if prior is not None:
        return dict.fromkeys(strata, prior)
    budget = budget_mod.own_figures(budget)
    predicts = _predicts(budget, factor)
    if predicts is None:
        return {}
    stratum_of = {p.run_id: p.stratum for p in planned}
    per_probe = probes(runs, planned, factor, budget, facts=facts, tolerance_mib=tolerance_mib)
    found = {}
    for stratum in strata:
        predicted = _prediction(stratum, budget, predicts, stratum_of=stratum_of, per_probe=per_probe)
        if predicted is None:
            continue
        mine = [p for p in per_probe if p["stratum"] == stratum]
        seen = [r for p in mine for r in p["runs"] if r in (facts or {})]
        distrust = [p["why"] for p in mine if p["flagged"]] + [
            c["detail"] for c in gpustate.foreign_gpu_memory(seen, facts or {}, tolerance_mib)]
        slack = min(Decimal(f"{tolerance_mib / 1024 / predicted['budget_total_gib']:.3g}"), resolution / 2)
        found[stratum] = search.Guide(Decimal(repr(predicted["predicted_break_even"])), slack, "; ".join(distrust))
    return found


def table(bounds: search.Bounds, strata: list[str], runs: pd.DataFrame, planned: list[ManifestEntry], *, factor: str,
          budget: pd.DataFrame, repetitions: int = 1, facts: dict[str, dict] | None = None,
          tolerance_mib: float = 256, prior: search.Guide | None = None) -> pd.DataFrame:
    """One row per stratum (the `thresholds` frame). budget: the server kind's per-run budget recomputation
    (run_id, its break-even column, total_gib), empty when its log gives no numbers. The prediction is the kind's
    break-even (SGLang's `mem_fraction_static`, vLLM's `gpu_memory_utilization`), given only where the searched
    flag is that argument (_predicts). It rests on the runs of the probes that agree
    (probes(); all of them when none does): predicted_n runs, from predicted_min to predicted_max; flagged_probes
    says which disagree and why. The search's guides (`guides`) are asked again over every run: launches,
    blind_launches, prediction_held and prediction_note say what the prediction did for the search.
    facts: provenance.json by run id (free memory at each run's start); tolerance_mib: the drain tolerance; prior:
    the params' predicted break-even, which the search followed (`guides`)."""
    stratum_of = {p.run_id: p.stratum for p in planned}
    budget = budget_mod.own_figures(budget)  # a failed launch's row with borrowed figures predicts nothing new
    predicts = _predicts(budget, factor)
    per_probe = probes(runs, planned, factor, budget, facts=facts, tolerance_mib=tolerance_mib)
    guided = guides(strata, runs, planned, factor=factor, budget=budget, resolution=bounds.resolution, facts=facts,
                    tolerance_mib=tolerance_mib, prior=prior)
    rows = []
    for result in search.step(bounds, strata, observations(runs, planned, factor), repetitions,
                              guides=guided):
        row = _row(result, bounds, repetitions)
        guide = guided.get(result.stratum)
        if guide is not None and not guide.distrust:
            row["guide_prediction"] = _float(guide.prediction)
            row["guide_from"] = "params" if guide.prior else "runs"
        row["flagged_probes"] = "; ".join(p["why"] for p in per_probe if p["stratum"] == result.stratum and p["flagged"])
        predicted = None if predicts is None else _prediction(result.stratum, budget, predicts, stratum_of=stratum_of,
                                                                per_probe=per_probe)
        if predicted is not None:
            row.update(predicted)
            if result.state == search.CONVERGED:
                row["predicted_in_interval"] = bool(row["interval_low"] < predicted["predicted_break_even"]
                                                    <= row["interval_high"])
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def _row(result: search.StratumResult, bounds: search.Bounds, repetitions: int) -> dict:
    """A stratum's row before its prediction: its interval where it converged, and its launches against
    bisection's alone (blind_probes on the same outcomes, each value launched `repetitions` times)."""
    claimed = result.state == search.CONVERGED
    blind = (search.blind_probes(bounds, result.high) if claimed and result.high is not None
             else 2 if result.state == search.NOT_BRACKETED else None)
    return {"stratum": result.stratum, "state": result.state,
            "interval_low": _float(result.low) if claimed else None,
            "interval_high": _float(result.high) if claimed else None,
            "width": _float(result.width) if claimed else None, "probes": result.probes,
            "runs": ", ".join(result.runs), "note": result.note,
            "predicted_break_even": None, "predicted_in_interval": None, LEGACY_TOTAL: None,
            "predicted_n": 0, "predicted_min": None, "predicted_max": None, "flagged_probes": "",
            "budget_total_gib": None,
            "launches": len(result.runs), "blind_launches": None if blind is None else blind * repetitions,
            "prediction_held": {search.HELD: True, search.FAILED: False}.get(result.prediction),
            "prediction_note": result.prediction_note, "guide_prediction": None, "guide_from": None}


def differences(frame: pd.DataFrame, baseline: str, flag: str) -> list[dict]:
    """Each stratum against the baseline stratum, where both have an interval: the measured difference of the
    minimum value that starts, as the range the two intervals allow, in flag units and GiB per GPU (a fraction
    of the memory the kind's budget sizes from: budget_total_gib), with the difference the budget predicts next to it."""
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
        gib = [v for v in (base["budget_total_gib"], other["budget_total_gib"]) if v is not None and not
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
                    "summary": _sentence(stratum, baseline, flag, base, other=other, low=low, high=high, per_gib=per_gib,
                                         predicted=predicted)})
    return out


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def direction(low: float, high: float) -> str:
    """Which way a change moves that lies in the open range (low, high) — both ends excluded, so a range from 0 up
    is a rise: `up`, `down`, or `either` where the range holds 0."""
    return "up" if low >= 0 else "down" if high <= 0 else "either"


def span(low: float, high: float, digits: str = ".4g") -> str:
    """The open range (low, high) of a change as its direction reads (`direction`): sizes without signs for a
    rise or a fall ("0 to 0.007", "0.002 to 0.01" for −0.01 … −0.002), signed where it may go either way."""
    way = direction(low, high)
    if way == "up":
        return f"{low + 0.0:{digits}} to {high + 0.0:{digits}}"  # + 0.0: a -0.0 reads 0
    if way == "down":
        return f"{-high + 0.0:{digits}} to {-low + 0.0:{digits}}"
    return f"{low:+{digits}} to {high:+{digits}}"


def _sentence(stratum, baseline, flag, base, *, other, low, high, per_gib, predicted) -> str:
    """One line a reader can paste: the measured change as the range both intervals allow, in the direction it
    moves ("raises … by 0 to 0.007"), then the prediction."""
    verb = {"up": "raises", "down": "lowers", "either": "may raise or lower"}[direction(low, high)]
    gib = "" if per_gib is None else f" (≈ {span(low * per_gib, high * per_gib, '.2f')} GiB per GPU)"
    text = (f"{stratum} {verb} the minimum {flag} that starts, from ({base['interval_low']:g}, "
            f"{base['interval_high']:g}] at {baseline} to ({other['interval_low']:g}, {other['interval_high']:g}]: "
            f"by {span(low, high)}{gib}")
    if predicted is not None:
        text += (f"; the server's own numbers predict {significant(predicted, signed=True)}"
                 + ("" if per_gib is None else f" ≈ {predicted * per_gib:+.2f} GiB per GPU"))
    return text


def _spread(row: dict) -> str:
    """How many runs the predicted break-even rests on and their spread: `, from n=4 runs (0.7420 … 0.7425)`."""
    n = row.get("predicted_n")
    if not n or _missing(n):
        return ""
    if n == 1:
        return ", from n=1 run"
    return f", from n={n:.0f} runs ({significant(row['predicted_min'])} … {significant(row['predicted_max'])})"


def _cost(row: dict) -> str:
    """What the stratum's answer cost against bisection alone, and whether the prediction held:
    `; 4 launches, bisection alone 9; the prediction held`. Empty for a verdict of a kit before issue 30."""
    if row.get("launches") is None:
        return ""
    blind = row.get("blind_launches")
    text = f"; {row['launches']:.0f} launches" + ("" if _missing(blind) else f", bisection alone {blind:.0f}")
    held = row.get("prediction_held")
    which = _followed(row)
    if held is True and row.get("state") != "converged":  # one side seen: it has not failed yet, it has not held
        return text + f"; no outcome so far contradicts {which}"
    return text + (f"; {which} held" if held is True else f"; {which} failed" if held is False else "")


def _followed(row: dict) -> str:
    """The prediction the search followed: named (search.named) where the params gave it, which the runs' own
    figures said next to it need not match; 'the prediction' where it is those figures (or the verdict is of a kit
    that did not record which)."""
    value, source = row.get("guide_prediction"), row.get("guide_from")
    if source != "params" or _missing(value):
        return "the prediction"
    return search.named(value, prior=True)


def why_open(row: dict) -> str:
    """Why a stratum that did not converge has no interval (its note, or the search stopped unfinished)."""
    return row["note"] or (f"not converged after {row['probes']} probed value(s): the batch stopped before the "
                           "search ended; --resume continues it" if row["state"] == "searching" else row["state"])


def unfinished(found: dict) -> list[str]:
    """One inconclusive reason per stratum without an interval: verdict.json is not conclusive where the report's
    first line says the search found no threshold (the H100 search's record said conclusive under that line)."""
    return [f"the threshold search of {found['flag']} has no interval at {row['stratum']}: {why_open(row)}"
            for row in found["strata"] if row["state"] != search.CONVERGED]


def markdown(found: dict) -> str:
    """The threshold section of report.md and the summary: per stratum its interval and the predicted
    break-even next to it, then each stratum against the baseline's."""
    lines = [f"## Threshold of {md_code(found['flag'])} (searched from {md(found['low'])} to {md(found['high'])}, "
             f"resolution {md(found['resolution'])})", ""]
    for row in found["strata"]:
        if row["state"] == "converged":
            predicted = row["predicted_break_even"]
            side = ("" if _missing(predicted) else f"; the server's own numbers predict the break-even at "
                    f"{significant(predicted)} ({'inside' if row['predicted_in_interval'] else 'OUTSIDE'} the interval)"
                    f"{_spread(row)}")
            lines.append(f"- **{md(row['stratum'])}**: ready from a value in ({row['interval_low']:g}, "
                         f"{row['interval_high']:g}] ({row['probes']} probed values{_cost(row)}){side}")
        else:
            note = why_open(row) if row["note"] or row["state"] == search.SEARCHING else ""
            predicted = row.get("predicted_break_even")
            if predicted is not None and not _missing(predicted):
                note += f"; the server's own numbers predict the break-even at {significant(predicted)}{_spread(row)}"
            cost = _cost(row).removeprefix("; ")
            lines.append(f"- **{md(row['stratum'])}**: {md(row['state'])}" + (f" — {md(note)}" if note else "")
                         + (f" ({cost})" if cost else ""))
        if row.get("flagged_probes"):
            lines.append(f"  - **A probe disagrees**, left out of the prediction: {md(row['flagged_probes'])}")
        if row.get("prediction_held") is False:
            lines.append(f"  - **The prediction failed**, so the search bisected: {md(row['prediction_note'])}")
        elif row.get("prediction_note"):
            lines.append(f"  - The prediction was not followed (the search bisected): {md(row['prediction_note'])}")
    if found["differences"]:
        lines += [""] + [f"- {md(d['summary'])}" for d in found["differences"]]
    return "\n".join(lines)
