"""The machine-readable conclusion of an experiment (verdict.json, a verdictrecord.Verdict), and the same as prose.

A verdict never says more than the valid observations show: whether it is conclusive (and why not) comes
first; a factor is deciding or neutral only from matched comparisons in which its levels have valid runs whose
repetitions agree (else flaky or undetermined) and that no confound touches (else confounded); a level that did
not take effect is a confound, and its runs leave that factor's comparisons. Every decision carries its counts,
Fisher's exact p-value and the repetitions that would settle it; every effect its interval or its single values.
"""

from __future__ import annotations

import pandas as pd

from launchlab.escaping import md, md_code
from launchlab.store.verdictrecord import (
    CHANGES_HOW,
    CONFOUNDED,
    DECIDING,
    FINDINGS,
    FLAKY,
    INCONCLUSIVE,
    NEUTRAL,
    NOT_VARIED,
    SEARCHED,
    SETTLED,
    UNDETERMINED,
    Confound,
    Decision,
    Effect,
    ExcludedRun,
    LevelCheck,
    Verdict,
    plain,
)
from launchlab.verdicts import (
    analysis,
    budget,
    confounds,
    consistency,
    derivedargs,
    effects,
    gpustate,
    grouping,
    ledger,
    levelchecks,
    ordereffects,
    thresholds,
)
from launchlab.verdicts.evidence import Evidence


def _findings(e: Evidence, *, measured: list[dict], found: list[dict], budget_rows: list[dict]) -> list:
    """What the server's own figures say of the outcomes: its instrumentation (against them, or agreeing with every
    one), its break-even, the launches that start unable to serve one request, and a ready line and probe that
    disagree."""
    led, events = e.ledger, e.events
    budget_runs = e.budget_runs if e.budget_runs is not None else pd.DataFrame()
    findings = consistency.instrumentation(led, budget_runs, events, effects=measured, confounds=found)
    findings += consistency.break_even_contradicted(led, pd.DataFrame(budget_rows), events, parsed=e.parsed,
                                                    kind=e.kind)
    return findings + consistency.unusable(led) + consistency.readiness(led)


def build(e: Evidence) -> Verdict:
    """The verdict of a run directory, whole, from its evidence (evidence.Evidence): see verdictrecord.Verdict and
    docs/reading-the-report.md for every key. Each factor is decided from the runs the ledger says observe it; one no
    run showed varying is `not_shown_to_vary` (ledger.Ledger.varied), whatever its counts; `conclusive` means every
    decision is settled at the kit's bar (analysis.settled) and nothing stands in the way (inconclusive_reasons)."""
    led, obs = e.ledger, e.observations
    budget_rows = [{k: plain(v) for k, v in row.items()} for row in
                   (budget.summarize(e.budget_runs).to_dict("records") if e.budget_runs is not None else [])]
    checks = led.level_checks()
    found, derived = _confounds(obs, e, checks)
    found += _memory_before_weights(obs, found, e.before_weights, budget_rows=budget_rows)
    searched = (e.thresholds or {}).get("factor")  # a search's flag: answered by its thresholds, never compared
    decisions = {f: _decision(e, f, checks, found) for f in led.factors}
    if searched in decisions:
        decisions[searched] = analysis.searched(searched, decisions[searched], e.thresholds["flag"])
    measured, not_compared = effects.factor_effects(led, e.runs, e.events, e.baseline, searched=searched)
    findings = _findings(e, measured=measured, found=found, budget_rows=budget_rows)
    reasons = (inconclusive_reasons(obs, decisions, findings, search=e.thresholds is not None)
               + (thresholds.unfinished(e.thresholds) if e.thresholds is not None else []))
    named = _named(decisions)
    return Verdict(
        controlled=bool(obs["valid"].any()) and not found, conclusive=not reasons, inconclusive_reasons=reasons,
        baseline=e.baseline_variant, outcome_factors=named(*DECIDING), neutral_factors=named(NEUTRAL),
        undetermined_factors=named(UNDETERMINED), flaky_factors=named(FLAKY), confounded_factors=named(CONFOUNDED),
        failure_mode_factors=named(CHANGES_HOW), not_varied_factors=named(NOT_VARIED),
        factors=decisions,
        confounds=[Confound(c["kind"], c["detail"], list(c["runs"])) for c in found], derived_args=derived,
        effects=[Effect.from_analysis(x) for x in measured], level_checks=[LevelCheck(**c) for c in checks],
        excluded_runs=[ExcludedRun(**r) for r in analysis.excluded(obs)], budget=budget_rows,
        warnings=_warnings(obs, e, measured, found, not_compared=not_compared),
        findings=findings, thresholds=e.thresholds, warmup_runs=list(e.warmup_runs), kit_version=e.kit_version,
        reproduced=consistency.reproduction(led, pd.DataFrame() if e.budget_runs is None else e.budget_runs,
                                            kind=e.kind, expected=e.reproduce, baseline=e.baseline_variant,
                                            expecting=e.expecting))


