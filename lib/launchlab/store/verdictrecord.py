"""The verdict of an experiment as a typed record: verdict.json is written from it and read back into it.

Its field names are the stable interface of verdict.json (the shared ARCHITECTURE.md lists them); keys are added,
never renamed or given another meaning. `Verdict.from_json` reads a verdict.json of an older kit too (fields it
lacks take their defaults), so `launchlab ls` and `launchlab report` work on old run directories.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Literal, get_args

from launchlab.escaping import md, md_code

# a factor's status: what changing only it did to the share of ready runs (analysis.decide, verdict.build); the one
# spelling of each, which the analysis and the verdict use by name (see Decision)
# (changes_how_it_fails: the levels end differently where the same share of them start — none, say — so it changes
# how the launch fails, not whether it starts)
# (not_shown_to_vary: no run shows any of its levels taking effect and its runs at every level are not told apart by
# anything their logs give — what it did to the launch is not known, never "neutral": ledger.Ledger.varied)
# (searched: the flag a threshold search probes — its answer is the search's intervals and predictions, never a
# comparison of its probes, each one launch placed to narrow the interval: analysis.searched)
DecisionStatus = Literal["decides", "decides_in_some", "changes_how_it_fails", "neutral", "flaky", "confounded",
                         "undetermined", "not_shown_to_vary", "searched"]
STATUSES: tuple[str, ...] = get_args(DecisionStatus)
DECIDES, DECIDES_IN_SOME, CHANGES_HOW, NEUTRAL, FLAKY, CONFOUNDED, UNDETERMINED, NOT_VARIED, SEARCHED = STATUSES
DECIDING = (DECIDES, DECIDES_IN_SOME)  # whether the launch starts: the verdict's outcome_factors
OUTCOME = (*DECIDING, CHANGES_HOW)  # the launch's outcome, how it fails included (failure_mode_factors: how only)
# each status in words, for prose a reader reads (the raw values are verdict.json's); "it" is the launch
STATUS_WORDS = {DECIDES: "decides it", DECIDES_IN_SOME: "decides it at some levels of the other factors, not all",
                CHANGES_HOW: "changes only how it fails", NEUTRAL: "changes nothing",
                FLAKY: "gives different outcomes in repetitions of one variant",
                CONFOUNDED: "is confounded (something else differs between its runs)",
                UNDETERMINED: "is not determined (too few valid runs to compare)",
                NOT_VARIED: "was not shown to vary (no run shows its levels taking effect)",
                SEARCHED: "was searched (its answer is the threshold, not a comparison of its probes)"}
# what a factor did in one stratum (Stratum.state): the one spelling of each, as the statuses'
StratumState = Literal["changes", "no change", "repetitions disagree", "not compared"]
CHANGES, NO_CHANGE, DISAGREE, NOT_COMPARED = get_args(StratumState)
SETTLED = (*OUTCOME, NEUTRAL)  # what the runs said for sure, unless a confound touches them
INCONCLUSIVE = (UNDETERMINED, FLAKY, CONFOUNDED, NOT_VARIED)  # each is a reason the verdict is not conclusive


# a consistency finding's kind (consistency.py) as the verdict's headline and prose name it
FINDINGS = {"instrumentation": "the server's own instrumentation contradicts the outcome",
            "break-even": "a predicted break-even is contradicted by the runs",
            "instrumentation agrees": "the server's own instrumentation agrees with every outcome",
            "unusable": "some launches start with a KV pool too small for one request",
            "readiness": "the server's ready line and the kit's probe disagree"}
# the findings that speak against what the runs seem to show (the headline says "but" before them)
AGAINST = ("instrumentation", "break-even", "readiness")


def plain(value):
    """A value JSON can hold: numpy scalars → Python numbers, NaN → None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _pick(cls, data: dict) -> dict:
    """The keys of `data` that are fields of `cls` (a newer file may hold more; an older one fewer)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in (data or {}).items() if k in names}


@dataclass(frozen=True)
class Confound:
    """Something other than the declared factors that differs between runs, and the runs it touches."""

    kind: str
    detail: str
    runs: list[str]


@dataclass(frozen=True)
class Comparison:
    """One level against the stratum's reference level (the baseline's): ready counts and Fisher's exact test."""

    level: str
    reference: str
    ready: int
    valid: int
    reference_ready: int
    reference_valid: int
    p_value: float
    significant: bool
    # the repetitions per side at which these shares of ready runs would be significant (None: already are, the
    # shares are equal, or it takes more than 100; a verdict.json of an older kit: not said)
    repetitions_to_settle: int | None = None
    # what the test counts: "ready", or — where both levels start alike but end differently — the reference
    # level's usual outcome ("failed: kv_cache_no_memory in kv_cache"), each side's share of it
    tested: str = "ready"


