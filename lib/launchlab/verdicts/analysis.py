"""Comparisons of runs: pure DataFrame → DataFrame functions over the frames of a run directory.

Only valid observations count. A run that ended in a kit `error`, that was interrupted, or that the manifest
lists but that never finished is not an observation of the server: it is excluded from every comparison,
and counted and named instead. Comparisons are matched: a factor's levels are compared within strata (one
combination of the other factors' levels at a time), and a stratum that has valid runs of one side only
contributes nothing.
"""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from launchlab import interrupts
from launchlab.logparse.common import rank_order
from launchlab.store.records import KIT_STATUSES, VALID_STATUSES
from launchlab.store.rundir import ManifestEntry
from launchlab.store.verdictrecord import (
    CONFOUNDED,
    DECIDES,
    DECIDES_IN_SOME,
    DECIDING,
    FLAKY,
    NEUTRAL,
    SETTLED,
    UNDETERMINED,
    Decision,
    DecisionStatus,
)

MISSING, INTERRUPTED, KIT_ERROR = "missing", "interrupted", "kit error"
UNKNOWN_OUTCOME = "outcome unknown"  # an imported log that ends before the server was ready or failed
MISFILED = "misfiled"  # an imported log whose server ran other levels than it was filed under
CONTRADICTED = "level contradicted"  # for one factor: the server's log shows another level than the run's


# ---------------------------------------------------------------------------------------------------------
# Which runs are observations


NOT_FINISHED = "listed in the manifest but it has no final status (the batch was interrupted or is still running)"
# a run directory made by run_variant.ipynb for its own one run (the manifest's single_run)
NOT_RUN_ALONE = ("not run: this run directory was made by run_variant.ipynb for one run of the plan, not by a "
                 "batch; `launchlab run PARAMS` runs them all")


def observations(runs: pd.DataFrame, factors: list[str], planned: list[ManifestEntry] | None = None, *,
                 missing_why: str = NOT_FINISHED) -> pd.DataFrame:
    """Every planned run (finished or not) with `valid` and, for the others, `invalid_kind` (kit error,
    interrupted, missing) and `invalid_detail`. planned: the manifest's runs (run_id, variant, levels);
    missing_why: why a planned run has no final status (NOT_RUN_ALONE for one run notebook's folder)."""
    obs = runs.copy()
    message = obs["failure_message"].fillna("").astype(str) if "failure_message" in obs else pd.Series("", obs.index)
    reason = obs["failure_reason"].fillna("").astype(str) if "failure_reason" in obs else pd.Series("", obs.index)
    # stopped because the batch was: by its reason; a record of an older kit (no reason) by what its message says
    interrupted = (reason == interrupts.REASON) | ((reason == "") & message.str.startswith("interrupted"))
    obs["valid"] = obs["status"].isin(VALID_STATUSES)
    obs["invalid_kind"] = None
    obs.loc[~obs["valid"], "invalid_kind"] = KIT_ERROR
    obs.loc[~obs["valid"] & interrupted, "invalid_kind"] = INTERRUPTED
    obs.loc[obs["status"] == "unknown", "invalid_kind"] = UNKNOWN_OUTCOME
    obs["invalid_detail"] = None
    obs.loc[~obs["valid"], "invalid_detail"] = message[~obs["valid"]]
    if "misfiled" in obs:
        misfiled = obs["misfiled"].notna() & obs["valid"]
        obs.loc[misfiled, "valid"] = False
        obs.loc[misfiled, "invalid_kind"] = MISFILED
        obs.loc[misfiled, "invalid_detail"] = "filed under other levels than its log shows: " + obs.loc[misfiled, "misfiled"]
    done = set(obs["run_id"])
    missing = [p for p in (planned or []) if p.run_id not in done]
    if missing:
        extra = pd.DataFrame([{"run_id": p.run_id, "variant": p.variant, **{f: p.levels.get(f) for f in factors},
                               "status": None, "valid": False, "invalid_kind": MISSING,
                               "invalid_detail": missing_why} for p in missing])
        order = {p.run_id: i for i, p in enumerate(planned)}
        obs = pd.concat([obs, extra], ignore_index=True)
        obs = obs.sort_values("run_id", key=lambda s: s.map(order).fillna(len(order))).reset_index(drop=True)
    obs["valid"] = obs["valid"].astype(bool)
    return obs