def _named(decisions: dict[str, Decision]):
    def named(*statuses: str) -> list[str]:
        return [factor for factor, d in decisions.items() if d.status in statuses]
    return named


def _decision(e: Evidence, factor: str, checks: list[dict], found: list[dict]) -> Decision:
    """One factor's decision: from the runs that observe it, then not shown to vary (no run shows its levels taking
    effect, and its levels' runs look alike) or confounded (a confound touches the runs it rests on)."""
    decision = analysis.decide(e.ledger.for_factor(factor, e.runs), factor, list(e.ledger.factors),
                               e.baseline.get(factor))
    varied = e.ledger.varied(factor)
    if not varied.shown:
        return analysis.not_varied(factor, decision, varied.why)
    return analysis.confounded(factor, decision, _touching(found, checks))


def _left_out_of_budget(led: ledger.Ledger) -> list[str]:
    """The runs whose level of some factor did not take effect where it did in the rest of their variant: they ran
    another variant, so their figures are in no variant's budget (and their break-even in none's mean)."""
    odd = led.ran_otherwise()
    if not odd:
        return []
    return [f"{len(odd)} run(s) ran another level than the rest of their variant (the server overrode it) and are "
            f"left out of its memory budget and break-even: {', '.join(r.run_id for r in odd)}"]


def _memory_before_weights(obs: pd.DataFrame, found: list[dict], before: dict[str, float], *,
                           budget_rows: list[dict]) -> list[dict]:
    """The machine as the servers' logs measured it (gpustate.memory_before_weights), over the runs compared (the
    valid ones and the imported ones left out), the runs other confounds name already apart."""
    compared = list(obs.loc[obs["valid"] | obs["invalid_kind"].isin([analysis.MISFILED, analysis.UNKNOWN_OUTCOME]),
                            "run_id"])
    named = {r for c in found for r in c["runs"]}
    break_evens = {row["variant"]: row.get("break_even_fraction") for row in budget_rows
                   if isinstance(row.get("break_even_fraction"), float)}
    return gpustate.memory_before_weights(compared, before, break_evens=break_evens, named=named)


def _confounds(obs: pd.DataFrame, e: Evidence, checks: list[dict]) -> tuple[list[dict], list[dict]]:
    """Every confound (a level that did not take effect first: nothing else means much), and the server
    arguments that follow from the factors (derived_args: not confounds)."""
    valid = obs[obs["valid"]]
    found = levelchecks.contradictions(checks)
    # what the logs state is compared over the valid runs and the imported ones left out (misfiled, or of unknown
    # outcome): they are no observations of a level, but what else differs in their install is what the user
    # must see — it is stated by their logs whatever the outcome
    left_out = obs[obs["invalid_kind"].isin([analysis.MISFILED, analysis.UNKNOWN_OUTCOME])]
    found += confounds.find(valid, e.facts, e.baseline_variant, e.tolerance_mib)
    compared = [*valid["run_id"], *left_out["run_id"]]
    declared = set(e.declared_args)
    derived = derivedargs.find(compared, e.parsed, declared, derivedargs.levels_of(e.runs, list(e.ledger.factors)))
    found += confounds.log_differences(compared, e.parsed, {*declared, *(d["arg"] for d in derived)}, e.facts)
    return found, derived


