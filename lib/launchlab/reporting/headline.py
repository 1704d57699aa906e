"""The answer at the top of every report: one sentence that answers the question, its strength in words and numbers,
and what would settle it — built once from the verdict record and shown by the summary, report.md and the CLI.

It never says more than the verdict: an inconclusive verdict leads with "Inconclusive" and why; a decision the
exact test does not back says so in its strength; the break-even is the server's own number, from its log.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from launchlab import search
from launchlab.errors import LaunchlabError
from launchlab.escaping import html_text, md, md_spans, visible
from launchlab.numtext import significant
from launchlab.store import rundir
from launchlab.store.verdictrecord import (
    AGAINST,
    CHANGES_HOW,
    CONFOUNDED,
    DECIDING,
    FINDINGS,
    FLAKY,
    NEUTRAL,
    NOT_VARIED,
    UNDETERMINED,
    Decision,
    Verdict,
)
from launchlab.verdicts import analysis, budget, claims, consistency, ledger

NO_OBSERVATION = "no valid observation of the server"
# a threshold search's stratum that found no threshold: (what happened, what would settle it) in words
OPEN_SEARCH = {
    search.SEARCHING: ("the batch stopped before the search ended", search.SEARCHING),  # → the resume command
    search.NOISY: ("repetitions of one probed value disagree", "more repetitions per probed value would settle it"),
    search.NON_MONOTONE: ("a lower value started where a higher one did not",
                          "repetitions at the values that disagree would settle it"),
    search.NOT_BRACKETED: ("the outcome did not change inside the range",
                           "a range that brackets the threshold (wider low and high) would settle it"),
    search.NO_OBSERVATION: ("no probe was a valid observation of the server",
                            "probes that launch the server and end, ready or failed, would settle it"),
}


@dataclass(frozen=True)
class Headline:
    """lead: the one sentence that answers the question; strength: how strong the evidence is, in words and numbers;
    settle: what would settle it (empty when nothing would change it). Plain text: each renderer escapes it."""

    lead: str
    strength: str
    settle: str = ""

    def lines(self) -> list[str]:
        return [self.lead, f"Strength: {self.strength}."] + ([f"{_capital(self.settle)}."] if self.settle else [])

    def text(self) -> str:
        """For a terminal: no control character of a params value reaches it raw."""
        return "\n".join(visible(line) for line in self.lines())

    def markdown(self) -> str:
        """report.md's and the notebook's first lines: the lead in bold, then the strength and what would settle it
        (the kit's own `commands` stay code spans; every other character is escaped)."""
        said = [f"**{md(self.lead)}**", "", f"Strength: {md(self.strength)}."]
        if self.settle:
            said += ["", f"{md_spans(_capital(self.settle))}."]
        return "\n".join(said)

    def html(self) -> str:
        """The summary's first box (class `ll-headline`, styled by the offline template)."""
        settle = f'<p class="ll-settle">{_html_spans(_capital(self.settle))}.</p>' if self.settle else ""
        return (f'<div class="ll-headline"><p class="ll-lead">{html_text(self.lead)}</p>'
                f'<p class="ll-strength">Strength: {html_text(self.strength)}.</p>{settle}</div>')


def _html_spans(text: str) -> str:
    """Escaped HTML in which the kit's own `code` spans (a command to run) are code, as md_spans does for Markdown."""
    parts = text.split("`")
    if len(parts) % 2 == 0:
        return html_text(text)
    return "".join(f"<code>{html_text(p)}</code>" if i % 2 else html_text(p) for i, p in enumerate(parts))


def of(v: Verdict, *, planned: int, resume: str = "", relative: bool = False) -> Headline:
    """The headline of a verdict. planned: the runs the plan asked for; resume: the command that finishes an
    unfinished batch (`launchlab run PARAMS --resume RUN_DIR`), said when some planned run has no final status;
    relative: its paths are said from the folder that holds them both (a shared report's), which is said too —
    the folder's name would say where it lay on the renderer's disk."""
    unfinished = [r for r in v.excluded_runs if r.why in (ledger.MISSING, ledger.INTERRUPTED)]
    where = " from the folder that holds both its paths" if relative and resume else ""
    finish = (f"finish the batch ({len(unfinished)} of {planned} runs interrupted or not run) with `{resume}`{where}"
              if unfinished and resume else "")
    if v.thresholds is not None:
        return _search(v, finish, resume=resume, where=where)
    valid = planned - len(v.excluded_runs)
    if valid <= 0 or not v.factors:
        reason = (v.inconclusive_reasons or [f"nothing can be concluded: none of the {planned} planned runs is a "
                                             "valid observation of the server"])[0]
        return Headline(_capital(reason) + ".", NO_OBSERVATION,
                        finish or "runs that launch the server and end, ready or failed, would settle it (see why "
                                  "each run is not an observation)")
    lead = _lead(v)
    strength, settle = _strength(v)
    return Headline(lead, strength, finish or settle)


def of_run_dir(run_dir: Path) -> Headline | None:
    """The headline of a run directory's verdict.json (the CLI's last lines); None where it has none yet."""
    directory = rundir.RunDir(run_dir)
    try:
        verdict = Verdict.from_json(rundir.read_json(directory.verdict_file))
        manifest = directory.manifest()
    except (OSError, LaunchlabError):
        return None
    return of(verdict, planned=len(manifest.run_ids), resume=manifest.resume_command(directory.path))


def _capital(text: str, names=()) -> str:
    """Capitalised, unless it starts with a name that reads only as written (a factor: never "Num_blocks")."""
    first = text.split(" ", 1)[0].rstrip(":,;")
    return text if first in names or text.startswith("`") else text[:1].upper() + text[1:]


def _levels(d: Decision, kind: str | None = None) -> str:
    """'0.004 starts (3/3 ready at each), 0.002 fails (kv_cache_no_memory in kv_cache; 0/3 ready at each)': each
    level's valid runs in each stratum where the factor changed the outcome (all strata where it changed it
    nowhere) — per stratum, as the exact test compares them (summed, 6/6 against 0/6 read as stronger evidence than
    the 3 a side its p-value is of) — with how most of them ended ("mostly" where not all did; each way with its
    count where no one way is the most)."""
    strata = _claimed(d, kind) or [s for s in d.strata if s.changes] or d.strata
    counts: dict[str, list] = {}
    for s in strata:
        for level, p in s.levels.items():
            c = counts.setdefault(level, [[], {}])
            c[0].append((int(p.get("ready") or 0), int(p.get("valid") or 0)))
            for how, n in (p.get("outcomes") or {}).items():
                c[1][how] = c[1].get(how, 0) + n
    parts = []
    for level, (per_stratum, hows) in counts.items():
        ready, valid = sum(r for r, _ in per_stratum), sum(v for _, v in per_stratum)
        if not valid:
            parts.append(f"{level} no valid run")
            continue
        said = _counts(per_stratum)
        if hows and list(hows.values()).count(max(hows.values())) > 1:  # no one way is the most: say each
            ways = ", ".join(f"{how} ×{n}" for how, n in sorted(hows.items(), key=lambda hn: -hn[1]))
            parts.append(f"{level} ends as often one way as another ({ways}; {said})")
            continue
        how = max(hows, key=hows.get) if hows else ("starts" if ready == valid else "fails")
        verb, _, why = how.partition(": ")  # 'fails: kv_cache_no_memory in kv_cache'
        verb = verb if len(hows) <= 1 else f"mostly {verb}"
        if verb.endswith(")") and not why:  # 'starts but its first request fails (kv_cache_no_memory)'
            verb, _, why = verb[:-1].rpartition(" (")
        parts.append(f"{level} {verb} ({why + '; ' if why else ''}{said})")
    return ", ".join(parts)


def _claimed(d: Decision, kind: str | None) -> list:
    """The strata a claim of `kind` rests on (the places `_where` says), in their order; [] without such a claim
    (an older kit's verdict: the strata where the outcome changed stand in)."""
    claim = next((c for c in d.claims if c.get("kind") == kind), None) if kind else None
    if claim is None:
        return []
    named = set(claim.get("strata") or [])
    return [s for s in d.strata if claims.label(s.held) in named]


def _counts(per_stratum: list[tuple[int, int]]) -> str:
    """'3/3 ready'; '3/3 ready at each' (the same in every stratum said); '3/3, 2/3 ready' (stratum by stratum, in
    the order the places are said, 'none valid' where the level has no valid run in one)."""
    if len(set(per_stratum)) == 1:
        r, v = per_stratum[0]
        return f"{r}/{v} ready" + (" at each" if len(per_stratum) > 1 else "")
    return ", ".join(f"{r}/{v}" if v else "none valid" for r, v in per_stratum) + " ready"


def _where(d: Decision, kind: str) -> str:
    """Where a claim of `kind` holds (' at every level of graphs', ' at fraction=0.004, graphs=off'), from the
    decision's claim records as claims.py places them; from its summary's words in a verdict of a kit that wrote
    no claims."""
    claim = next((c for c in d.claims if c.get("kind") == kind), None)
    if claim is not None and d.strata:
        return claims.where(claim.get("strata") or [], len(claim.get("strata") or []) == len(d.strata),
                            list(d.strata[0].held))
    summary = d.summary.split(" — ", 1)[0]
    for verb in ("decides the launch", "changes how the launch fails", "does not change the launch outcome"):
        if verb in summary:
            return summary.split(verb, 1)[1]
    return ""


def _says(factor: str, d: Decision, status: str) -> str:
    if status in DECIDING:
        levels = _levels(d, claims.DECIDES)
        # a level that starts but fails its first request: what it decides is whether the server serves
        what = "decides the launch" if " starts but " in levels else "decides whether the launch starts"
        return f"{factor} {what}{_where(d, claims.DECIDES)}: {levels}"
    if status == CHANGES_HOW:
        return (f"{factor} changes how the launch fails, not whether it starts{_where(d, claims.CHANGES_HOW)}: "
                f"{_levels(d, claims.CHANGES_HOW)}")
    return f"{factor} does not change the launch outcome{_where(d, claims.SAME)}"  # where compared, never beyond


def _break_even(v: Verdict) -> str:
    """'; the server's own numbers put the break-even of --mem-fraction-static at 0.0029' (a range where the variants
    differ), or '' where the kind's budget predicts none."""
    summary = pd.DataFrame(v.budget)
    found = budget.break_even_of(summary) if not summary.empty else None
    if found is None:
        return ""
    values = sorted({float(x) for x in summary[found.column] if pd.notna(x)})
    if not values:
        return ""
    at = significant(values[0]) if significant(values[0]) == significant(values[-1]) else \
        f"{significant(values[0])} to {significant(values[-1])}"
    return f"; the server's own numbers put the break-even of {found.arg} at {at}"


def _levels_of(variant: str) -> dict[str, str]:
    """'custom_ar=on, mem_fraction=0.75' → {'custom_ar': 'on', 'mem_fraction': '0.75'} (a budget row's variant)."""
    return dict(part.partition("=")[::2] for part in variant.split(", ") if "=" in part)


def _mechanism(v: Verdict, factor: str) -> tuple[str, dict[str, float]]:
    """How a deciding factor decides, from the server's own figures: the memory one level takes before the KV
    cache is sized (consistency.MEMORY_BEFORE_KV, against the baseline level) and the break-even each level's runs
    give, where the levels' break-evens do not overlap ('custom_ar=on takes +0.62 GiB a rank at distributed init
    (with its all-reduce buffers), which moves the break-even of mem_fraction_static from 0.748 (off) to 0.753
    (on)'); and each level's highest break-even. ('', {}) where the factor takes no memory of its own there."""
    summary = pd.DataFrame(v.budget)
    found = budget.break_even_of(summary) if not summary.empty else None
    by_level: dict[str, list[float]] = {}
    if found is not None:
        for variant, value in zip(summary["variant"], summary[found.column], strict=True):
            level = _levels_of(str(variant)).get(factor)
            if level is not None and pd.notna(value):
                by_level.setdefault(level, []).append(float(value))
    took = [e for e in v.effects if e.factor == factor and e.metric in consistency.MEMORY_BEFORE_KV
            and e.diff is not None and abs(e.diff) >= consistency.MEMORY_EFFECT_GIB]
    said = [f"{factor}={e.level} takes {e.diff:+,.2f} GiB a rank {consistency.phase_words(e.metric)}" for e in took]
    ranked = sorted(by_level.items(), key=lambda kv: min(kv[1]))
    moved = ""
    if len(ranked) == 2 and max(ranked[0][1]) < min(ranked[1][1]):  # two levels, apart: the factor moves it
        (low, lows), (high, highs) = ranked
        moved = (f"the break-even of {found.arg} from {_span(lows)} ({factor}={low}) to {_span(highs)} "
                 f"({factor}={high})")
    if not said:  # break-evens apart with no memory of the factor's own to move them: the logs' drift, no mechanism
        return "", {}
    text = " and ".join(said) + (f", which moves {moved}" if moved else "")
    return text, {level: max(values) for level, values in by_level.items()}


def _span(values: list[float]) -> str:
    low, high = significant(min(values)), significant(max(values))
    return low if low == high else f"{low} to {high}"


def _fix(v: Verdict, factor: str, highest: dict[str, float]) -> str:
    """What makes the launch start, from the evidence: the memory flag above the highest break-even the failing level
    gave, or the level of the factor that started everywhere it was compared ('to start: raise
    --mem-fraction-static above 0.753, or set custom_ar=off')."""
    summary = pd.DataFrame(v.budget)
    found = budget.break_even_of(summary) if not summary.empty else None
    d = v.factors[factor]
    starts = [lv for lv in _level_outcomes(d) if _level_outcomes(d)[lv]]
    ways = []
    if found is not None and highest:
        ways.append(f"raise {found.flag} above {significant(max(highest.values()))}")
    if len(starts) == 1:
        ways.append(f"set {factor}={starts[0]}")
    return f"to start: {', or '.join(ways)}" if ways else ""


def _level_outcomes(d: Decision) -> dict[str, bool]:
    """Each level of a deciding factor: whether all its valid runs started in every stratum where it decides."""
    strata = _claimed(d, claims.DECIDES) or [s for s in d.strata if s.changes]
    out: dict[str, bool] = {}
    for s in strata:
        for level, p in s.levels.items():
            valid, ready = int(p.get("valid") or 0), int(p.get("ready") or 0)
            if valid:
                out[level] = out.get(level, True) and ready == valid
    return out


def _how(v: Verdict) -> str:
    """'; custom_ar=on takes … (its mechanism); to start: …' for the first deciding factor whose figures show how it
    decides (the fix only where the verdict is conclusive); else the server's break-even alone (_break_even)."""
    for factor in v.outcome_factors:
        if factor not in v.factors:
            continue
        mechanism, highest = _mechanism(v, factor)
        if mechanism:
            fix = _fix(v, factor, highest) if v.conclusive else ""
            return f"; {mechanism}" + (f"; {fix}" if fix else "")
    return _break_even(v)


def _lead(v: Verdict) -> str:
    """The sentence: inconclusive and why first (a ready line and probe that disagree before anything); then what
    decides, where, by how much; what does not; what the server's own figures say of it."""
    deciding = [f for f in [*v.outcome_factors, *v.failure_mode_factors] if f in v.factors]
    said = [_says(f, v.factors[f], v.factors[f].status) for f in deciding]
    said += [_says(f, v.factors[f], NEUTRAL) for f in v.neutral_factors if f in v.factors]
    findings = "".join(f"; {'but ' if f.get('kind') in AGAINST else ''}{FINDINGS.get(f.get('kind'), f.get('kind'))}"
                       for f in v.findings if f.get("kind") != "readiness")
    if v.conclusive:
        control = "" if v.controlled else f"Not controlled ({len(v.confounds)} confound(s)): "
        return _capital(control + ("; ".join(said) or "no factor changes the launch outcome") + _how(v)
                        + findings, v.factors) + "."
    blocking = (CONFOUNDED, FLAKY, UNDETERMINED, NOT_VARIED)
    first, *rest = [f for f in v.factors if v.factors[f].status in blocking] or [""]
    readiness = [f["detail"] for f in v.findings if f.get("kind") == "readiness"]
    why = readiness[0] if readiness else _why_not(v, first) if first else (v.inconclusive_reasons or ["?"])[0]
    rest = [first, *rest] if readiness and first else rest
    others = _others(v, rest)
    known = f"; {'; '.join(said)}" if said else ""
    return f"Inconclusive: {why}{others}{known}{_how(v)}{findings}."


def _why_not(v: Verdict, factor: str) -> str:
    """Why one factor leaves the verdict inconclusive, in a clause: what it would say, and what stands in the way."""
    d = v.factors[factor]
    if d.status == CONFOUNDED:
        # the kinds the verdict found touching it, in its order (the `## Verdict` section's): recomputed from every
        # confound, a level that did not take effect in any run of either side was named too (h200-sglang-kv)
        kinds = d.confounded_by or sorted({c.kind for c in v.confounds if set(c.runs) & set(d.confounded_runs)})
        n = len(d.confounded_runs)
        would = (_says(factor, d, d.would_be).replace(" decides", " would decide", 1)
                 .replace(" does not change", " would not change", 1).replace(" changes how", " would change how", 1)
                 if d.would_be else f"{factor} cannot be judged")
        which = (f"a confound ({kinds[0]}) touches" if len(kinds) == 1 else
                 f"confounds ({', '.join(kinds)}) touch" if kinds else "a confound touches")
        return f"{would}, but {which} {n} run{'s' if n != 1 else ''} it rests on"
    if d.status == FLAKY:
        return f"{factor} is flaky: repetitions of one variant disagree ({_levels(d, claims.DISAGREES)})"
    return d.summary.split(" (", 1)[0]


def _others(v: Verdict, factors: list[str]) -> str:
    """'; graphs and debug are confounded too; custom_ar is undetermined too'."""
    by: dict[str, list[str]] = {}
    for f in factors:
        by.setdefault(v.factors[f].status, []).append(f)
    return "".join(f"; {' and '.join(names)} {'is' if len(names) == 1 else 'are'} {status} too"
                   for status, names in by.items())


def weakest_p(v: Verdict) -> float | None:
    """The p-value the headline's strength is of (an index sorts by it); None where no factor was tested."""
    found = None if v.thresholds is not None else _weakest(v)  # a search's strength is its intervals, not a test
    return found[1].p_value if found else None


def _weakest(v: Verdict) -> tuple[str, Decision] | None:
    """The decision the headline's strength is of: the weakest of those that decide or would decide (the largest
    p-value); else the weakest neutral one."""
    def rank(statuses):
        found = [(f, d) for f, d in v.factors.items()
                 if (d.would_be if d.status == CONFOUNDED else d.status) in statuses and d.p_value is not None]
        return max(found, key=lambda fd: fd[1].p_value, default=None)
    return rank((*DECIDING, CHANGES_HOW)) or rank((NEUTRAL,))


def _no_test(v: Verdict) -> tuple[str, str]:
    """_strength where no factor was tested: why not, and what would test it."""
    undetermined = [f for f in v.factors if v.factors[f].status == UNDETERMINED]
    flaky = [f for f in v.factors if v.factors[f].status == FLAKY]
    if flaky:  # compared on valid runs of both levels, but a variant's own repetitions disagree
        names = ", ".join(flaky)
        return (f"no exact test decides: repetitions of the same variant of {names} disagree, so such a "
                "variant has no one outcome to compare",
                f"more repetitions of the variants whose runs disagree would settle whether {names} "
                f"{'changes' if len(flaky) == 1 else 'change'} the outcome"
                + (f", and valid runs of every level of {', '.join(undetermined)}" if undetermined else ""))
    unvaried = [f for f in v.factors if v.factors[f].status == NOT_VARIED]
    if unvaried and not undetermined:  # compared, but nothing shows its levels differed
        return (f"no exact test counts: no run shows {', '.join(unvaried)} taking effect",
                "levels that take effect where the server's log shows it would settle it (see the level checks "
                "and what would show it)")
    return ("no exact test: no factor was compared on valid runs of both its levels",
            f"valid runs of every level of {', '.join(undetermined) or 'the factors'} would settle it (see the "
            "level checks)")


def _strength(v: Verdict) -> tuple[str, str]:
    """('not significant: p = 0.1, Fisher's exact test, 3 runs a side', '4 runs a side would settle it')."""
    found = _weakest(v)
    if found is None:
        return _no_test(v)
    factor, d = found
    side = f"{d.runs_per_side} run{'s' if d.runs_per_side != 1 else ''} a side" if d.runs_per_side else "runs a side unknown"
    test = f"p = {d.p_value:.2g}, Fisher's exact test, {side}"
    status = d.would_be if d.status == CONFOUNDED else d.status
    if status == NEUTRAL:
        words = "no difference seen"
    else:
        words = "significant at 0.05" if d.significant else "not significant at 0.05"
    words += f" ({factor})" if len(v.factors) > 1 else ""
    if v.confounded_factors:
        return (f"{words}: {test}; not a controlled comparison ({len(v.confounds)} confound(s))",
                (f"{d.repetitions_to_settle} runs a side" if d.repetitions_to_settle and not d.significant
                 else "the same comparison") + " without the confounds (see Confounds) would settle it")
    if any(v.factors[f].status in (FLAKY, UNDETERMINED, NOT_VARIED) for f in v.factors):
        flaky_or_not = [f for f in v.factors if v.factors[f].status in (FLAKY, UNDETERMINED, NOT_VARIED)]
        return f"{words}: {test}", f"valid, agreeing runs of every level of {', '.join(flaky_or_not)} would settle it"
    if status in (*DECIDING, CHANGES_HOW) and not d.significant:
        settle = (f"{d.repetitions_to_settle} runs a side would settle it" if d.repetitions_to_settle
                  else "more than 100 runs a side would be needed")
        return f"{words}: {test}", settle
    if status == NEUTRAL and d.settled is False:  # too few runs a side to have seen a change at the kit's bar
        return f"{words}, observed, not settled: {test}", f"{analysis.neutral_bar()} runs a side would settle it"
    return f"{words}: {test}", ""


def _search(v: Verdict, finish: str, *, resume: str = "", where: str = "") -> Headline:
    """A threshold search: the interval per stratum next to the server's predicted break-even."""
    t = v.thresholds or {}
    flag, strata = t.get("flag", "the flag"), t.get("strata") or []
    said: dict[str, list[str]] = {}  # what a stratum found → the strata that found it (said once)
    open_ = []
    for row in strata:
        if row.get("state") == "converged":
            predicted = row.get("predicted_break_even")
            side = ("" if predicted is None or predicted != predicted else
                    f" (the server's own numbers predict {significant(predicted)}, "
                    f"{'inside' if row.get('predicted_in_interval') else 'OUTSIDE'} it)")
            found = f"the launch starts from a {flag} in ({row['interval_low']:g}, {row['interval_high']:g}]{side}"
        else:
            open_.append(row)
            found = f"no threshold yet: {OPEN_SEARCH.get(row.get('state'), (row.get('state'), ''))[0]}"
        said.setdefault(found, []).append(str(row["stratum"]))
    def placed(names: list[str]) -> str:  # not `where`: the parameter of that name says where the command runs
        if len(strata) == 1:
            return ""
        return " in every stratum" if len(said) == 1 else f" at {'; '.join(names)}"

    said = [found + placed(names) for found, names in said.items()]
    said += [("but " if f.get("kind") in AGAINST else "") + FINDINGS.get(f.get("kind"), f.get("kind"))
             for f in v.findings]  # what the server's own figures say of the probes (a start that cannot serve)
    lead = _capital("; ".join(said) or f"no threshold of {flag} found") + "."
    if open_:
        lead = "Inconclusive: " + lead[0].lower() + lead[1:]
    launches = sum(int(r.get("launches") or r.get("probes") or 0) for r in strata)
    strength = (f"a threshold search: {launches} launches, each interval as narrow as the resolution "
                f"{t.get('resolution')}" if not open_ else f"a threshold search not finished in {len(open_)} stratum(s)")
    todo = list(dict.fromkeys(OPEN_SEARCH.get(r.get("state"), ("", ""))[1] for r in open_))
    todo = [f"`{resume or 'launchlab run PARAMS --resume RUN_DIR'}`{where if resume else ''} would continue the search"
            if t == search.SEARCHING else t for t in todo if t]
    settle = finish or "; ".join(todo)
    return Headline(lead, strength, settle)