def excluded(obs: pd.DataFrame) -> list[dict]:
    """The runs that are not observations, with why."""
    rows = obs[~obs["valid"]]
    return [{"run_id": r.run_id, "variant": r.variant, "why": r.invalid_kind, "detail": r.invalid_detail or ""}
            for r in rows.itertuples()]


_NOUNS = {KIT_ERROR: "kit error", INTERRUPTED: "interrupted run", MISSING: "missing run",
          UNKNOWN_OUTCOME: "imported log of unknown outcome", MISFILED: "misfiled imported log",
          CONTRADICTED: "run of another level"}


def _counted(kind: str, n: int) -> str:
    noun = _NOUNS[kind]
    if n == 1:
        return f"1 {noun}"
    head, _, tail = noun.partition(" of ")  # "runs of another level", not "run of another levels"
    return f"{n} {head}s" + (f" of {tail}" if tail else "")


def _tally(rows: pd.DataFrame) -> str:
    """'4 kit errors — the sampler could not start: …; 2 missing' for invalid runs."""
    parts = []
    for kind, group in rows.groupby("invalid_kind", sort=False):
        text = _counted(kind, len(group))
        if kind == CONTRADICTED:
            shown = group["invalid_detail"].fillna("").value_counts()
            what = shown.index[0] if len(shown) == 1 and "contradicts its" not in shown.index[0] else ""
            text += (f" — the server's log shows another level than the run's{f' ({what})' if what else ''}: "
                     f"{', '.join(group['run_id'])}")
        elif kind in (KIT_ERROR, UNKNOWN_OUTCOME, MISFILED):
            common = group["invalid_detail"].fillna("").value_counts()
            if len(common) and common.index[0]:
                text += f" — {common.index[0][:200]}"
        parts.append(text)
    return "; ".join(parts) or "no runs planned"


def _held(others: list[str], key: tuple) -> dict[str, str]:
    return dict(zip(others, key, strict=True))


def _label(held: dict[str, str]) -> str:
    return ", ".join(f"{f}={lv}" for f, lv in held.items()) or "alone"


def strata(obs: pd.DataFrame, factor: str, factors: list[str]) -> list[tuple[dict[str, str], pd.DataFrame]]:
    """The planned combinations of the other factors' levels, each with its runs (valid or not)."""
    others = [f for f in factors if f != factor]
    if not others:
        return [({}, obs)]
    return [(_held(others, key if isinstance(key, tuple) else (key,)), group)
            for key, group in obs.groupby(others, sort=False)]


# ---------------------------------------------------------------------------------------------------------
# Outcomes


def outcomes(runs: pd.DataFrame, factors: list[str], planned: list[ManifestEntry] | None = None) -> pd.DataFrame:
    """One row per variant: how many runs ended in each status (and were missing), and why the failed ones
    failed. `outcome` counts ready runs among the valid ones."""
    obs = observations(runs, factors, planned)
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
        row["peak_mem_used_mib_max"] = valid["peak_mem_used_mib"].max() if len(valid) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _left_out(group: pd.DataFrame) -> str:
    """What the status counts beside `outcome` hold that it does not: the runs left out, other than missing ones
    (their own column) — a misfiled imported log counted `ready` beside "0/1 ready" (issue 28)."""
    left = group[~group["valid"] & (group["invalid_kind"] != MISSING)]
    if left.empty:
        return ""
    return " (left out: " + ", ".join(_counted(k, len(g)) for k, g in left.groupby("invalid_kind", sort=False)) + ")"