def _touching(found: list[dict], checks: list[dict]) -> list[dict]:
    """The confounds as they touch the other factors' decisions: a contradicted level confounds them only where
    some of its runs took effect and some did not — contradicted in every run, it is another level held the same
    across their strata."""
    partial = {r for c in checks if c["runs_contradicted"] and (c["runs_confirmed"] or c["runs_unknown"])
               for r in c["runs_contradicted"]}
    return [c for c in found if c["kind"] != "level"] + [{**c, "runs": sorted(set(c["runs"]) & partial)}
                                                         for c in found if c["kind"] == "level"]


def _warnings(obs: pd.DataFrame, e: Evidence, measured: list[dict], found: list[dict], *,
              not_compared: list[str]) -> list[str]:
    """What the reader should know besides the decisions: confounds and left-out runs first, then the install's
    notes, small or spread effects, strata an effect was not compared in, unread GPU traces, runs left out of their
    variant's budget, cold first runs."""
    valid = obs[obs["valid"]]
    warnings = confounds.provenance_notes({r: f for r, f in e.facts.items() if r in set(valid["run_id"])})
    warnings += effects.effect_warnings(measured) + not_compared + _unread_traces(e.parsed, list(obs["run_id"]))
    warnings += _left_out_of_budget(e.ledger) + ordereffects.cold_first_runs(e.runs[e.runs["run_id"].isin(
        set(valid["run_id"]))])
    if len(valid) < len(obs) and len(valid):
        left = obs[~obs["valid"]]
        warnings.insert(0, f"{len(left)} of {len(obs)} planned runs are not observations of the server and were left "
                           f"out of every comparison ({analysis.tally(left.to_dict('records'))}): {', '.join(left['run_id'])}")
    if found:
        warnings.insert(0, f"{len(found)} confound(s): the comparison is not controlled — see `confounds`")
    return warnings


def _unread_traces(parsed: dict[str, dict], ids: list[str]) -> list[str]:
    """The runs whose GPU trace could not be read (frames.build): missing samples, said, never a zero; and the
    figures of a log that read as no finite number (a data error: left out, never a crash)."""
    said = [f"run {r}: its GPU trace could not be read ({'; '.join(map(str, parsed[r]['telemetry_unread']))}): "
            "no peak memory and no memory timeline for it" for r in ids
            if isinstance(parsed.get(r), dict) and isinstance(parsed[r].get("telemetry_unread"), list)]
    said += [f"run {r}: its GPU trace is kept thinned ({'; '.join(map(str, parsed[r]['telemetry_thinned']))}): its "
             "timeline shows those samples, its peak memory is of every sample" for r in ids
             if isinstance(parsed.get(r), dict) and isinstance(parsed[r].get("telemetry_thinned"), list)]
    for r in ids:
        bad = (parsed.get(r) or {}).get("not_finite") if isinstance(parsed.get(r), dict) else None
        if isinstance(bad, list) and bad:
            where = ", ".join(f"{b.get('field')} at line {b.get('line')}" for b in bad[:5] if isinstance(b, dict))
            said.append(f"run {r}: {len(bad)} figure(s) of its log are no finite number ({where}"
                        f"{', …' if len(bad) > 5 else ''}): a data error of the log, left out")
    return said


def inconclusive_reasons(obs: pd.DataFrame, decisions: dict[str, Decision], findings: list[dict] = (), *,
                         search: bool = False) -> list[str]:
    """Why the data cannot decide, one sentence each, naming runs and levels; empty when it can. A ready line and a
    probe that disagree come first (no verdict rests on such runs); then each decision that is not settled: an
    inconclusive status, or a decision the kit's bar does not back (analysis.settled) — except in a threshold search,
    whose answer is its intervals (thresholds.unfinished says when they are not found), not tests between its
    probes, which were never planned as a comparison (each decision still records `settled`)."""
    first = [f["detail"] for f in findings if f.get("kind") == "readiness"]
    if not obs["valid"].any():
        return first + [f"nothing can be concluded: none of the {len(obs)} planned runs is a valid observation of the "
                        f"server ({analysis.tally(obs.to_dict('records'))})"]
    return first + [d.summary if d.status in INCONCLUSIVE else _unsettled(factor, d) for factor, d in decisions.items()
                    if d.status in INCONCLUSIVE or (not search and d.status in SETTLED and d.settled is False)]