@dataclass(frozen=True)
class Stratum:
    """One combination of the other factors' levels: per level its counts (planned, valid, ready, why some are
    invalid, the valid runs and the odd ones out), whether the outcome changed, the exact tests."""

    held: dict[str, str]
    changes: bool | None
    levels: dict[str, dict]
    flaky: list[str] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    # the same share of ready runs, but the levels end differently (their failure reasons or phases): a change
    fails_differently: bool = False
    # changes | no change | flaky | not compared (fewer than two levels with a valid run: `why` says what they had);
    # None: a verdict.json of an older kit
    state: str | None = None
    why: str = ""

    @property
    def compared(self) -> list[str]:
        """The levels with a valid run here, in the factor's order: what the stratum compares."""
        return [level for level, counts in self.levels.items() if counts.get("valid")]

    @property
    def complete(self) -> bool:
        """Every level planned here has a valid run."""
        return len(self.compared) == len(self.levels)

    def shares(self, c: Comparison) -> tuple[float, float]:
        """The shares a comparison's test counts, the level's and the reference's: of ready runs, or of the reference
        level's usual outcome where both start alike but end differently."""
        a, b = self.levels[c.level], self.levels[c.reference]
        if c.tested == "ready":
            return a["ready"] / a["valid"], b["ready"] / b["valid"]
        return a["outcomes"].get(c.tested, 0) / a["valid"], b["outcomes"].get(c.tested, 0) / b["valid"]

    def differs(self, c: Comparison) -> bool:
        share, reference_share = self.shares(c)
        return share != reference_share

    @classmethod
    def from_json(cls, data: dict) -> Stratum:
        picked = _pick(cls, data)
        picked["comparisons"] = [Comparison(**_pick(Comparison, c)) for c in picked.get("comparisons") or []]
        return cls(**picked)