def outcome_label(row) -> str:
    """What a valid run's launch came to, in the words the verdict's sentences use, so that a KV-sizing failure and
    a CUDA-graph OOM are two outcomes, and a server that starts and then breaks is neither "ready" nor "does not
    start": `starts`, `starts but its first request fails`, `starts, then exits by itself`, `fails: REASON in
    PHASE`, `is not ready in time`."""
    status, reason, phase = row.get("status"), row.get("failure_reason"), row.get("failure_phase")
    reason = reason if isinstance(reason, str) and reason else None
    if status == "ready":
        return "starts"
    if status == "degraded":
        if reason == "exited_after_ready":
            return "starts, then exits by itself"
        return "starts but its first request fails" + (f" ({reason})" if reason and reason != "smoke_request_failed"
                                                       else "")
    if status == "failed":
        return f"fails: {reason or 'unknown reason'}" + (f" in {phase}" if isinstance(phase, str) and phase else "")
    if status == "timeout":
        return "is not ready in time"
    return str(status)


def _level_outcomes(group: pd.DataFrame, factor: str, levels: list[str]) -> dict[str, dict]:
    out = {}
    for level in levels:
        runs = group[group[factor] == level]
        valid = runs[runs["valid"]]
        ready = valid["status"] == "ready"
        labels = [outcome_label(r) for r in valid.to_dict("records")]
        out[level] = {"planned": len(runs), "valid": len(valid), "ready": int(ready.sum()),
                      "invalid": _tally(runs[~runs["valid"]]) if len(valid) < len(runs) else "",
                      "runs": list(valid["run_id"]), "odd_runs": _odd_runs(valid, ready),
                      "outcomes": dict(sorted(Counter(labels).items()))}
    return out


def _odd_runs(valid: pd.DataFrame, ready: pd.Series) -> list[dict]:
    """The repetitions of one level that disagree with the others (the fewer side; on a tie the runs that
    were not ready), with how each ended: empty when they agree."""
    n_ready = int(ready.sum())
    if n_ready in (0, len(valid)):
        return []
    odd = valid[ready] if n_ready < len(valid) - n_ready else valid[~ready]
    reason = odd["failure_reason"] if "failure_reason" in odd else pd.Series(None, odd.index)
    message = odd["failure_message"] if "failure_message" in odd else pd.Series(None, odd.index)
    return [{"run_id": r, "status": s, "reason": why if isinstance(why, str) else None,
             "message": said[:200] if isinstance(said, str) and said else None}
            for r, s, why, said in zip(odd["run_id"], odd["status"], reason, message, strict=True)]


# the exact test of a decision: ready / not ready per level in one stratum (Fisher's, two-sided)
SIGNIFICANCE = 0.05


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


def _shares(level: dict) -> frozenset:
    """How a level's valid runs ended, as shares (2 of 2 and 1 of 1 starting are the same ends)."""
    return frozenset((k, n / level["valid"]) for k, n in level["outcomes"].items())


def _comparisons(per: dict[str, dict], compared: list[str], reference: str | None) -> list[dict]:
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
        out.append({"level": level, "reference": ref, "ready": a["ready"], "valid": a["valid"],
                    "reference_ready": b["ready"], "reference_valid": b["valid"], "tested": tested,
                    "share": share, "reference_share": ref_share, "differs": share != ref_share,
                    "p_value": p, "significant": p < SIGNIFICANCE, "repetitions_to_settle": settle})
    return out


