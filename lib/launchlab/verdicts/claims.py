"""What the verdict says, as claim records, and each claim's sentence generated from its record alone.

A claim has a kind, a subject (the factor), the strata it rests on (each a combination of the other factors'
levels that was compared), the strata it says nothing of and why (never compared: a level without a valid run
there), the runs it rests on, and its statistic (counts, Fisher's exact p). Its sentence may say "every",
"decides" without a place, or "does not change" only over strata it has an observation for; every stratum it has
none for is named as not compared, with why. Nothing else writes a decision's words (analysis.decide builds the
records; the verdict joins the sentences).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from launchlab.store.verdictrecord import CHANGES, DISAGREE, FLAKY, NO_CHANGE, UNDETERMINED, Stratum

# a claim's kind: what one factor did in the strata the claim names
DECIDES = "decides the launch"  # the share of launches that start differs between its levels
CHANGES_HOW = "changes how it fails"  # the same share start (none, say), but they end differently
SAME = "does not change"  # the same outcome at every level compared
DISAGREES = "repetitions disagree"  # a level's repetitions disagree: what the level does there is unknown
UNCOMPARED = "not compared"  # fewer than two levels have a valid run: nothing is known there
KINDS = (DECIDES, CHANGES_HOW, SAME, DISAGREES, UNCOMPARED)
# words a sentence may use only over every stratum there is, each of them observed
UNIVERSAL = ("every level of", "only at", "at every", "in every stratum")


@dataclass(frozen=True)
class Claim:
    """One thing the verdict says of a factor, with its evidence (see the module's docstring)."""

    kind: str
    subject: str
    strata: list[str]  # the strata it rests on, as labels ("custom_ar=on"; "alone" with no other factor)
    not_observed: list[dict] = field(default_factory=list)  # [{stratum, why}] the strata it says nothing of
    runs: list[str] = field(default_factory=list)
    statistic: dict = field(default_factory=dict)  # {p_value, counts}
    text: str = ""

    def to_json(self) -> dict:
        return {"kind": self.kind, "subject": self.subject, "strata": self.strata, "not_observed": self.not_observed,
                "runs": self.runs, "statistic": self.statistic, "text": self.text}


def label(held: dict[str, str]) -> str:
    return ", ".join(f"{f}={lv}" for f, lv in held.items()) or "alone"


def places(strata: list[str]) -> str:
    """'a=1', 'a=1 and a=2', 'a=1, a=2 and a=3'; labels of several factors in parentheses: '(a=1, b=2) and …'."""
    shown = [f"({s})" if ", " in s else s for s in strata] if len(strata) > 1 else strata
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def where(strata: list[str], everywhere: bool, others: list[str]) -> str:
    """' at every level of graphs' where the claim holds in every stratum there is (more than one), ' at graphs=off'
    where it rests on some, '' for a factor alone."""
    if not strata or strata == ["alone"]:
        return ""
    if everywhere and len(strata) > 1:
        return f" at every level of {', '.join(others)}"
    return f" at {places(strata)}"


def decision_claims(factor: str, detail: list[Stratum]) -> list[Claim]:
    """The claims of one factor's strata (analysis._stratum's Stratum records), one per kind that occurs, in the order a
    reader needs them: what it decides, how it changes failures, where it changes nothing, where its repetitions
    disagree, where it was never compared."""
    others = list(detail[0].held) if detail else []
    by_kind: dict[str, list[Stratum]] = {}
    for s in detail:
        by_kind.setdefault(_kind(s), []).append(s)
    claims = []
    for kind in KINDS:
        group = by_kind.get(kind)
        if not group:
            continue
        strata = [label(s.held) for s in group]
        everywhere = len(group) == len(detail)
        runs = [r for s in group for lv in s.compared for r in s.levels[lv]["runs"]]
        statistic = {"counts": {label(s.held): {lv: f"{p['ready']}/{p['valid']}" for lv, p in s.levels.items()}
                                for s in group},
                     "p_value": max((c.p_value for s in group for c in s.comparisons), default=None)}
        not_observed = [{"stratum": label(s.held), "why": s.why} for s in group] if kind == UNCOMPARED else []
        claim = Claim(kind, factor, [] if kind == UNCOMPARED else strata, not_observed, runs, statistic)
        claims.append(dataclasses.replace(claim, text=_sentence(claim, group, everywhere, others)))
    return claims


def _kind(stratum: Stratum) -> str:
    if stratum.state == CHANGES:
        return CHANGES_HOW if stratum.fails_differently else DECIDES
    return {NO_CHANGE: SAME, DISAGREE: DISAGREES}.get(stratum.state, UNCOMPARED)


def _sentence(claim: Claim, group: list[Stratum], everywhere: bool, others: list[str]) -> str:
    factor, place = claim.subject, where(claim.strata, everywhere, others)
    placed = len(group) > 1  # one stratum is named in `place` already; several, each after its ends
    if claim.kind == DECIDES:
        ends = "; ".join(_ends(factor, s, placed=placed) for s in group if _breaks(s))
        return f"{factor} decides the launch{place}" + (f" — {ends}" if ends else "")
    if claim.kind == CHANGES_HOW:
        return f"{factor} changes how the launch fails{place} — " + "; ".join(
            _fails_how(factor, s, placed=placed) for s in group)
    if claim.kind == SAME:
        return f"{factor} does not change the launch outcome{place}"
    if claim.kind == DISAGREES:
        return f"{factor}'s repetitions disagree " + "; ".join(_flaky_why(factor, s) for s in group)
    return f"{factor} was not compared " + "; ".join(
        ("alone" if n["stratum"] == "alone" else f"at {n['stratum']}") + f" ({n['why']})" for n in claim.not_observed)


def summary(factor: str, status: str, claims: list[Claim]) -> str:
    """A decision's summary: its claims' sentences, the first as said and the others after it, each with its own
    place; an undetermined factor's first says so."""
    texts = [c.text for c in claims]
    if not texts:
        return f"{factor} is undetermined: the design never plans two levels of {factor} with the other factors held"
    whys = {n["why"] for c in claims for n in c.not_observed}
    if status == UNDETERMINED and all(c.kind == UNCOMPARED for c in claims) and len(whys) == 1 and \
            next(iter(whys)).startswith("only "):  # one level planned anywhere (--only): said once, as such
        return f"{factor} is undetermined: {next(iter(whys))}, so it was never compared"
    if status == UNDETERMINED:
        return f"{factor} is undetermined: " + "; ".join(_lower_subject(factor, t) for t in texts)
    if status == FLAKY and claims[0].kind == DISAGREES:
        return f"{factor} is flaky: {_lower_subject(factor, texts[0])}" + "".join(
            f"; {_lower_subject(factor, t)}" for t in texts[1:])
    return texts[0] + "".join(f"; {_lower_subject(factor, t)}" for t in texts[1:])


def _lower_subject(factor: str, text: str) -> str:
    """A later sentence of the same factor without its name first: 'does not change … at …'."""
    for head in (f"{factor}'s ", f"{factor} "):
        if text.startswith(head):
            rest = text[len(head):]
            return ("its " + rest) if head.endswith("'s ") else rest
    return text


# ---------------------------------------------------------------------------------------------------------
# How a stratum's levels ended, in words


def _ends(factor: str, stratum: Stratum, *, placed: bool = True) -> str:
    """How each level's runs ended in a stratum: `f=a: starts; f=b: starts, then exits by itself (1/2), starts (1/2)`,
    and where (placed) when the stratum is one of several."""
    def counted(level: str) -> str:
        per = stratum.levels[level]
        return ", ".join(k if n == per["valid"] else f"{k} ({n}/{per['valid']})" for k, n in per["outcomes"].items())
    where = f" (at {label(stratum.held)})" if stratum.held and placed else ""
    return "; ".join(f"{factor}={lv}: {counted(lv)}" for lv in stratum.compared) + where


def _fails_how(factor: str, stratum: Stratum, *, placed: bool = True) -> str:
    """`both fail, differently: …` for a stratum whose levels start alike but end differently."""
    every = all(stratum.levels[lv]["ready"] == 0 for lv in stratum.compared)
    return f"{'both fail' if every else 'the same share start'}, differently: {_ends(factor, stratum, placed=placed)}"


def _breaks(stratum: Stratum) -> bool:
    """Some run of the stratum started and then broke (degraded): the count of ready runs alone would hide it."""
    return any(k.startswith(("starts but", "starts, then")) for lv in stratum.compared
               for k in stratum.levels[lv]["outcomes"])


def _flaky_why(factor: str, stratum: Stratum) -> str:
    parts = []
    for level in stratum.flaky:
        per = stratum.levels[level]
        odd = ", ".join(f"{o['run_id']} {o['status']}" + (f" ({o['reason']}: {o['message']})" if o["message"] else
                                                          f" ({o['reason']})" if o["reason"] else "")
                        for o in per["odd_runs"])
        parts.append(f"{factor}={level}: {per['ready']}/{per['valid']} ready, the odd run(s): {odd}")
    where = label(stratum.held)
    return (f"at {where}: " if stratum.held else "") + "; ".join(parts)
