"""Effects against the baseline, hyperfine-style: each level's valid runs against the baseline level's, matched
within strata (the other factors held at one combination), on the memory and time metrics the logs and the
samples give — from the runs the evidence ledger says observe the factor.

Memory is compared like with like: a run's sampled peak only between runs that stood ready (a launch that died
before its KV pool may have freed its memory before the sampler looked: its peak is a lower bound, and says nothing
of what a level costs), and the log's own figures phase by phase — distributed init with the all-reduce buffers,
weights, KV pool, CUDA graphs — each of which only runs that reached that phase have.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd

from launchlab.logparse.parsedlog import rank_order
from launchlab.store.records import LOWER_BOUND, STOOD_READY
from launchlab.verdicts import analysis
from launchlab.verdicts.claims import label, places
from launchlab.verdicts.ledger import Ledger

EFFECT_METRICS = ("dist_init_mem_gib", "weights_mem_gib", "kv_tokens", "kv_gib", "graph_mem_gib", "peak_mem_used_mib",
                  "startup_s")
# a metric sampled while the launch ran (nvidia-smi): a value only of runs that stood ready (records.STOOD_READY)
SAMPLED = ("peak_mem_used_mib",)
SMALL_N = 3
LARGE_SPREAD = 0.10  # sd / |mean|


def run_metrics(runs: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """One row per run: the effect metrics (log values from the run's first rank, the last one printed): rank 0,
    or where the log keys its ranks by pipeline stage, the first of them ("pp0.0")."""
    logged = events[events["field"].isin(EFFECT_METRICS)]
    if not logged.empty:
        first = logged.groupby("run_id")["rank"].agg(lambda ranks: min(ranks, key=rank_order))
        logged = logged[logged["rank"] == logged["run_id"].map(first)]
    wide = logged.pivot_table(index="run_id", columns="field", values="value", aggfunc="last")
    out = runs.set_index("run_id")[["variant", "peak_mem_used_mib", "startup_s"]].join(wide, how="left")
    for metric in EFFECT_METRICS:
        if metric not in out:
            out[metric] = float("nan")
    return out


def _pooled_sd(groups: list[np.ndarray]) -> float | None:
    """The within-stratum sd: strata differ on purpose (another factor's level), so their means are not noise."""
    dof = sum(len(g) - 1 for g in groups)
    if dof <= 0:
        return None
    return math.sqrt(sum(((g - g.mean()) ** 2).sum() for g in groups) / dof)


def factor_effects(led: Ledger, runs: pd.DataFrame, events: pd.DataFrame, baseline: dict[str, str], *,
                   searched: str | None = None) -> tuple[list[dict], list[str]]:
    """For each factor level other than the baseline's and each metric: the level's runs that observe the factor
    (ledger.Ledger.observing) against those at the baseline level, within each stratum (the other factors held at
    one combination) where both sides have a value — for SAMPLED metrics, of the runs that stood ready (a failed
    launch's sampled peak is a lower bound; the notes name the strata and runs left out, and why). Per-stratum
    differences are combined by their unweighted mean; `mean` and `baseline_mean` are the means of the per-stratum
    means, `n` / `baseline_n` count the values compared, `sd` is the within-stratum (pooled) sd of the level's
    values. With two or more values per side, `ci_low` / `ci_high` are the 95 % t-interval of the matched
    differences (a level's run against the baseline's run of the same repetition in the same stratum,
    scipy.stats.ttest_1samp) — where those differences are all the same (`diffs_identical`) the interval is that
    point, which says no spread was seen, not that it is precise; with one, `values` and `baseline_values` are the
    single values and there is no interval. A search's own flag (`searched`) has none: its probes are no sides of a
    comparison (analysis.searched). The runs are the ledger's records, each with its metrics: no frame per stratum."""
    metrics = run_metrics(runs, events).drop(columns="variant").to_dict("index") if len(runs) else {}
    effects, notes = [], []
    for factor in (f for f in led.factors if f != searched):
        rows = [{**r.declared, "repetition": r.repetition, "phase_reached": r.phase_reached,
                 "status": r.outcome.status, **dict.fromkeys(EFFECT_METRICS), **metrics.get(r.run_id, {})}
                for r in led.observing(factor)]
        strata = analysis.strata(rows, factor, list(led.factors))
        levels = dict.fromkeys(r.declared[factor] for r in led.runs if r.declared.get(factor) is not None)
        for level in (lv for lv in levels if lv != baseline[factor]):
            for metric in EFFECT_METRICS:
                used, skipped = _pairs(strata, factor, (level, baseline[factor]), metric=metric)
                if used:
                    effects.append(_effect(used, factor, (level, baseline[factor]), metric))
                pair = f"{metric} of {factor}={level} is not compared with {factor}={baseline[factor]}"
                notes += _not_compared(pair, [s for s in skipped if not s.get("partial")])
                notes += _not_compared(pair.replace(" is not compared with ", " against ") + " is compared over the "
                                       "runs that stood ready", [s for s in skipped if s.get("partial")])
    return effects, notes


def _not_compared(head: str, skipped: list[dict]) -> list[str]:
    """One note per reason a metric was not compared, naming the strata it holds in."""
    by_why: dict[str, list[str]] = {}
    for s in skipped:
        by_why.setdefault(s["why"], []).append(s["stratum"])
    return [head + ("" if strata == ["alone"] else f" at {places(strata)}") + f": {why}"
            for why, strata in by_why.items()]


def _interval(diffs: list[float]) -> tuple[float | None, float | None]:
    """The 95 % t-interval of the mean of matched differences; (d, d) when they are all equal."""
    import warnings

    from scipy.stats import ttest_1samp

    if len(set(diffs)) == 1:
        return diffs[0], diffs[0]  # no spread: the t-interval is the point (scipy warns of precision loss)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ci = ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    return float(ci.low), float(ci.high)


def _by_repetition(mine: list[dict], theirs: list[dict], metric: str) -> list[tuple[float, float]]:
    """A level's values and the baseline level's, paired by repetition."""
    a, b = ({r["repetition"]: r[metric] for r in side} for side in (mine, theirs))
    return [(a[k], b[k]) for k in sorted(a.keys() & b.keys())]


def _effect(used: list[tuple[dict, list[dict], list[dict]]], factor: str, levels: tuple[str, str], metric: str) -> dict:
    """One level against the baseline's on one metric, over the strata both have values in (_pairs)."""
    sides = [(held, np.array([r[metric] for r in t], dtype=float), np.array([r[metric] for r in c], dtype=float))
             for held, t, c in used]
    mean = sum(t.mean() for _, t, _ in sides) / len(sides)
    base_mean = sum(c.mean() for _, _, c in sides) / len(sides)
    diffs = [t.mean() - c.mean() for _, t, c in sides]
    values, base_values = np.concatenate([t for _, t, _ in sides]), np.concatenate([c for _, _, c in sides])
    pairs = [float(a - b) for _, t, c in used for a, b in _by_repetition(t, c, metric)]
    low = high = None
    if min(len(values), len(base_values)) >= 2 and len(pairs) >= 2:
        low, high = _interval(pairs)
    identical = low is not None and len(set(pairs)) == 1  # no spread: the "interval" is the point, not a precision
    return {"factor": factor, "level": levels[0], "baseline_level": levels[1], "metric": metric,
            "n": len(values), "mean": mean, "sd": _pooled_sd([t for _, t, _ in sides]),
            "min": float(values.min()), "max": float(values.max()),
            "baseline_n": len(base_values), "baseline_mean": base_mean,
            "baseline_sd": _pooled_sd([c for _, _, c in sides]),
            "diff": mean - base_mean, "ratio": mean / base_mean if base_mean else None,
            "ci_low": low, "ci_high": high, "pairs": len(pairs), "diffs_identical": identical,
            "values": [float(v) for v in values] if len(values) == 1 else None,
            "baseline_values": [float(v) for v in base_values] if len(base_values) == 1 else None,
            "strata": [label(h) for h, _, _ in sides],
            "stratum_diffs": [{"stratum": label(h), "n": len(t), "baseline_n": len(c), "mean": float(t.mean()),
                               "baseline_mean": float(c.mean()), "diff": float(t.mean() - c.mean())}
                              for h, t, c in sides],
            "signs_disagree": any(d > 0 for d in diffs) and any(d < 0 for d in diffs)}


def effect_warnings(effects: list[dict]) -> list[str]:
    """What to do when n is too small, the spread too large, or strata disagree (one line per level, each
    metric with its own n)."""
    small: dict[str, list[str]] = {}
    warnings = []
    for e in effects:
        where = f"{e['factor']}={e['level']} vs {e['baseline_level']}"
        if e.get("signs_disagree"):
            parts = ", ".join(f"{d['diff']:+,.4g} at {d['stratum']}" for d in e["stratum_diffs"])
            warnings.append(f"{where}, {e['metric']}: the effect changes sign between strata ({parts}); it depends "
                            "on the other factors — read it per stratum, not as one number")
        if min(e["n"], e["baseline_n"]) < SMALL_N:
            small.setdefault(where, []).append(f"{e['metric']} n={e['n']} vs {e['baseline_n']}")
        elif e["sd"] and e["mean"] and e["sd"] / abs(e["mean"]) > LARGE_SPREAD:
            warnings.append(f"{where}, {e['metric']}: the spread (sd {e['sd']:.3g}) is over {LARGE_SPREAD:.0%} of the "
                            "mean; look for a confound (other processes, thermal state) before trusting the difference")
    for where, metrics in small.items():
        warnings.append(f"{where}: few runs per side ({', '.join(metrics)}); too few to tell a small difference from "
                        f"run-to-run noise — raise `repetitions:` to {SMALL_N} or more")
    return sorted(warnings)


def _pairs(strata: list[tuple[dict, list[dict]]], factor: str, levels: tuple[str, str], *, metric: str
           ) -> tuple[list[tuple[dict, list[dict], list[dict]]], list[dict]]:
    """Per stratum where both sides have values of the metric: (held, the level's runs, the baseline's); and, for
    a SAMPLED metric, the strata whose runs that did not stand ready were left out (`partial`: the others were
    compared)."""
    used, skipped = [], []
    for held, group in strata:
        sides = [[r for r in group if r[factor] == level] for level in levels]
        if metric in SAMPLED:
            fell = [[r for r in side if _has(r[metric]) and r["status"] not in STOOD_READY] for side in sides]
            sides = [[r for r in side if r["status"] in STOOD_READY] for side in sides]
        t, c = ([r for r in side if _has(r[metric])] for side in sides)
        if metric in SAMPLED and (fell[0] or fell[1]):
            skipped.append({"stratum": label(held), "partial": bool(t and c), "why": _fell(factor, levels, fell)})
        if t and c:
            used.append((held, t, c))
    return used, skipped


def _has(value) -> bool:
    return not pd.isna(value)  # None, NaN or NA: no value


def _fell(factor: str, levels: tuple[str, str], fell: list[list[dict]]) -> str:
    """Why runs' sampled peaks were left out: each side's runs that did not stand ready, counted by how they ended."""
    def ended(side: list[dict]) -> str:
        counts = Counter((r["status"], r["phase_reached"] if _has(r["phase_reached"]) else "?") for r in side)
        return ", ".join(f"{n} {'run' if n == 1 else 'runs'} {status} in {phase}" for (status, phase), n in counts.items())

    said = "; ".join(f"{factor}={lv}: {ended(side)}" for lv, side in zip(levels, fell, strict=True) if side)
    return f"runs not ready left out ({said}): {LOWER_BOUND}"