def decide(obs: pd.DataFrame, factor: str, factors: list[str], reference: str | None = None,
           *, drop: set[str] = frozenset(), drop_why: str = "") -> dict:
    """Whether changing only `factor` changes the share of ready runs, stratum by stratum.

    status: `decides` (in every stratum), `decides_in_some` (in some, not in others where it was compared),
    `neutral` (every level compared in every stratum, never a change), `flaky` (the repetitions of a level
    disagree in some stratum: the data cannot say what that level does there), `undetermined` (no change seen,
    but some level lacks valid runs somewhere, so it may decide there). Every stratum carries its counts and
    Fisher's exact test of each level against `reference` (the baseline level); a deciding status carries the
    weakest of its strata's p-values and the repetitions per side that would make such a split significant;
    `runs_per_side` is the fewest valid runs a side has in the comparisons it rests on (1: one run of each level).
    drop: runs that are no observations of this factor (their log contradicts their level); drop_why: what their
    logs showed instead (levelchecks.contradiction_reasons)."""
    if drop:
        obs = _dropped(obs, drop, factor, drop_why)
    levels = list(dict.fromkeys(obs[factor]))
    # a stratum where the design planned one level of the factor (declared `variants:` that vary another factor
    # there) compares nothing of it: it neither decides nor leaves it undetermined
    detail = [_stratum(group, held, factor, levels, reference=reference) for held, group in strata(obs, factor, factors)
              if group[factor].nunique() > 1 or len(levels) < 2]
    changed = [s for s in detail if s["changes"]]
    status = _status(detail, changed)
    deciding = [c for s in changed for c in s["comparisons"] if c["differs"]]
    if status == NEUTRAL:  # the same share of ready runs in every stratum: each exact test gives p = 1
        deciding = [c for s in detail for c in s["comparisons"]]
    p = max((c["p_value"] for c in deciding), default=None)
    settle = None
    if p is not None and p >= SIGNIFICANCE and status != NEUTRAL:  # the weakest split needs the most runs
        needed = [settling_repetitions(c["share"], c["reference_share"]) for c in deciding]
        settle = None if None in needed else max(needed)
    runs = [r for s in detail for lv in s["compared"] for r in s["levels"][lv]["runs"]]
    # how many runs a side the decision rests on (1: what one run of each level did, not how reliably)
    basis = [c for s in detail if s["flaky"] for c in s["comparisons"]] if status == FLAKY else deciding
    per_side = min((min(c["valid"], c["reference_valid"]) for c in basis), default=None)
    return {"factor": factor, "status": status, "summary": _summary(factor, status, detail, changed),
            "strata": detail, "runs": runs, "p_value": p, "significant": None if p is None else p < SIGNIFICANCE,
            "repetitions_to_settle": settle, "runs_per_side": per_side}


def _dropped(obs: pd.DataFrame, drop: set[str], factor: str, why: str = "") -> pd.DataFrame:
    """The observations with `drop`'s runs made invalid for this factor: their log contradicts their level."""
    obs = obs.copy()
    gone = obs["run_id"].isin(drop) & obs["valid"]
    obs.loc[gone, "valid"] = False
    obs.loc[gone, "invalid_kind"] = CONTRADICTED
    obs.loc[gone, "invalid_detail"] = why or f"the server's log contradicts its {factor} level"
    return obs


def _stratum(group: pd.DataFrame, held: dict, factor: str, levels: list[str], *, reference: str | None) -> dict:
    """One stratum: each level's outcomes, which were compared, whether the share of ready runs changes (None:
    cannot tell — fewer than two levels compared, or a flaky level), and the exact tests against `reference`."""
    present = [lv for lv in levels if (group[factor] == lv).any()]
    per = _level_outcomes(group, factor, present)
    compared = [lv for lv in present if per[lv]["valid"]]
    flaky = [lv for lv in compared if per[lv]["odd_runs"]]
    rates = {lv: per[lv]["ready"] / per[lv]["valid"] for lv in compared}
    changes = (len(set(rates.values())) > 1) if len(compared) >= 2 and not flaky else None
    # the same share ready, but the levels fail differently (KV sizing at one, CUDA-graph OOM at the other): the
    # failure is part of the outcome, so the factor changes it — never "does not change the launch outcome"
    fails_differently = changes is False and len({_shares(per[lv]) for lv in compared}) > 1
    return {"held": held, "levels": per, "compared": compared, "changes": True if fails_differently else changes,
            "fails_differently": fails_differently, "flaky": flaky, "complete": len(compared) == len(present),
            "comparisons": _comparisons(per, compared, reference)}