def _unsettled(factor: str, d: Decision) -> str:
    """Why a decision the runs show is not settled at the kit's bar: observed, on how many runs a side, at what p."""
    n = d.runs_per_side
    side = f"{n} run{'s' if n != 1 else ''} per side" if n else "its runs"
    if d.status == NEUTRAL:
        return (f"{factor} changed nothing on {side}: observed, not settled — at these counts even a complete "
                f"change would not be significant at 0.05 ({analysis.neutral_bar()} runs per side could show one)")
    settle = d.repetitions_to_settle
    more = f"{settle} runs per side would settle it" if settle else "more than 100 runs per side would be needed"
    what = "changes how the launch fails" if d.status == CHANGES_HOW else "decides the launch"
    # no p where no share of ready runs was tested (both levels fail, differently: how, not whether)
    p = "" if d.p_value is None else f"Fisher's exact p = {d.p_value:.2g}, not significant at 0.05; "
    return f"{factor} {what} on {side}: observed, not settled — {p}{more}"


def _sentence(reason: str, names) -> str:
    """A reason as a sentence: capitalised, unless it starts with a name that reads only as written (a factor,
    a flag, a run id: "custom_ar is undetermined", never "Custom_ar")."""
    first = reason.split(" ", 1)[0].rstrip(":,;")
    if first in names or not (first.isalpha() and first.islower()):
        return f"{reason}."
    return f"{reason[0].upper()}{reason[1:]}."


def markdown(v: Verdict, budget_summary: pd.DataFrame) -> str:
    """The verdict as prose, conclusive or not first: what decided the launch (with its counts, exact p-value and
    the repetitions that would settle it), what did not, what is unknown. Every string that came from a log, a
    host or the params is escaped (the prose is rendered as Markdown)."""
    lines = []
    if not v.conclusive:
        lines.append("**Inconclusive** — " + " ".join(md(_sentence(r, v.factors)) for r in v.inconclusive_reasons))
    lines += [_finding(f) for f in v.findings if f.get("kind") != "readiness"]  # that one leads the reasons above
    if v.reproduced is not None:
        lines.append(_reproduced(v.reproduced))
    if v.confounds:
        lines.append(f"**Not a controlled comparison** — {len(v.confounds)} confound(s), see below.")
    elif v.controlled:
        lines.append("**Controlled comparison.**")
    if said := derivedargs.markdown(v.derived_args):
        lines.append(said)
    contradicted = [c for c in v.level_checks if c.runs_contradicted]
    if contradicted:
        # one sentence per run said once, the runs counted (15 runs of one GPU said the same sentence 15 times)
        said = grouping.grouped([s for c in contradicted for s in grouping.sentences(c.detail.split("; it took effect")[0])])
        lines.append("**A level did not take effect:** " + md("; ".join(said))
                     + ". Its runs were left out of that factor's comparisons.")
    lines += _decisions(v)
    if not v.conclusive and not (v.outcome_factors or v.failure_mode_factors or v.neutral_factors):
        return "\n\n".join(lines)
    lines += [_kv_sentence(e) for e in v.effects if e.metric == "kv_tokens" and e.mean is not None
              and e.baseline_mean]
    if said := budget.break_even_markdown(budget_summary):  # in the server kind's own argument
        lines.append(said)
    return "\n\n".join(lines)


ONE_RUN = " With one run of each level this is what those runs did, not yet how reliably they do it."