@dataclass(frozen=True)
class Decision:
    """What one factor did to the launch outcome, with the strength of that evidence: the weakest p-value of
    the strata where it changed the outcome and the repetitions per side that would make such a split
    significant (None when it already is, or nothing changed)."""

    status: DecisionStatus
    summary: str
    strata: list[Stratum]
    p_value: float | None = None
    significant: bool | None = None
    repetitions_to_settle: int | None = None
    would_be: DecisionStatus | None = None  # a confounded decision: what it would say without the confound
    confounded_runs: list[str] = field(default_factory=list)
    # the kinds of the confounds that touch it, as the verdict judged them (a level that did not take effect
    # confounds another factor only where it took effect in some runs and not in others); empty in an older kit's
    confounded_by: list[str] = field(default_factory=list)
    runs_per_side: int | None = None  # the fewest valid runs a side has in the comparisons it rests on
    # what the summary says, claim by claim (claims.Claim.to_json: kind, subject, strata, not_observed, runs,
    # statistic, text); empty in a verdict.json of an older kit
    claims: list[dict] = field(default_factory=list)
    # settled at the kit's bar: a change significant at 0.05 (Fisher's exact), or no change on enough runs a side that
    # a complete change would have been (analysis.settled); False: what the runs did, observed, not settled (one run
    # a side never settles anything); None: a verdict.json of an older kit, which did not say
    settled: bool | None = None

    @property
    def runs(self) -> list[str]:
        """The valid runs it rests on: those of every level compared in every stratum."""
        return [r for s in self.strata for level in s.compared for r in s.levels[level]["runs"]]

    @property
    def how_only(self) -> bool:
        """It changes how the launch fails and nowhere whether it starts: never said as deciding the launch."""
        return CHANGES_HOW in (self.status, self.would_be)

    @classmethod
    def from_json(cls, data: dict) -> Decision:
        picked = _pick(cls, data)
        picked["strata"] = [Stratum.from_json(s) for s in picked.get("strata") or []]
        return cls(**picked)

    def counts(self) -> str:
        """'[custom_ar=on] 0.55: 0/2 ready; 0.85: 2/2 ready | …': every stratum's counts, invalid runs named."""
        parts = []
        for s in self.strata:
            label = ", ".join(f"{k}={v}" for k, v in s.held.items()) or "alone"
            levels = "; ".join(f"{lv}: {p['ready']}/{p['valid']} ready" + (f" ({p['invalid']})" if p["invalid"] else "")
                               for lv, p in s.levels.items())
            parts.append(f"[{label}] {levels}")
        return " | ".join(parts)

    def _basis(self) -> tuple[str, list[tuple[Stratum, Comparison]]]:
        """The status the evidence is for (a confounded decision: the one it would have without the confound)
        and the comparisons it rests on: where the outcome changed (deciding), every one (neutral), those of the
        strata whose repetitions disagree (flaky); none for an undetermined factor."""
        status = self.would_be if self.status == "confounded" and self.would_be else self.status
        pairs = [(s, c) for s in self.strata for c in s.comparisons]
        if status == "neutral":
            return status, pairs
        if status == "flaky":
            return status, [(s, c) for s, c in pairs if s.flaky]
        if status in DECIDING:
            return status, [(s, c) for s, c in pairs
                            if s.changes and c.ready * c.reference_valid != c.reference_ready * c.valid]
        if status == CHANGES_HOW:  # the same share start: the tests of how they ended
            return status, [(s, c) for s, c in pairs if s.changes]
        return status, []

    def evidence(self) -> str:
        """'0.85 2/2 vs 0.55 0/2 ready at custom_ar=on; …; Fisher's exact p = 0.33, not significant at 0.05 — 4 runs
        per side would settle it', from the strata where the outcome changed; for a neutral factor, the counts of
        every stratum ('on 2/2 vs off 2/2 ready at mem_fraction=0.85; …; the same share ready in every stratum');
        for a flaky one, the strata whose repetitions disagree; for a confounded one, what it would rest on
        without the confound (its confounded runs included). Empty for an undetermined factor."""
        status, pairs = self._basis()
        splits = [f"{c.level} {c.ready}/{c.valid} vs {c.reference} {c.reference_ready}/{c.reference_valid} ready"
                  + (f" at {', '.join(f'{k}={v}' for k, v in s.held.items())}" if s.held else "") for s, c in pairs]
        p, settle = self.p_value, self.repetitions_to_settle
        if status == FLAKY:  # no p of the decision itself: the disagreeing strata's own tests
            p = max((c.p_value for _, c in pairs), default=None)
            needed = [c.repetitions_to_settle for _, c in pairs if not c.significant]
            settle = None if not needed or None in needed else max(needed)
        if not splits or p is None:
            return ""
        if status == "neutral":
            return f"{'; '.join(splits)}; the same share ready in every stratum (Fisher's exact p = 1)"
        strength = f"Fisher's exact p = {p:.2g}" + (" in the weakest stratum" if len(splits) > 1 else "")
        if p < 0.05:
            return f"{'; '.join(splits)}; {strength}, significant at 0.05"
        settle_text = (f"{settle} runs per side would settle it" if settle else
                       "more than 100 runs per side would be needed to settle it")
        return f"{'; '.join(splits)}; {strength}, not significant at 0.05 — {settle_text}"