def _status(detail: list[dict], changed: list[dict]) -> DecisionStatus:
    if any(s["flaky"] for s in detail):
        return FLAKY
    if changed:
        return DECIDES if len(changed) == len(detail) else DECIDES_IN_SOME
    if detail and all(s["changes"] is False and s["complete"] for s in detail):
        return NEUTRAL
    return UNDETERMINED


def _summary(factor: str, status: DecisionStatus, detail: list[dict], changed: list[dict]) -> str:
    if status == FLAKY:
        return f"{factor} is flaky: its repetitions disagree " + "; ".join(
            _flaky_why(factor, s) for s in detail if s["flaky"])
    differently = "; ".join(_fails_how(factor, s) if s.get("fails_differently") else _ends(factor, s)
                            for s in changed if s.get("fails_differently") or _breaks(s))
    if differently:
        differently = " — " + differently
    if status == DECIDES_IN_SOME:
        same = [s for s in detail if s["changes"] is False]
        summary = f"{factor} decides the launch only at {', '.join(_label(s['held']) for s in changed)}"
        return summary + (f" (not at {', '.join(_label(s['held']) for s in same)})" if same else "") + differently
    if status == DECIDES:
        others = list(detail[0]["held"]) if detail else []
        if changed and all(s.get("fails_differently") for s in changed):
            return f"{factor} changes how the launch fails" + (
                f" at every level of {', '.join(others)}" if len(detail) > 1 else "") + differently
        return f"{factor} decides the launch" + (
            f" at every level of {', '.join(others)}" if len(detail) > 1 else "") + differently
    if status == NEUTRAL:
        return f"{factor} does not change the launch outcome"
    return f"{factor} is undetermined: " + _undetermined_why(factor, detail)


def _ends(factor: str, stratum: dict) -> str:
    """How each level's runs ended in a stratum: `f=a: starts; f=b: starts, then exits by itself (1/2), starts (1/2)`."""
    def counted(level: str) -> str:
        per = stratum["levels"][level]
        return ", ".join(k if n == per["valid"] else f"{k} ({n}/{per['valid']})" for k, n in per["outcomes"].items())
    where = f" (at {_label(stratum['held'])})" if stratum["held"] else ""
    return "; ".join(f"{factor}={lv}: {counted(lv)}" for lv in stratum["compared"]) + where


def _fails_how(factor: str, stratum: dict) -> str:
    """`both fail, differently: …` for a stratum whose levels start alike but end differently."""
    every = all(stratum["levels"][lv]["ready"] == 0 for lv in stratum["compared"])
    return f"{'both fail' if every else 'the same share start'}, differently: {_ends(factor, stratum)}"


def _breaks(stratum: dict) -> bool:
    """Some run of the stratum started and then broke (degraded): the count of ready runs alone would hide it."""
    return any(k.startswith(("starts but", "starts, then")) for lv in stratum["compared"]
               for k in stratum["levels"][lv]["outcomes"])


def _flaky_why(factor: str, stratum: dict) -> str:
    where = f" at {_label(stratum['held'])}" if stratum["held"] else ""
    parts = []
    for level in stratum["flaky"]:
        per = stratum["levels"][level]
        odd = ", ".join(f"{o['run_id']} {o['status']}" + (f" ({o['reason']}: {o['message']})" if o["message"] else
                                                          f" ({o['reason']})" if o["reason"] else "")
                        for o in per["odd_runs"])
        parts.append(f"{factor}={level}: {per['ready']}/{per['valid']} ready, the odd run(s): {odd}")
    return where.strip() + (": " if where else "") + "; ".join(parts)


