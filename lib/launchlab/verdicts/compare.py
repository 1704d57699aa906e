"""Two run directories compared, before and after: pure, their frames and records in, a BeforeAfter record out.

The order of reasoning: whether the two ask the same question (the same factors with the same levels, the same
searched flag, the same server kind) — where they do not, nothing is compared per variant and the record says
why; what differs between them outside the factors (the confound rules of one batch, confounds.py, over the runs
of both, and the resolved params); per variant the launch outcome (ready / valid runs, Fisher's exact test), the
KV tokens, the peak memory and the server kind's break-even (the difference of the means, with an interval); what
each verdict says decides the launch; and, when both are threshold searches, each stratum's threshold.

The intervals are Welch's t intervals of the difference of two means (scipy.stats.ttest_ind, equal_var=False),
not a bootstrap: the runs of two batches are independent samples (no run of one is matched with a run of the
other), their spreads need not be equal (another install, another driver), and a variant has a few repetitions —
with 2 or 3 values a side a bootstrap resamples only a handful of distinct sets and its percentile interval is
far too narrow, where the t interval is as wide as so few runs warrant.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass

import pandas as pd

from launchlab import __version__ as KIT_VERSION
from launchlab.store.comparerecord import (
    Batch,
    BeforeAfter,
    DecisionChange,
    Difference,
    Question,
    Shift,
    ThresholdShift,
    VariantOutcome,
)
from launchlab.store.manifest import Manifest, ManifestSearch
from launchlab.store.records import LOWER_BOUND, STOOD_READY
from launchlab.store.verdictrecord import Verdict
from launchlab.verdicts import analysis, budget, comparesentences, confounds, derivedargs, effects, thresholds
from launchlab.verdicts.ledger import Ledger

METRICS = {"kv_tokens": "tokens", "peak_mem_used_mib": "MiB"}  # per run: effects.run_metrics
# what the resolved params of the two may differ in without it being a difference outside the factors: their
# names and the question's words (notes of the question), and what the question compares itself
PARAMS_SKIPPED = ("experiment", "question", "baseline", "repetitions", "search", "runs")


@dataclass(frozen=True, eq=False)
class Side:
    """One run directory as the comparison reads it (reporting/compare.py loads it)."""

    label: str  # "before" or "after"
    run_dir: str
    manifest: Manifest
    verdict: Verdict
    factors: tuple[str, ...]  # the factors, and a search's flag (a column of runs.parquet)
    runs: pd.DataFrame  # runs.parquet
    events: pd.DataFrame  # events.parquet
    ledger: Ledger  # the evidence of each run (ledger.build): which are observations, which ran as declared
    budget: pd.DataFrame  # the server kind's budget per run (budget.recompute; empty without one)
    facts: dict[str, dict]  # provenance.json by run id
    parsed: dict[str, dict]  # parsed.json by run id
    settings: dict  # experiment.yaml: the resolved params, secrets masked
    server_kind: str
    declared_args: frozenset[str] = frozenset()  # the server arguments the factors (and a search) set

    @property
    def search(self) -> ManifestSearch | None:
        return self.manifest.search

    def valid(self) -> pd.DataFrame:
        """The runs that are observations of the server and ran what the rest of their variant ran (the ledger's),
        with their factor columns: a duplicate log, a censored launch, a run whose level the server overrode alone
        is none."""
        odd = {r.run_id for r in self.ledger.ran_otherwise()}
        kept = {r.run_id for r in self.ledger.observations if r.run_id not in odd}
        return self.runs[self.runs["run_id"].isin(kept)]

    def named(self, run_id: str) -> str:
        return f"{self.label}:{run_id}"


def compare(before: Side, after: Side) -> BeforeAfter:
    """The comparison of `after` against `before` (see the module's docstring)."""
    asked = question(before, after)
    found = differences(before, after)
    if not asked.same:
        return _record(before, after, asked, found)
    outcomes = variant_outcomes(before, after)
    compared = {o.variant for o in outcomes}
    only_before = [v for v in _variants(before) if v not in compared]
    only_after = [v for v in _variants(after) if v not in compared]
    return _record(before, after, asked, found, outcomes=outcomes, unchanged=_unchanged(outcomes),
                   shifts=[*metric_shifts(before, after), *break_even_shifts(before, after)],
                   thresholds=threshold_shifts(before, after), only=(only_before, only_after))


def _record(before: Side, after: Side, asked: Question, found: list[Difference], *, outcomes=(), unchanged=None,
            shifts=(), thresholds=(), only=((), ())) -> BeforeAfter:
    """The record, with its sentences and warnings."""
    record = BeforeAfter(
        before=batch(before), after=batch(after), comparable=asked.same, question=asked, differences=found,
        outcomes=list(outcomes), outcomes_unchanged=unchanged,
        decisions=decisions(before, after) if asked.same else [], shifts=list(shifts),
        break_even=_break_even(before, after), thresholds=list(thresholds),
        variants_before_only=list(only[0]), variants_after_only=list(only[1]), summary=[], warnings=[],
        kit_version=KIT_VERSION)
    return dataclasses.replace(record, summary=comparesentences.summary(record), warnings=warnings(record, before, after))


def _unchanged(outcomes: list[VariantOutcome]) -> bool | None:
    """True: every variant both ran has the same share of ready runs; False: some variant's changed; None: some
    could not be compared (no valid run on a side) and the others are unchanged, or there is none."""
    if any(o.changed for o in outcomes):
        return False
    return True if outcomes and all(o.changed is False for o in outcomes) else None


def batch(side: Side) -> Batch:
    v, m = side.verdict, side.manifest
    return Batch(label=side.label, run_dir=side.run_dir, experiment=m.experiment, created_at=m.created_at,
                 kit_version=m.kit_version, server_kind=side.server_kind, imported=m.imported, simulated=m.simulated,
                 search=m.search is not None, runs=len(m.run_ids), valid_runs=len(side.valid()),
                 controlled=v.controlled, conclusive=v.conclusive, confounds=len(v.confounds),
                 outcome_factors=list(v.outcome_factors), headline=v.headline(),
                 failure_mode_factors=list(v.failure_mode_factors))


# ---------------------------------------------------------------------------------------------------------
# The question


def question(before: Side, after: Side) -> Question:
    """The same factors with the same levels, the same searched flag and server kind; what differs otherwise."""
    a, b = before.manifest, after.manifest
    why = [f"factor {f} only {side}" for f, side in
           [*((f, "before") for f in a.factors if f not in b.factors), *((f, "after") for f in b.factors if f not in a.factors)]]
    why += [f"the levels of {f} differ: {', '.join(a.factors[f])} before, {', '.join(b.factors[f])} after"
            for f in a.factors if f in b.factors and list(a.factors[f]) != list(b.factors[f])]
    if before.server_kind != after.server_kind:
        why.append(f"another server: {before.server_kind} before, {after.server_kind} after (their logs, budgets and "
                   "break-evens are not the same quantities)")
    why += _search_question(a.search, b.search)
    notes = [f"{what} differs: {confounds.as_written(x)} before, {confounds.as_written(y)} after" for what, x, y in
             (("the experiment's name", a.experiment, b.experiment), ("the question's text", a.question, b.question),
              ("the baseline", a.baseline, b.baseline)) if x != y]
    if a.search and b.search:
        notes += [f"the search's {k} differs: {getattr(a.search, k)} before, {getattr(b.search, k)} after"
                  for k in ("low", "high", "resolution", "repetitions") if getattr(a.search, k) != getattr(b.search, k)]
    if (a.kit_version or "?") != (b.kit_version or "?"):
        notes.append(f"another launchlab version made them: {a.kit_version} before, {b.kit_version} after")
    return Question(same=not why, factors={f: list(levels) for f, levels in a.factors.items()}, differences=why,
                    notes=notes)


def _search_question(a: ManifestSearch | None, b: ManifestSearch | None) -> list[str]:
    if a is None and b is None:
        return []
    if a is None or b is None:
        return [f"a threshold search {'after' if a is None else 'before'} only, a fixed plan "
                f"{'before' if a is None else 'after'}"]
    if a.flag != b.flag:
        return [f"the searched flag differs: {a.flag} before, {b.flag} after"]
    if a.outcome != b.outcome:
        return [f"the searched outcome differs: {a.outcome} before, {b.outcome} after"]
    return []


# ---------------------------------------------------------------------------------------------------------
# What differs outside the factors


def differences(before: Side, after: Side) -> list[Difference]:
    """The confound rules of one batch over the valid runs of both (their provenance, what their logs state, the
    server arguments no factor declares and that do not follow from the levels over the runs of both: an argument
    that follows a level in each batch alone but changed between them is a difference), then the resolved params;
    each named with the sides whose own runs differ in it too."""
    ids = {s.label: [s.named(r) for r in s.valid()["run_id"]] for s in (before, after)}
    facts = {s.named(r): f for s in (before, after) for r, f in s.facts.items()}
    parsed = {s.named(r): p for s in (before, after) for r, p in s.parsed.items()}
    levels = {s.named(r): lv for s in (before, after)
              for r, lv in derivedargs.levels_of(s.runs, list(s.factors)).items()}
    declared = {*before.declared_args, *after.declared_args}

    def run_rules(names: list[str]) -> list[dict]:
        with_facts = [r for r in names if r in facts]
        found = [c for check in confounds.PROVENANCE_CHECKS for c in check(with_facts, facts)]
        derived = {d["arg"] for d in derivedargs.find(names, parsed, declared, levels)}
        return found + confounds.log_differences(names, parsed, declared | derived, facts)

    within = {label: {_what(c) for c in run_rules(names)} for label, names in ids.items()}
    out = []
    for c in run_rules(ids["before"] + ids["after"]):
        what = _what(c)
        out.append(Difference(kind=c["kind"], what=what, detail=_sides_named(c["detail"], ids),
                              before_runs=_of_side(c["runs"], "before"), after_runs=_of_side(c["runs"], "after"),
                              within=[label for label in ids if what in within[label]]))
    return out + params_differences(before.settings, after.settings)


def _what(found: dict) -> str:
    """The fact a confound names: its text up to "differs" ("server version (from the server log)")."""
    head = re.split(r" differs?\b", found["detail"], maxsplit=1)[0]
    return head if head != found["detail"] else found["kind"]


def _sides_named(detail: str, ids: dict[str, list[str]]) -> str:
    """A confound's text with every run of one side, listed in a row, said as `all N runs before`."""
    for label, names in ids.items():
        if names:
            every = ", ".join(names)
            detail = re.sub(re.escape(every) + r"(?![\w.:-])", f"all {len(names)} runs {label}", detail)
    return detail


def _of_side(runs: list[str], label: str) -> list[str]:
    return [r.split(":", 1)[1] for r in runs if r.startswith(label + ":")]


def _flat(settings: object, prefix: str = "") -> dict[str, str]:
    """The resolved params as `dotted.path: value` (lists whole, as JSON)."""
    if not isinstance(settings, dict):
        return {prefix: settings if isinstance(settings, str) else json.dumps(settings)}
    out: dict[str, str] = {}
    for key, value in settings.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def params_differences(before: dict, after: dict) -> list[Difference]:
    """What the two params files (as resolved in experiment.yaml) set differently, outside what the question
    compares: a host's settings, the server's command and environment, what a level's flags are."""
    a = _flat({k: v for k, v in before.items() if k not in PARAMS_SKIPPED})
    b = _flat({k: v for k, v in after.items() if k not in PARAMS_SKIPPED})
    out = []
    for key in sorted(a.keys() | b.keys()):
        if a.get(key) != b.get(key):
            x, y = confounds.shown([confounds.as_written(a.get(key)), confounds.as_written(b.get(key))])
            out.append(Difference(kind="params", what=f"params {key}", detail=f"params {key} differs: {x} before, "
                                  f"{y} after", before_runs=[], after_runs=[]))
    return out


# ---------------------------------------------------------------------------------------------------------
# Per variant


def _variants(side: Side) -> list[str]:
    return list(dict.fromkeys(side.runs["variant"])) if len(side.runs) else []


def _counts(side: Side) -> dict[str, dict]:
    """Per variant: valid and ready runs, the failure reasons, the levels."""
    valid = side.valid()
    out = {}
    for variant, group in valid.groupby("variant", sort=False):
        reasons = sorted({r for r in group.get("failure_reason", pd.Series(dtype=object)).dropna() if r})
        out[variant] = {"valid": len(group), "ready": int((group["status"] == "ready").sum()), "reasons": reasons,
                        "levels": {f: str(group[f].iloc[0]) for f in side.factors if f in group}}
    return out


def variant_outcomes(before: Side, after: Side) -> list[VariantOutcome]:
    """Each variant both ran: ready / valid runs on each side and Fisher's exact test (two-sided)."""
    a, b = _counts(before), _counts(after)
    out = []
    for variant in [v for v in _variants(before) if v in _variants(after)]:
        x = a.get(variant, {"valid": 0, "ready": 0, "reasons": [], "levels": {}})
        y = b.get(variant, {"valid": 0, "ready": 0, "reasons": [], "levels": {}})
        p = changed = None
        if x["valid"] and y["valid"]:
            p = analysis.exact_p(y["ready"], y["valid"], x["ready"], x["valid"])
            changed = x["ready"] * y["valid"] != y["ready"] * x["valid"]
        out.append(VariantOutcome(variant=variant, levels=x["levels"] or y["levels"], before_ready=x["ready"],
                                  before_valid=x["valid"], after_ready=y["ready"], after_valid=y["valid"], p_value=p,
                                  significant=None if p is None else p < analysis.SIGNIFICANCE, changed=changed,
                                  before_reasons=x["reasons"], after_reasons=y["reasons"]))
    return out


def welch(before: list[float], after: list[float]) -> tuple[float | None, float | None, str]:
    """The 95 % interval of mean(after) − mean(before): Welch's t interval; the exact difference when neither side
    varies; none with fewer than two values a side."""
    if min(len(before), len(after)) < 2:
        return None, None, "none"
    if len(set(before)) == 1 and len(set(after)) == 1:
        diff = after[0] - before[0]
        return diff, diff, "no spread"
    from scipy.stats import ttest_ind  # here: scipy.stats costs a second, and only a comparison needs it

    ci = ttest_ind(after, before, equal_var=False).confidence_interval(0.95)
    return float(ci.low), float(ci.high), "welch"


def shift(variant: str, metric: str, unit: str, *, before: list[float], after: list[float],
          not_compared: str = "", left_out: list[str] | None = None) -> Shift:
    """One variant's metric: each side's values, the difference of the means and its interval (welch); where it is
    `not_compared` (why), each side's values alone; `left_out`: the runs whose values were not taken, and why."""
    def sd(values: list[float]) -> float | None:
        return float(pd.Series(values).std()) if len(values) > 1 else None

    mean_a = sum(before) / len(before) if before else None
    mean_b = sum(after) / len(after) if after else None
    diff = mean_b - mean_a if mean_a is not None and mean_b is not None and not not_compared else None
    low, high, how = welch(before, after) if not not_compared else (None, None, "none")
    return Shift(variant=variant, metric=metric, unit=unit, before_n=len(before), after_n=len(after),
                 before_mean=mean_a, after_mean=mean_b, before_sd=sd(before), after_sd=sd(after), diff=diff,
                 ratio=mean_b / mean_a if diff is not None and mean_a else None, ci_low=low, ci_high=high,
                 interval=how, before_values=before, after_values=after, not_compared=not_compared,
                 left_out=left_out or [])


def _values(frame: pd.DataFrame, variant: str, column: str) -> list[float]:
    if frame.empty or column not in frame:
        return []
    return [float(v) for v in frame.loc[frame["variant"] == variant, column] if not pd.isna(v)]


def metric_shifts(before: Side, after: Side) -> list[Shift]:
    """KV tokens (the log's first rank) and peak GPU memory (nvidia-smi), per variant, over the valid runs with a
    value: a variant whose runs give none on a side (failed before the KV cache, imported without a capture) has
    no row for that metric. A sampled peak counts only of runs that stood ready (records.STOOD_READY): the others
    are `left_out`, and a side with none of its own is `not_compared`."""
    judged = [s.ledger.judged(s.valid()).set_index("run_id") for s in (before, after)]
    a, b = (effects.run_metrics(j.reset_index(), s.events).join(j["status"]).reset_index()
            for j, s in zip(judged, (before, after), strict=True))
    out = []
    for variant in [v for v in _variants(before) if v in _variants(after)]:
        for metric, unit in METRICS.items():
            x, y = _values(a, variant, metric), _values(b, variant, metric)
            if not (x or y):
                continue
            if metric not in effects.SAMPLED:
                out.append(shift(variant, metric, unit, before=x, after=y))
                continue
            (x, fell_x), (y, fell_y) = _stood(a, variant, metric, before), _stood(b, variant, metric, after)
            sides = " and ".join(name for name, values in (("before", x), ("after", y)) if not values)
            why = "" if x and y else f"no run {sides} stood ready ({', '.join(fell_x + fell_y)}): {LOWER_BOUND}"
            out.append(shift(variant, metric, unit, before=x, after=y, not_compared=why, left_out=fell_x + fell_y))
    return out


def _stood(frame: pd.DataFrame, variant: str, metric: str, side: Side) -> tuple[list[float], list[str]]:
    """A variant's sampled values of the runs that stood ready, and the others named (side:run, how they ended)."""
    rows = frame[(frame["variant"] == variant) & frame[metric].notna()]
    stood = rows["status"].isin(STOOD_READY)
    fell = [f"{side.named(r.run_id)} ({r.status})" for r in rows[~stood].itertuples()]
    return [float(v) for v in rows.loc[stood, metric]], fell


def _break_even(before: Side, after: Side) -> dict | None:
    found = [budget.break_even_of(s.budget) for s in (before, after) if not s.budget.empty]
    if len(found) != 2 or None in found or found[0] != found[1]:
        return None
    return {"arg": found[0].arg, "column": found[0].column, "formula": found[0].formula}


def break_even_shifts(before: Side, after: Side) -> list[Shift]:
    """The server kind's break-even per variant (rows recomputed from a run's own log: budget.own_figures)."""
    found = _break_even(before, after)
    if found is None:
        return []
    a, b = budget.own_figures(before.budget), budget.own_figures(after.budget)
    a, b = a[a["run_id"].isin(set(before.valid()["run_id"]))], b[b["run_id"].isin(set(after.valid()["run_id"]))]
    out = []
    for variant in [v for v in _variants(before) if v in _variants(after)]:
        x, y = _values(a, variant, found["column"]), _values(b, variant, found["column"])
        if x or y:
            out.append(shift(variant, found["column"], found["arg"], before=x, after=y))
    return out


# ---------------------------------------------------------------------------------------------------------
# Decisions and thresholds


def decisions(before: Side, after: Side) -> list[DecisionChange]:
    """What each factor did to the launch outcome in each verdict."""
    a, b = before.verdict.factors, after.verdict.factors
    names = list(dict.fromkeys([*a, *b]))
    return [DecisionChange(factor=f, before=a[f].status if f in a else None, after=b[f].status if f in b else None,
                           changed=(a[f].status if f in a else None) != (b[f].status if f in b else None))
            for f in names]


def _interval(row: dict | None) -> list[float] | None:
    if not row or row.get("state") != "converged" or row.get("interval_low") is None:
        return None
    return [float(row["interval_low"]), float(row["interval_high"])]


def threshold_shifts(before: Side, after: Side) -> list[ThresholdShift]:
    """Per stratum of two searches of one flag: each interval, and the shift of the minimum value that starts as
    the range both intervals allow (after's low end − before's high end … after's high end − before's low end)."""
    ta, tb = before.verdict.thresholds, after.verdict.thresholds
    if not ta or not tb:
        return []
    rows_a = {r["stratum"]: r for r in ta.get("strata") or []}
    rows_b = {r["stratum"]: r for r in tb.get("strata") or []}
    out = []
    for stratum in dict.fromkeys([*rows_a, *rows_b]):
        x, y = rows_a.get(stratum), rows_b.get(stratum)
        ia, ib = _interval(x), _interval(y)
        low, high = (ib[0] - ia[1], ib[1] - ia[0]) if ia and ib else (None, None)
        out.append(ThresholdShift(
            stratum=stratum, flag=ta["flag"], before_state=(x or {}).get("state"), after_state=(y or {}).get("state"),
            before_interval=ia, after_interval=ib, shift_low=low, shift_high=high,
            before_predicted=_number((x or {}).get("predicted_break_even")),
            after_predicted=_number((y or {}).get("predicted_break_even")),
            summary=_threshold_sentence(stratum, ta["flag"], (ia, ib), (low, high), states=(x, y))))
    return out


def _number(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _threshold_sentence(stratum: str, flag: str, intervals, shifted, *, states) -> str:
    (ia, ib), (low, high) = intervals, shifted
    if ia is None or ib is None:
        said = [f"{label}: {(row or {}).get('state') or 'not searched'}" for label, row in zip(("before", "after"),
                                                                                              states, strict=True)]
        return f"{stratum}: no interval on both sides to compare ({'; '.join(said)})"
    # a threshold lies in (low, high]: two intervals that do not overlap tell the direction, however close
    verb = {"up": "moved up", "down": "moved down",
            "either": "may have moved up or down (the intervals overlap)"}[thresholds.direction(low, high)]
    return (f"{stratum}: the minimum {flag} that starts {verb}, from ({ia[0]:g}, {ia[1]:g}] before to "
            f"({ib[0]:g}, {ib[1]:g}] after: by {thresholds.span(low, high)} (both ends excluded)")


# ---------------------------------------------------------------------------------------------------------
# The sentences


def warnings(record: BeforeAfter, before: Side, after: Side) -> list[str]:
    """What limits the comparison: a side that is not controlled or conclusive by itself, few runs, imported runs."""
    out = []
    for b in (record.before, record.after):
        if b.confounds:
            out.append(f"{b.label} is not a controlled comparison by itself ({b.confounds} confound(s) among its own "
                       f"runs; see its verdict.json): a change between the two may be one of them")
        if b.imported:
            out.append(f"{b.label} holds imported runs: the kit did not watch them (installed files, environment, "
                       "GPU state not observed), so fewer differences can be seen")
    if record.comparable and (record.variants_before_only or record.variants_after_only) and not before.search:
        out.append("some variants ran on one side only and are not compared: "
                   + "; ".join([*(f"{v} (before)" for v in record.variants_before_only),
                                *(f"{v} (after)" for v in record.variants_after_only)]))
    few = sorted({s.variant for s in record.shifts if 0 < min(s.before_n, s.after_n) < effects.SMALL_N})
    if few:
        out.append(f"few runs per side for the memory figures of {len(few)} variant(s) (fewer than "
                   f"{effects.SMALL_N}): an interval is wide or missing — raise `repetitions:` to tell a small "
                   "change from run-to-run noise")
    return out
