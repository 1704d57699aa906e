"""Decisions: whether changing only one factor changes the launch's outcome, stratum by stratum, from the runs the
evidence ledger (ledger.py) says are observations of it; and the outcome and memory tables of the report.

Only valid observations count. A run that ended in a kit `error`, that was interrupted, that the manifest lists
but that never finished, that repeats another run's log, or that was not ready by its deadline without an error
(censored) is not an observation of the server's outcome: it is excluded from every comparison, and counted and
named instead; a run whose level of a factor did not take effect is no observation of that factor. Comparisons
are matched: a factor's levels are compared within strata (one combination of the other factors' levels at a
time); a stratum where fewer than two levels have valid runs is not compared, and is named so (claims.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter

import pandas as pd

from launchlab.store.manifest import ManifestEntry
from launchlab.store.records import KIT_STATUSES, STOOD_READY
from launchlab.store.verdictrecord import (
    CHANGES,
    CHANGES_HOW,
    CONFOUNDED,
    DECIDES,
    DECIDES_IN_SOME,
    DISAGREE,
    FLAKY,
    NEUTRAL,
    NO_CHANGE,
    NOT_COMPARED,
    NOT_VARIED,
    OUTCOME,
    SEARCHED,
    SETTLED,
    UNDETERMINED,
    Comparison,
    Decision,
    DecisionStatus,
    Stratum,
)
from launchlab.verdicts import claims, ledger
from launchlab.verdicts.ledger import (  # noqa: F401 (the kinds of exclusion, named where observations are read)
    CENSORED,
    CONTRADICTED,
    DUPLICATE,
    INTERRUPTED,
    KIT_ERROR,
    MISFILED,
    MISSING,
    NOT_FINISHED,
    NOT_RUN_ALONE,
    READINESS,
    UNKNOWN_OUTCOME,
)

# ---------------------------------------------------------------------------------------------------------
# Which runs are observations


def observations(runs: pd.DataFrame, factors: list[str], planned: list[ManifestEntry] | None = None, *,
                 missing_why: str = NOT_FINISHED, parsed: dict[str, dict] | None = None) -> pd.DataFrame:
    """Every planned run (finished or not) with `valid` and, for the others, `invalid_kind` and `invalid_detail`:
    the ledger's frame without the level checks (ledger.build; parsed: parsed.json by run id, for the logs'
    identity)."""
    return ledger.build(runs, factors, planned=planned, parsed=parsed, missing_why=missing_why).frame(runs)


def excluded(obs: pd.DataFrame) -> list[dict]:
    """The runs that are not observations, with why."""
    rows = obs[~obs["valid"]]
    return [{"run_id": r.run_id, "variant": r.variant, "why": r.invalid_kind, "detail": r.invalid_detail or ""}
            for r in rows.itertuples()]


_NOUNS = {KIT_ERROR: "kit error", INTERRUPTED: "interrupted run", MISSING: "missing run",
          UNKNOWN_OUTCOME: "imported log of unknown outcome", MISFILED: "misfiled imported log",
          CONTRADICTED: "run of another level", DUPLICATE: "duplicate log",
          CENSORED: "run not ready by its deadline without an error (censored: slow, not failed)",
          READINESS: "run of disagreeing ready signals (its ready line and the kit's probe)"}


def _counted(kind: str, n: int) -> str:
    noun = _NOUNS[kind]
    if n == 1:
        return f"1 {noun}"
    head, _, tail = noun.partition(" of ")  # "runs of another level", not "run of another levels"
    return f"{n} {head}s" + (f" of {tail}" if tail else "")


def tally(rows: list[dict]) -> str:
    """'4 kit errors — the sampler could not start: …; 2 missing' for invalid runs (the ledger's frame's rows)."""
    parts = []
    for kind, group in _grouped(rows, ["invalid_kind"]).items():
        text = _counted(kind[0], len(group))
        details = Counter(d if isinstance(d := r["invalid_detail"], str) else "" for r in group).most_common()
        if kind[0] == CONTRADICTED:
            what = details[0][0] if len(details) == 1 and "contradicts its" not in details[0][0] else ""
            text += (f" — the server's log shows another level than the run's{f' ({what})' if what else ''}: "
                     f"{', '.join(r['run_id'] for r in group)}")
        elif kind[0] in (KIT_ERROR, UNKNOWN_OUTCOME, MISFILED, DUPLICATE, CENSORED, READINESS) and details[0][0]:
            text += f" — {details[0][0][:200]}"
        parts.append(text)
    return "; ".join(parts) or "no runs planned"


def _grouped(rows: list[dict], columns: list[str]) -> dict[tuple, list[dict]]:
    """The rows by their values of `columns`, in the order of each key's first row; a row missing one is in none (as
    pandas' groupby leaves it out)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = tuple(row[c] for c in columns)
        if not any(pd.isna(v) for v in key):
            groups.setdefault(key, []).append(row)
    return groups