def confounded(decision: dict, found: list[dict]) -> dict:
    """A decision whose runs a confound touches says nothing for sure: it becomes `confounded`, naming what
    touched it and what it would have said."""
    if decision["status"] not in SETTLED:
        return decision
    rests_on = set(decision["runs"])
    hits = [c for c in found if rests_on & set(c["runs"])]
    if not hits:
        return decision
    runs = sorted(rests_on & {r for c in hits for r in c["runs"]})
    kinds = ", ".join(dict.fromkeys(c["kind"] for c in hits))
    named = ", ".join(runs[:4]) + (f" and {len(runs) - 4} more" if len(runs) > 4 else "")
    summary = (f"{decision['factor']} is confounded: {kinds} confound(s) touch {len(runs)} run(s) it rests on "
               f"({named}); without them it would read: {decision['summary']}")
    return {**decision, "status": CONFOUNDED, "summary": summary, "would_be": decision["status"],
            "confounded_runs": runs}


def _undetermined_why(factor: str, detail: list[dict]) -> str:
    planned = {lv for s in detail for lv in s["levels"]}
    if len(planned) == 1:
        return f"only {factor}={next(iter(planned))} was planned (a run restricted with --only, or a design " \
               "that lists one level), so it was never compared"
    reasons = []
    for s in detail:
        where = f" at {_label(s['held'])}" if s["held"] else ""
        for level, per in s["levels"].items():
            if per["valid"] == 0:
                reasons.append(f"no valid runs of {factor}={level}{where}: {per['invalid']}")
    if not detail:
        return f"the design never plans two levels of {factor} with the other factors held"
    if not reasons:
        return "no comparison had both of its levels"
    if any(s["changes"] is False for s in detail):
        same = [_label(s["held"]) for s in detail if s["changes"] is False]
        reasons.insert(0, f"it did not change the outcome where it was compared ({', '.join(same)}), but")
    return "; ".join(reasons)


def outcome_deciders(runs: pd.DataFrame, factors: list[str], planned: list[ManifestEntry] | None = None) -> pd.DataFrame:
    """For each factor: does changing only its level change the share of ready runs, the others held fixed?
    `changes_launch_outcome` is True where it does in at least one stratum (see `status`). The verdict's own
    decisions (with level checks and confounds applied) are in verdict.build."""
    obs = observations(runs, factors, planned)
    rows = []
    for factor in factors:
        d = decide(obs, factor, factors)
        rows.append({"factor": factor, "changes_launch_outcome": d["status"] in DECIDING, "status": d["status"],
                     "summary": d["summary"], "evidence": Decision.from_json(d).counts()})
    return pd.DataFrame(rows, columns=["factor", "changes_launch_outcome", "status", "summary", "evidence"])


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


# ---------------------------------------------------------------------------------------------------------
# Effects against the baseline, hyperfine-style, matched within strata

EFFECT_METRICS = ("weights_mem_gib", "kv_tokens", "kv_gib", "graph_mem_gib", "peak_mem_used_mib", "startup_s")
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


def _pooled_sd(groups: list[pd.Series]) -> float | None:
    """The within-stratum sd: strata differ on purpose (another factor's level), so their means are not noise."""
    dof = sum(len(g) - 1 for g in groups)
    if dof <= 0:
        return None
    return math.sqrt(sum(((g - g.mean()) ** 2).sum() for g in groups) / dof)