def _decisions(v: Verdict) -> list[str]:
    """One line per factor, every status with its evidence (counts, exact p-value, the runs per side that would
    settle it): a flaky, confounded or unvaried decision too, on the first screen, not only in the tables below
    it. A decision the kit's bar does not back says it is observed, not settled (and one on one run a side, so)."""
    lines = []

    def said(label: str, factor: str, text: str) -> str:
        decision = v.factors.get(factor)
        evidence = decision.evidence() if decision is not None else ""
        one = decision is not None and decision.runs_per_side == 1 and decision.status in SETTLED
        unsettled = decision is not None and decision.settled is False and decision.status in SETTLED
        head = label + (", on one run per side" if one else "") + (" — observed, not settled" if unsettled else "")
        return (f"**{head}:** {text}" + (f" ({md(evidence)})" if evidence else "") + "." + (ONE_RUN if one else ""))

    for factor in (f for f, d in v.factors.items() if d.status == SEARCHED):
        lines.append(f"**Searched:** {md_code(factor)} — its answer is the threshold above, its interval per stratum "
                     "and the prediction it was checked against; each probe is one launch placed to narrow the "
                     "interval, not a side of a comparison.")
    for factor in v.outcome_factors:
        lines.append(said("Decides the launch", factor,
                          md(v.factors[factor].summary.replace(" decides the launch", "", 1))))
    for factor in v.failure_mode_factors:  # neither level starts (or the same share does): how, not whether
        lines.append(said("Changes how the launch fails", factor,
                          md(v.factors[factor].summary.replace(" changes how the launch fails", "", 1))))
    for factor in v.neutral_factors:  # with its counts: how many runs "no change" rests on
        lines.append(said("Does not change the launch outcome", factor, md_code(factor)))
    for label, names in (("Flaky", v.flaky_factors), ("Confounded", v.confounded_factors),
                         ("Undetermined", v.undetermined_factors), ("Not shown to vary", v.not_varied_factors)):
        for factor in names:
            evidence = v.factors[factor].evidence() if factor in v.factors else ""
            where = " — its runs, the confounded ones included" if label == "Confounded" else ""
            lines.append(f"**{label}:** {md_code(factor)}" + (f"{where} ({md(evidence)})" if evidence else " (see above)")
                         + ".")
    return lines


HYPOTHESES = {"instrumentation": "the instrumentation itself is wrong", "code path": "another version or code path",
              "memory": "a factor's memory before the KV sizing"}


def _reproduced(r: dict) -> str:
    """Whether the baseline failed as the diagnosed log did, n of n, and how the others ended."""
    n, of = len(r["matched"]), len(r["runs"])
    who = r.get("who", "the baseline")  # verdicts written before searches were compared have no `who`
    if not of:  # nothing to compare is no finding either way: never "not reproduced"
        return (f"**Reproduction not checked:** no valid run of {md(who)} to compare with {md_code(r['log'])} "
                f"({md(r['expected'])}).")
    head = "Reproduced" if r["reproduced"] else "Not reproduced"
    text = f"**{head}:** {md(who)} failed as {md_code(r['log'])} did ({md(r['expected'])}) in {n} of {of} runs"
    return text + (f"; {md('; '.join(r['differs']))}" if r["differs"] else "") + "."


def _finding(f: dict) -> str:
    """A consistency finding as a paragraph; the instrumentation's with which explanation the data support."""
    detail = f["detail"]
    title = FINDINGS.get(f["kind"], f["kind"])
    head = title[0].upper() + title[1:]
    text = detail.split(": ", 1)[1] if detail.startswith("the server's own instrumentation") else detail
    line = f"**{head}:** {md(text)}."
    hypotheses = f.get("hypotheses") or {}
    if hypotheses:
        line += " Which explanation the data support: " + "; ".join(
            f"{HYPOTHESES.get(k, k)} — {md(v)}" for k, v in hypotheses.items()) + "."
    return line


def _kv_sentence(e: Effect) -> str:
    """What a level does to the KV capacity, with its interval (or its single values)."""
    name = md_code(f"{e.factor}={e.level}")
    where = f" at {md('; '.join(e.strata))}" if e.strata != ["alone"] else ""
    if e.signs_disagree:
        return (f"{name} changes the KV capacity in opposite directions depending on the other factors{where}; "
                "see the effects table.")
    return (f"{name} changes the KV capacity by {e.diff:+,.0f} tokens "
            f"({e.ratio:.3f}× of {e.baseline_mean:,.0f}; {e.interval_text(lambda x: f'{x:+,.0f}')}{where}).")