@dataclass(frozen=True)
class Effect:
    """A level against the baseline level on one metric, matched within strata (analysis.factor_effects)."""

    factor: str
    level: str
    metric: str
    n: int
    mean: float | None = None
    sd: float | None = None
    baseline_n: int | None = None  # None: a verdict.json of an older kit, which did not say
    baseline_mean: float | None = None
    diff: float | None = None
    ratio: float | None = None
    strata: list[str] = field(default_factory=lambda: ["alone"])
    signs_disagree: bool = False
    baseline_level: str | None = None
    min: float | None = None  # of the level's values compared
    max: float | None = None
    ci_low: float | None = None  # the 95 % interval of the matched differences (n ≥ 2 per side)
    ci_high: float | None = None
    pairs: int | None = None
    values: list[float] | None = None  # n = 1: the single value, and no interval
    baseline_values: list[float] | None = None
    # each stratum's means and difference ({stratum, n, baseline_n, mean, baseline_mean, diff}); `mean` and
    # `baseline_mean` above are their unweighted means, which no run need be near when the strata differ
    stratum_diffs: list[dict] | None = None
    # every matched difference the same: ci_low = ci_high = that difference, a point that says no spread was seen
    # in so few pairs, not that the difference is known to that precision (the report shows no interval for it)
    diffs_identical: bool = False

    @classmethod
    def from_analysis(cls, effect: dict) -> Effect:
        return cls(**{k: plain(v) if not isinstance(v, list) else v for k, v in _pick(cls, effect).items()})

    @property
    def no_spread(self) -> bool:
        """The interval is a point (a verdict.json of an older kit did not say so: its ci_low = ci_high)."""
        return self.diffs_identical or (self.ci_low is not None and self.ci_low == self.ci_high)

    def interval(self, fmt=lambda x: f"{x:+,.4g}") -> str:
        """'95 % CI −1.2 to +0.4'; where the matched differences are all the same, that they are (no interval: a
        zero-width one would read as precise); 'single runs, no interval' when a side has one run; else ''."""
        pairs = self.pairs or self.n
        if self.no_spread:
            same = "identical values" if self.ci_low == 0 else f"the same difference, {fmt(self.ci_low)},"
            return f"{same} in each of the {pairs} matched pairs: no spread, no interval"
        if self.ci_low is not None and self.ci_high is not None:
            return f"95 % CI {fmt(self.ci_low)} to {fmt(self.ci_high)}"
        if self.values is not None or self.baseline_values is not None:
            return "single runs, no interval"
        return ""

    def interval_text(self, fmt=lambda x: f"{x:+,.4g}") -> str:
        """'95 % CI −1.2 to +0.4; n=3 vs 3' (see `interval`), with each side's n."""
        said = self.interval(fmt)
        return f"{said}; n={self.n} vs {self.baseline_n}" if said else f"n={self.n} vs {self.baseline_n}, no interval"


@dataclass(frozen=True)
class LevelCheck:
    """Whether one factor level took effect, by one check (levelchecks.py): the runs whose server log confirms it,
    contradicts it, or does not show it."""

    factor: str
    level: str
    check: str
    runs_confirmed: list[str]
    runs_contradicted: list[str]
    runs_unknown: list[str]
    detail: str = ""

    def counts(self) -> dict:
        """The row of the report's level-check table."""
        return {"factor": self.factor, "level": self.level, "check": self.check,
                "confirmed": len(self.runs_confirmed), "contradicted": len(self.runs_contradicted),
                "not shown": len(self.runs_unknown)}


@dataclass(frozen=True)
class ExcludedRun:
    """A planned run that is no observation of the server (a kit error, interrupted, missing, …), with why."""

    run_id: str
    why: str
    detail: str = ""
    variant: str | None = None

    def markdown(self) -> str:
        return f"- {md_code(self.run_id)}: {md(self.why)} — {md(self.detail)}"