def factor_effects(runs: pd.DataFrame, events: pd.DataFrame, factors: list[str], baseline: dict[str, str],
                   *, planned: list[ManifestEntry] | None = None, drop: dict[str, set[str]] | None = None) -> list[dict]:
    """For each factor level other than the baseline's and each metric: the level's valid runs against the
    valid runs at the baseline level, within each stratum (the other factors held at one combination) where
    both sides have a value. Per-stratum differences are combined by their unweighted mean; `mean` and
    `baseline_mean` are the means of the per-stratum means, `n` / `baseline_n` count the values compared,
    `sd` is the within-stratum (pooled) sd of the level's values. With two or more values per side, `ci_low`
    / `ci_high` are the 95 % t-interval of the matched differences (a level's run against the baseline's run
    of the same repetition in the same stratum, scipy.stats.ttest_1samp) — where those differences are all the
    same (`diffs_identical`) the interval is that point, which says no spread was seen, not that it is precise;
    with one, `values` and `baseline_values` are the single values and there is no interval.
    drop: per factor, runs that are no observations of it (their log contradicts their level)."""
    obs = observations(runs, factors, planned)
    valid = obs[obs["valid"]]
    table = valid.set_index("run_id")[[*factors, "repetition"]].join(run_metrics(valid, events))
    effects = []
    for factor in factors:
        others = [f for f in factors if f != factor]
        mine = table.drop(index=[r for r in (drop or {}).get(factor, ()) if r in table.index])
        for level in dict.fromkeys(obs[factor]):
            if level == baseline[factor]:
                continue
            for metric in EFFECT_METRICS:
                effect = _matched(mine, factor, level, baseline[factor], others=others, metric=metric)
                if effect is not None:
                    effects.append(effect)
    return effects


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


def _by_repetition(table: pd.DataFrame, values: pd.Series, base: pd.Series) -> list[tuple[float, float]]:
    """A level's values and the baseline level's, paired by repetition (runs named by their index in table)."""
    mine = dict(zip(table.loc[values.index, "repetition"], values, strict=True))
    theirs = dict(zip(table.loc[base.index, "repetition"], base, strict=True))
    return [(mine[r], theirs[r]) for r in sorted(mine.keys() & theirs.keys())]


def _matched(table: pd.DataFrame, factor: str, level: str, base: str, *, others: list[str], metric: str) -> dict | None:
    groups = table.groupby(others, sort=False) if others else [((), table)]
    used = []
    for key, group in groups:
        t = group.loc[group[factor] == level, metric].dropna()
        c = group.loc[group[factor] == base, metric].dropna()
        if len(t) and len(c):
            held = _held(others, key if isinstance(key, tuple) else (key,))
            used.append((held, t, c))
    if not used:
        return None
    mean = sum(t.mean() for _, t, _ in used) / len(used)
    base_mean = sum(c.mean() for _, _, c in used) / len(used)
    diffs = [t.mean() - c.mean() for _, t, c in used]
    values = pd.concat([t for _, t, _ in used])
    base_values = pd.concat([c for _, _, c in used])
    pairs = [float(a - b) for _, t, c in used for a, b in _by_repetition(table, t, c)]
    low = high = None
    if min(len(values), len(base_values)) >= 2 and len(pairs) >= 2:
        low, high = _interval(pairs)
    identical = low is not None and len(set(pairs)) == 1  # no spread: the "interval" is the point, not a precision
    return {"factor": factor, "level": level, "baseline_level": base, "metric": metric,
            "n": int(len(values)), "mean": mean, "sd": _pooled_sd([t for _, t, _ in used]),
            "min": values.min(), "max": values.max(),
            "baseline_n": int(len(base_values)), "baseline_mean": base_mean,
            "baseline_sd": _pooled_sd([c for _, _, c in used]),
            "diff": mean - base_mean, "ratio": mean / base_mean if base_mean else None,
            "ci_low": low, "ci_high": high, "pairs": len(pairs), "diffs_identical": identical,
            "values": [float(v) for v in values] if len(values) == 1 else None,
            "baseline_values": [float(v) for v in base_values] if len(base_values) == 1 else None,
            "strata": [_label(h) for h, _, _ in used],
            "stratum_diffs": [{"stratum": _label(h), "n": int(len(t)), "baseline_n": int(len(c)),
                               "mean": float(t.mean()), "baseline_mean": float(c.mean()),
                               "diff": float(t.mean() - c.mean())} for h, t, c in used],
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