def strata(rows: list[dict], factor: str, factors: list[str]) -> list[tuple[dict[str, str], list[dict]]]:
    """The planned combinations of the other factors' levels, each with its runs (valid or not)."""
    others = [f for f in factors if f != factor]
    if not others:
        return [({}, rows)]
    return [(dict(zip(others, key, strict=True)), group) for key, group in _grouped(rows, others).items()]


# ---------------------------------------------------------------------------------------------------------
# Outcomes


# what the outcomes table's peak column holds, said under it in report.md (summary.ipynb says it above the table)
READY_PEAK = ("The peak memory is of the runs that stood ready, blank where none did or no GPU trace was kept: a "
              "launch that failed may free its memory before the GPU sampler sees it, so its peak is a lower bound.")


def outcomes(obs: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    """One row per variant of the observations (the ledger's frame): how many runs ended in each status (and were
    missing), and why the failed ones failed. `outcome` counts ready runs among the valid ones; the peak memory is
    of the valid runs that stood ready (records.STOOD_READY), blank where none did."""
    statuses = KIT_STATUSES + (("unknown",) if (obs["status"] == "unknown").any() else ())  # imported logs only
    rows = []
    for variant, group in obs.groupby("variant", sort=False):
        valid = group[group["valid"]]
        counts = group["status"].value_counts()
        reasons = sorted({r for r in group.get("failure_reason", pd.Series(dtype=object)).dropna()})
        row = {"variant": variant, **{f: group[f].iloc[0] for f in factors}, "n": len(group)}
        row.update({s: int(counts.get(s, 0)) for s in statuses})
        row["missing"] = int((group["invalid_kind"] == MISSING).sum())
        row["outcome"] = (f"{int((valid['status'] == 'ready').sum())}/{len(valid)} ready" if len(valid)
                          else "no valid run") + _left_out(group)
        row["failure_reasons"] = ", ".join(reasons)
        row["startup_s_mean"] = valid["startup_s"].mean() if len(valid) else math.nan
        # only where the server stood ready and held its memory: a failed launch's sampled peak is a lower bound
        stood = valid[valid["status"].isin(STOOD_READY)]
        row["ready_peak_mem_used_mib_max"] = stood["peak_mem_used_mib"].max() if len(stood) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _left_out(group: pd.DataFrame) -> str:
    """What the status counts beside `outcome` hold that it does not: the runs left out, other than missing ones
    (their own column) — a misfiled imported log counted `ready` beside "0/1 ready" (issue 28)."""
    left = group[~group["valid"] & (group["invalid_kind"] != MISSING)]
    if left.empty:
        return ""
    return " (left out: " + ", ".join(_counted(k, len(g)) for k, g in left.groupby("invalid_kind", sort=False)) + ")"


def _level_outcomes(group: list[dict], factor: str, levels: list[str]) -> dict[str, dict]:
    out = {}
    for level in levels:
        runs = [r for r in group if r[factor] == level]
        valid = [r for r in runs if r["valid"]]
        labels = [ledger.outcome_label(r.get("status"), r.get("failure_reason"), r.get("failure_phase")) for r in valid]
        out[level] = {"planned": len(runs), "valid": len(valid), "ready": sum(r["status"] == "ready" for r in valid),
                      "invalid": tally([r for r in runs if not r["valid"]]) if len(valid) < len(runs) else "",
                      "runs": [r["run_id"] for r in valid], "odd_runs": _odd_runs(valid),
                      "outcomes": dict(sorted(Counter(labels).items()))}
    return out


def _odd_runs(valid: list[dict]) -> list[dict]:
    """The repetitions of one level that disagree with the others (the fewer side; on a tie the runs that
    were not ready), with how each ended: empty when they agree."""
    ready = [r for r in valid if r["status"] == "ready"]
    if len(ready) in (0, len(valid)):
        return []
    odd = ready if len(ready) < len(valid) - len(ready) else [r for r in valid if r["status"] != "ready"]
    return [{"run_id": r["run_id"], "status": r["status"],
             "reason": why if isinstance(why := r.get("failure_reason"), str) else None,
             "message": said[:200] if isinstance(said := r.get("failure_message"), str) and said else None}
            for r in odd]


# the exact test of a decision: ready / not ready per level in one stratum (Fisher's, two-sided)
SIGNIFICANCE = 0.05


# cached: a verdict asks the same few tables over and over (each stratum, each level, and settling_repetitions up to a
# hundred tables per comparison), and one test costs about a millisecond of scipy
@functools.lru_cache(maxsize=4096)
def exact_p(ready: int, valid: int, ref_ready: int, ref_valid: int) -> float:
    from scipy.stats import fisher_exact  # imported here: scipy.stats costs a second, and only verdicts need it

    return float(fisher_exact([[ready, valid - ready], [ref_ready, ref_valid - ref_ready]]).pvalue)


def settling_repetitions(share: float, reference_share: float, most: int = 100) -> int | None:
    """The fewest repetitions per side at which these shares of ready runs would make Fisher's exact test
    significant at 0.05 (1 against 0, every run ready on one side and none on the other: 2 vs 2 gives p = 0.33, 4
    vs 4 p = 0.029, so 4). None when the shares are equal (no number of runs tells them apart) or it takes more
    than `most`."""
    if share == reference_share:
        return None
    for n in range(1, most + 1):
        if exact_p(round(n * share), n, round(n * reference_share), n) < SIGNIFICANCE:
            return n
    return None


@functools.lru_cache(maxsize=1)
def neutral_bar() -> int:
    """The fewest runs a side, the same on both, on which "no change" can be settled: where a complete change (every
    run of one level starting, none of the other) would have been significant at 0.05 — 4 (Fisher's exact p =
    0.029; 3 a side give 0.1)."""
    return settling_repetitions(1.0, 0.0) or 100


def could_show_change(comparison: Comparison) -> bool:
    """Whether these counts could have shown a change at the kit's bar: a complete change between the two levels,
    at the valid runs each has, would be significant at 0.05 (4 vs 3 runs: p = 0.029, yes; 3 vs 3: p = 0.1, no)."""
    return exact_p(comparison.valid, comparison.valid, 0, comparison.reference_valid) < SIGNIFICANCE


def settled(status: str, p_value: float | None, comparisons: list[Comparison]) -> bool:
    """Whether a decision is settled at the kit's bar: a change significant at 0.05, or no change in comparisons
    each of which could have shown one (could_show_change). Anything else is what the runs did, observed, not settled
    — one run a side never settles anything."""
    if status in OUTCOME:
        return p_value is not None and p_value < SIGNIFICANCE
    if status == NEUTRAL:
        return bool(comparisons) and all(could_show_change(c) for c in comparisons)
    return False


def _shares(level: dict) -> frozenset:
    """How a level's valid runs ended, as shares (2 of 2 and 1 of 1 starting are the same ends)."""
    return frozenset((k, n / level["valid"]) for k, n in level["outcomes"].items())


def _comparisons(per: dict[str, dict], compared: list[str], reference: str | None) -> list[Comparison]:
    """Each compared level against the reference level of the stratum (the baseline's, else the first compared):
    its counts and Fisher's exact p-value."""
    if len(compared) < 2:
        return []
    ref = reference if reference in compared else compared[0]
    out = []
    for level in compared:
        if level == ref:
            continue
        a, b = per[level], per[ref]
        tested, hits, ref_hits = "ready", a["ready"], b["ready"]
        if hits / a["valid"] == ref_hits / b["valid"] and _shares(a) != _shares(b):
            # the same share starts, but they end differently: tested on the reference level's usual outcome
            tested = max(b["outcomes"], key=lambda k: (b["outcomes"][k], k))
            hits, ref_hits = a["outcomes"].get(tested, 0), b["outcomes"][tested]
        p = exact_p(hits, a["valid"], ref_hits, b["valid"])
        share, ref_share = hits / a["valid"], ref_hits / b["valid"]
        settle = None if p < SIGNIFICANCE else settling_repetitions(share, ref_share)
        out.append(Comparison(level=level, reference=ref, ready=a["ready"], valid=a["valid"], reference_ready=b["ready"],
                              reference_valid=b["valid"], p_value=p, significant=p < SIGNIFICANCE,
                              repetitions_to_settle=settle, tested=tested))
    return out


def decide(obs: pd.DataFrame, factor: str, factors: list[str], reference: str | None = None) -> Decision:
    """Whether changing only `factor` changes the launch's outcome, stratum by stratum. obs: the ledger's frame for
    this factor (ledger.Ledger.for_factor: a run whose level of it did not take effect is no observation of it).

    Each stratum has a state: `changes` (the share of ready runs differs, or the levels fail differently), `no
    change`, `repetitions disagree` (what a level does there is unknown) or `not compared` (fewer than two levels
    have valid runs; `why` says what they had instead). The status: `decides` (a change in every stratum, of
    whether it starts in one at least), `decides_in_some` (a change in some; in the others no change, disagreeing
    repetitions or no comparison, each said as such — never "only"), `changes_how_it_fails` (the levels end
    differently where the same share start — none, say — and nowhere start differently), `neutral` (every level
    compared in every stratum, never a change), `flaky` (no change seen, repetitions disagree somewhere),
    `undetermined` (no change seen, and some stratum never compared). Every stratum carries its counts and Fisher's
    exact test of each level against `reference` (the baseline level); a deciding status carries the weakest of its
    changed strata's p-values and the repetitions per side that would make such a split significant;
    `runs_per_side` is the fewest valid runs a side has in the comparisons it rests on (1: one run of each level).
    The summary and `claims` are claims.py's."""
    # the frame read once as records: selecting a few rows of a small frame per stratum and level was most of a
    # verdict's time (a verdict decides each factor in each stratum, and the headline and the strength line again)
    rows = obs.to_dict("records")
    levels = list(dict.fromkeys(r[factor] for r in rows if not pd.isna(r[factor])))
    # a stratum where the design planned one level of the factor (declared `variants:` that vary another factor
    # there) compares nothing of it: it neither decides nor leaves it undetermined
    detail = [_stratum(group, held, factor, levels, reference=reference) for held, group in strata(rows, factor, factors)
              if len({r[factor] for r in group if r[factor] in levels}) > 1 or len(levels) < 2]
    status = _status(detail)
    deciding = [(s, c) for s in detail if s.state == CHANGES for c in s.comparisons if s.differs(c)]
    if status == NEUTRAL:  # the same share of ready runs in every stratum: each exact test gives p = 1
        deciding = [(s, c) for s in detail for c in s.comparisons]
    p = max((c.p_value for _, c in deciding), default=None)
    settle = None
    if p is not None and p >= SIGNIFICANCE and status != NEUTRAL:  # the weakest split needs the most runs
        needed = [settling_repetitions(*s.shares(c)) for s, c in deciding]
        settle = None if None in needed else max(needed)
    # how many runs a side the decision rests on (1: what one run of each level did, not how reliably)
    basis = [c for s in detail if s.flaky for c in s.comparisons] if status == FLAKY else [c for _, c in deciding]
    per_side = min((min(c.valid, c.reference_valid) for c in basis), default=None)
    said = claims.decision_claims(factor, detail)
    return Decision(status=status, summary=claims.summary(factor, status, said), strata=detail, p_value=p,
                    significant=None if p is None else p < SIGNIFICANCE, repetitions_to_settle=settle,
                    runs_per_side=per_side, claims=[c.to_json() for c in said],
                    settled=settled(status, p, [c for s in detail for c in s.comparisons]))


def _stratum(group: list[dict], held: dict, factor: str, levels: list[str], *, reference: str | None) -> Stratum:
    """One stratum: each level's outcomes, which were compared, its state (see decide), whether the share of ready
    runs changes (None: cannot tell — fewer than two levels compared, or a flaky level), and the exact tests
    against `reference`."""
    present = [lv for lv in levels if any(r[factor] == lv for r in group)]
    per = _level_outcomes(group, factor, present)
    compared = [lv for lv in present if per[lv]["valid"]]
    flaky = [lv for lv in compared if per[lv]["odd_runs"]]
    rates = {lv: per[lv]["ready"] / per[lv]["valid"] for lv in compared}
    changes = (len(set(rates.values())) > 1) if len(compared) >= 2 and not flaky else None
    # the same share ready, but the levels fail differently (KV sizing at one, CUDA-graph OOM at the other): the
    # failure is part of the outcome, so the factor changes it — never "does not change the launch outcome"
    fails_differently = changes is False and len({_shares(per[lv]) for lv in compared}) > 1
    changes = True if fails_differently else changes
    state = NOT_COMPARED if len(compared) < 2 else DISAGREE if flaky else CHANGES if changes else NO_CHANGE
    return Stratum(held=held, changes=changes, levels=per, flaky=flaky, comparisons=_comparisons(per, compared, reference),
                   fails_differently=fails_differently, state=state,
                   why=_not_compared_why(factor, per, levels) if state == NOT_COMPARED else "")


def _not_compared_why(factor: str, per: dict[str, dict], levels: list[str]) -> str:
    """Why a stratum compares nothing: the one level planned, or what the runs of each level without a valid run
    were instead."""
    if len(levels) < 2:
        return (f"only {factor}={levels[0] if levels else '?'} was planned (a run restricted with --only, or a design "
                "that lists one level)")
    missing = [f"no valid runs of {factor}={lv}: {p['invalid'] or 'none planned'}" for lv, p in per.items()
               if not p["valid"]]
    absent = [f"no run of {factor}={lv} planned" for lv in levels if lv not in per]
    return "; ".join(missing + absent) or "fewer than two levels with a valid run"


def _status(detail: list[Stratum]) -> DecisionStatus:
    states = [s.state for s in detail]
    if any(s.state == CHANGES and not s.fails_differently for s in detail):  # whether it starts
        return DECIDES if all(st == CHANGES for st in states) else DECIDES_IN_SOME
    if CHANGES in states:  # how it fails, where the same share start
        return CHANGES_HOW
    if DISAGREE in states:
        return FLAKY
    if detail and all(st == NO_CHANGE for st in states) and all(s.complete for s in detail):
        return NEUTRAL
    return UNDETERMINED


def confounded(factor: str, decision: Decision, found: list[dict]) -> Decision:
    """A decision whose runs a confound touches says nothing for sure: it becomes `confounded`, naming what
    touched it and what it would have said."""
    if decision.status not in SETTLED:
        return decision
    rests_on = set(decision.runs)
    hits = [c for c in found if rests_on & set(c["runs"])]
    if not hits:
        return decision
    runs = sorted(rests_on & {r for c in hits for r in c["runs"]})
    kinds = list(dict.fromkeys(c["kind"] for c in hits))
    named = ", ".join(runs[:4]) + (f" and {len(runs) - 4} more" if len(runs) > 4 else "")
    summary = (f"{factor} is confounded: {', '.join(kinds)} confound(s) touch {len(runs)} run(s) it rests "
               f"on ({named}); without them it would read: {decision.summary}")
    return dataclasses.replace(decision, status=CONFOUNDED, summary=summary, would_be=decision.status,
                               confounded_runs=runs, confounded_by=kinds, settled=False)


def searched(factor: str, decision: Decision, flag: str) -> Decision:
    """The decision on a threshold search's own flag: its probes are single launches placed to narrow an interval,
    so their counts are no fixed comparison (a Fisher's p of 1 on one run a side read as a failed experiment);
    the answer is the search's intervals and predictions (verdict `thresholds`). What the counts alone would say
    is kept in `would_be`; it is in none of the verdict's factor lists."""
    summary = f"{factor} is the searched flag ({flag}): its answer is the threshold found, not a comparison of its probes"
    return dataclasses.replace(decision, status=SEARCHED, summary=summary, would_be=decision.status, settled=None)


def not_varied(factor: str, decision: Decision, why: str) -> Decision:
    """A decision on a factor no run showed varying (ledger.Ledger.varied): whatever its counts say, it is
    `not_shown_to_vary`, with why and what would show it, and what the counts alone would have said."""
    return dataclasses.replace(decision, status=NOT_VARIED, summary=f"{factor} was not shown to vary: {why}",
                               would_be=decision.status, settled=False)


def per_run_memory(events: pd.DataFrame, fields: tuple[str, ...]) -> pd.DataFrame:
    """One row per run and rank, one column per memory field (the last value the log printed)."""
    sel = events[events["field"].isin(fields)]
    if sel.empty:
        return pd.DataFrame(columns=["run_id", "rank", *fields])
    wide = sel.pivot_table(index=["run_id", "rank"], columns="field", values="value", aggfunc="last")
    return wide.reset_index().rename_axis(columns=None)


def rank_memory(events: pd.DataFrame, runs: pd.DataFrame, *, fields: tuple[str, ...],
                tolerance: float = 0.05) -> pd.DataFrame:
    """Memory per variant from the server's own log lines (GiB, tokens): the mean over runs and ranks of `fields`
    (the server kind's memory fields, ServerKind.memory_fields), with the ranks whose values differ from the others
    by more than `tolerance` named in `ranks_differ`."""
    wide = per_run_memory(events, fields).merge(runs[["run_id", "variant"]], on="run_id")
    columns = ["variant", "n_runs", "n_ranks", *fields, "ranks_differ"]
    if wide.empty:
        return pd.DataFrame(columns=columns)
    present = [f for f in fields if f in wide]
    rows = []
    for variant in runs["variant"].drop_duplicates():
        group = wide[wide["variant"] == variant]
        if group.empty:
            continue
        per_rank = group.groupby("rank")[present].mean()
        spread = [f for f in present if (per_rank[f].max() - per_rank[f].min()) > tolerance * max(1.0, abs(per_rank[f].mean()))]
        rows.append({"variant": variant, "n_runs": group["run_id"].nunique(), "n_ranks": len(per_rank),
                     **per_rank.mean().to_dict(), "ranks_differ": ", ".join(spread)})
    keep = [c for c in columns if c in ("variant", "n_runs", "n_ranks", "ranks_differ") or c in present]
    return pd.DataFrame(rows, columns=keep)


def failures(runs: pd.DataFrame) -> pd.DataFrame:
    cols = ["run_id", "variant", "status", "failure_reason", "failure_phase", "failure_message"]
    return runs.loc[runs["status"] != "ready", cols].reset_index(drop=True)