@dataclass
class Verdict:
    """verdict.json. `factors` holds one Decision per factor; the *_factors lists name them by status
    (outcome_factors: those that decide, in every or in some strata)."""

    controlled: bool
    conclusive: bool
    inconclusive_reasons: list[str]
    baseline: str
    outcome_factors: list[str]
    neutral_factors: list[str]
    undetermined_factors: list[str]
    factors: dict[str, Decision]
    confounds: list[Confound]
    effects: list[Effect]
    level_checks: list[LevelCheck]
    excluded_runs: list[ExcludedRun]
    budget: list[dict]
    warnings: list[str]
    flaky_factors: list[str] = field(default_factory=list)
    confounded_factors: list[str] = field(default_factory=list)
    # the factors that change how the launch fails and nowhere whether it starts (never in outcome_factors, which
    # a script reads as "decides the launch"), and those no run showed taking effect (Decision NOT_VARIED)
    failure_mode_factors: list[str] = field(default_factory=list)
    not_varied_factors: list[str] = field(default_factory=list)
    derived_args: list[dict] = field(default_factory=list)  # derivedargs.find: arguments that follow the levels
    warmup_runs: list[dict] = field(default_factory=list)  # never compared: [{run_id, host, status, startup_s, …}]
    kit_version: str | None = None  # the kit that wrote it (a summary reuses only its own kit's verdict.json)
    thresholds: dict | None = None
    # consistency checks across the evidence (consistency.py): [{kind, detail, runs, hypotheses?}] — the
    # instrumentation against the outcome, a break-even against what the runs did; a finding leads the prose
    findings: list[dict] = field(default_factory=list)
    # an experiment drafted from a failing log (params `reproduce:`): whether its baseline failed the same way —
    # {log, expected, runs, matched, differs, reproduced} (consistency.reproduction); None otherwise
    reproduced: dict | None = None

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        if self.thresholds is None:
            out.pop("thresholds")
        return out

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        picked = _pick(cls, data)
        defaults = {"controlled": False, "conclusive": True,  # as the kit read a file without the key before
                    "inconclusive_reasons": [], "baseline": "",
                    "outcome_factors": [], "neutral_factors": [], "undetermined_factors": [], "factors": {},
                    "confounds": [], "effects": [], "level_checks": [], "excluded_runs": [], "budget": [],
                    "warnings": []}
        picked = {**defaults, **picked}
        picked["factors"] = {f: Decision.from_json(d) for f, d in picked["factors"].items()}
        picked["confounds"] = [Confound(**_pick(Confound, c)) for c in picked["confounds"]]
        picked["effects"] = [Effect.from_analysis(e) for e in picked["effects"]]
        picked["level_checks"] = [LevelCheck(**_pick(LevelCheck, c)) for c in picked["level_checks"]]
        picked["excluded_runs"] = [ExcludedRun(**_pick(ExcludedRun, r)) for r in picked["excluded_runs"]]
        # a kit before failure_mode_factors listed a factor that changes only how the launch fails among the outcome
        # factors: read as this kit writes it, so `ls` and `compare` never take it for one that decides the launch
        how = [f for f in picked["outcome_factors"] if f in picked["factors"] and picked["factors"][f].how_only]
        picked["outcome_factors"] = [f for f in picked["outcome_factors"] if f not in how]
        picked["failure_mode_factors"] = list(dict.fromkeys([*picked.get("failure_mode_factors", []), *how]))
        return cls(**picked)

    def _strength(self, factor: str) -> str:
        """'mem_fraction (p = 0.33, not significant: …)' for a decision the exact test does not back ('1 run per side;'
        first where it rests on one); the name alone for one it does (or a verdict.json of an older kit, which has
        no p-value)."""
        d = self.factors.get(factor)
        if d is None or d.p_value is None or d.significant:
            return factor
        settle = f"{d.repetitions_to_settle} runs per side would settle it" if d.repetitions_to_settle else "unsettled"
        one = "1 run per side; " if d.runs_per_side == 1 else ""
        return f"{factor} ({one}p = {d.p_value:.2g}, not significant: {settle})"

    def headline(self, width: int | None = None) -> str:
        """The verdict in one line, inconclusive first (the CLI's summary line and `launchlab ls`)."""
        if not self.conclusive:
            line = "INCONCLUSIVE: " + (self.inconclusive_reasons or ["?"])[0]
        else:
            control = "controlled" if self.controlled else "NOT controlled"
            deciding = ", ".join(self._strength(f) for f in self.outcome_factors) or "no factor"
            line = f"{control}; decides the launch: {deciding}"
            if self.failure_mode_factors:
                line += f"; changes how it fails: {', '.join(self._strength(f) for f in self.failure_mode_factors)}"
            line += "".join(f"; {FINDINGS.get(f.get('kind'), f.get('kind'))}" for f in self.findings)
        if self.reproduced is not None and self.reproduced.get("runs"):
            r = self.reproduced
            line += (f"; {'reproduced' if r['reproduced'] else 'NOT reproduced'} "
                     f"{len(r['matched'])}/{len(r['runs'])}")
        if width is None or len(line) <= width:
            return line
        cut = line[:width - 1]
        return (cut[:cut.rfind(" ")] if " " in cut else cut).rstrip(",;:") + " …"  # at a word, not mid-word
