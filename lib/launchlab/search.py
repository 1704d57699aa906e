"""Threshold search: bisection over one numeric flag, per stratum, as pure state.

The state of a search is nothing but its observations so far (stratum, flag value, run, success). `step` reads
them and says, per stratum, what is known (the interval between the highest failing and the lowest succeeding
value) and which value to probe next, and why. The batch asks it for probes until it says done, so a search
that was interrupted continues from the runs it finished: there is no other state to lose.

Bisection assumes the outcome is monotone in the flag: failing below a threshold, succeeding at and above it
(as `--mem-fraction-static` does). The assumption is checked, never trusted: both ends are probed first, a
value whose repeated runs disagree makes the stratum `noisy`, and a failure above a success makes it
`non_monotone` — each with the runs named, and the search of that stratum stops there.

Values are decimals, as written in the params (quoted strings): a midpoint is rounded to the finest number
of decimals among low, high and resolution, so the server sees `0.744`, not `0.74375000000001`.

A stratum may be guided (issue 30): once its launches printed the figures its server kind predicts from, a
`Guide` holds the predicted break-even, and after both ends the search probes the two values just below and just
above it that bisection would end on (`next_probes`) — two launches where bisection takes seven. The prediction
is only a guide: every outcome so far is checked against it (`judge`), and one that contradicts it (ready at or
below it, not ready above it, by more than its slack), or a guide whose probes were disturbed, sends the stratum
back to bisection. The interval claimed is always the one between a failing and a ready probe, never the
prediction; and since the guided values are nodes of bisection's own tree, a prediction that holds gives the
very interval bisection would have found.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal

from launchlab.logparse.serverkind import POOL_BELOW_CONTEXT
from launchlab.numtext import significant

# the states of a stratum; only `searching` asks for more probes
SEARCHING, CONVERGED, NOISY, NON_MONOTONE, NOT_BRACKETED, NO_OBSERVATION = (
    "searching", "converged", "noisy", "non_monotone", "not_bracketed", "no_observation")
# what a stratum's predicted break-even came to (StratumResult.prediction): none given, every outcome agrees with
# it, an outcome contradicts it, or it was not to be followed (Guide.distrust)
NO_PREDICTION, HELD, FAILED, NOT_FOLLOWED = "", "held", "failed", "not_followed"


@dataclass(frozen=True)
class Bounds:
    """The range searched and the width at which an interval is narrow enough (from the params' `search:`)."""

    low: Decimal
    high: Decimal
    resolution: Decimal
    low_text: str = ""   # the ends as the user wrote them ("0.50"), used as the probed values
    high_text: str = ""

    @classmethod
    def parse(cls, low: str, high: str, resolution: str) -> Bounds:
        return cls(Decimal(low), Decimal(high), Decimal(resolution), low, high)

    @functools.cached_property  # asked at every step of a search: a third of the time of the exhaustive bound test
    def quantum(self) -> Decimal:
        """The finest step written: midpoints are rounded to it."""
        exponent = min(v.as_tuple().exponent for v in (self.low, self.high, self.resolution))
        return Decimal(1).scaleb(exponent)

    def text(self, value: Decimal) -> str:
        if value == self.low and self.low_text:
            return self.low_text
        if value == self.high and self.high_text:
            return self.high_text
        return str(value.quantize(self.quantum))


def midpoint(bounds: Bounds, low: Decimal, high: Decimal) -> Decimal | None:
    """The value bisection probes inside (low, high], rounded to the decimals written; None when the interval is
    narrow enough: no wider than the resolution, or no value of those decimals strictly inside it."""
    mid = ((low + high) / 2).quantize(bounds.quantum, rounding=ROUND_HALF_EVEN)
    return None if high - low <= bounds.resolution or not low < mid < high else mid


def next_probes(bounds: Bounds, low: Decimal, high: Decimal, prediction: Decimal) -> tuple[Decimal, Decimal]:
    """The values just below and just above a predicted break-even (ready above it, not ready at or below it):
    the interval bisection of (low, high] ends on when the server's outcomes follow the prediction — the
    prediction rounded to the resolution on bisection's own values, so that where it holds, its two probes
    establish the interval bisection would have. A prediction outside (low, high] gives the end interval
    nearest to it."""
    while (mid := midpoint(bounds, low, high)) is not None:
        if mid > prediction:
            high = mid
        else:
            low = mid
    return low, high


def max_probes(bounds: Bounds, *, guided: bool = False, prior: bool = False) -> int:
    """The most probed values one stratum can take: both ends, then one bisection per halving of the range until
    it is no wider than the resolution. guided: the server's numbers may guide the search (its kind predicts the
    searched flag's break-even) — the guided pair are nodes of bisection's tree, but when the prediction fails they
    may lie off the path bisection then takes (`_tree_node`): up to two values more, one more where the tree has two
    levels (tests/test_search_bound.py tries every threshold and prediction of small ranges). prior: a prediction
    given with the params, whose pair is probed before the ends: two values more at most, wherever they lie."""
    ratio = (bounds.high - bounds.low) / bounds.resolution
    depth = max(0, math.ceil(math.log2(ratio))) if ratio > 0 else 0
    if prior:
        return 2 + depth + 2
    return 2 + depth + (min(2, depth - 1) if guided and depth > 1 else 0)


@dataclass(frozen=True)
class Observation:
    """One finished probe run. success: its outcome was the searched one (`ready`); None: the run is not an
    observation of the server (a kit error, an interruption)."""

    stratum: str
    value: Decimal
    run_id: str
    success: bool | None


def success(status: str | None, reason: str | None) -> bool | None:
    """A probe's outcome as the search counts it (Observation.success): it started — ready, or started with a KV
    pool too small for one request (degraded for the verdict, POOL_BELOW_CONTEXT: the search brackets the
    break-even of starting, which the kind's budget predicts at rest = 0, and the verdict says which probes start
    unable to serve) — or not; None for a run that is no observation of the server (a kit error, an interruption)."""
    if status == "error":
        return None
    return status == "ready" or reason == POOL_BELOW_CONTEXT


@dataclass(frozen=True)
class Guide:
    """What the server's own numbers predict of a stratum's threshold (thresholds.guides): not ready at or below
    `prediction`, ready above it. slack: how far from it (flag units) an outcome may fall on the other side and not
    contradict it (the figures are printed rounded, a GPU's memory moves by the drain tolerance); distrust: why it
    must not guide the search (a probe disturbed by foreign GPU memory, probes whose figures disagree) — empty
    when it may."""

    prediction: Decimal
    slack: Decimal = Decimal(0)
    distrust: str = ""
    # given before any probe (the params' `search: predicted`, from a failing log's own numbers): its pair is
    # probed first, the ends only where the pair contradicts it
    prior: bool = False


def named(prediction: Decimal | float | None, prior: bool) -> str:
    """The prediction a search followed, by value and source, for what is said of it ('held', 'failed'): the
    params' figure and the runs' own can differ (the H100 search followed the log's 0.0052; its runs said 0.00512)."""
    if prediction is None:
        return "the prediction"
    if prior:  # as the params wrote it
        return f"the prediction it followed ({Decimal(str(prediction)).normalize():f}, given with the params)"
    return f"the prediction it followed ({significant(float(prediction))}, from its runs' own numbers)"


def judge(guide: Guide | None, observations: list[Observation]) -> tuple[str, str]:
    """What the outcomes so far say of a prediction: (HELD | FAILED | NOT_FOLLOWED | NO_PREDICTION, why). FAILED
    names every run on the wrong side of it by more than its slack — noisy repetitions included, since a
    prediction of one break-even cannot hold for both."""
    if guide is None:
        return NO_PREDICTION, ""
    if guide.distrust:
        return NOT_FOLLOWED, guide.distrust
    shown = f"{guide.prediction:.4g}"
    wrong = [f"{'ready' if o.success else 'not ready'} at {o.value} (run {o.run_id}) "
             f"{'at or below' if o.success else 'above'} it"
             for o in observations if o.success is not None and o.success != (o.value > guide.prediction)
             and abs(o.value - guide.prediction) > guide.slack]
    if wrong:
        return FAILED, (f"the predicted break-even {shown} failed (slack {guide.slack:.2g}): " + "; ".join(wrong))
    return HELD, ""


@dataclass(frozen=True)
class Probe:
    """A value to launch next in a stratum, and why it was chosen (recorded in the manifest)."""

    stratum: str
    value: str
    why: str


@dataclass
class StratumResult:
    """What a stratum's observations show. low: the highest failing value; high: the lowest succeeding one."""

    stratum: str
    state: str
    low: Decimal | None = None
    high: Decimal | None = None
    probes: int = 0  # values probed
    runs: list[str] = field(default_factory=list)
    note: str = ""
    next: list[Probe] = field(default_factory=list)
    prediction: str = NO_PREDICTION  # what its Guide came to (judge)
    prediction_note: str = ""  # why it failed or was not followed

    @property
    def width(self) -> Decimal | None:
        return None if self.low is None or self.high is None else self.high - self.low


def _names(obs: list[Observation]) -> str:
    return ", ".join(o.run_id for o in obs)


def stratum_result(bounds: Bounds, stratum: str, observations: list[Observation], repetitions: int = 1,
                   *, guide: Guide | None = None) -> StratumResult:
    """The state of one stratum from its observations, and its next probe(s) while it is `searching`: both ends,
    then the guide's two values (next_probes) while its prediction holds, else the midpoint. A probed value none
    of whose runs is an observation (a kit error) is probed once more; lost twice, the stratum stops
    (`no_observation`)."""
    by_value: dict[Decimal, list[Observation]] = {}
    for o in observations:
        by_value.setdefault(o.value, []).append(o)
    result = StratumResult(stratum, SEARCHING, probes=len(by_value), runs=[o.run_id for o in observations])
    result.prediction, result.prediction_note = judge(guide, observations)
    outcome = _outcomes(bounds, result, by_value, repetitions)
    if outcome is None:  # a probe to repeat, or nothing to claim (no observation, noisy)
        return result
    _bracket(result, outcome)
    if _monotone(bounds, result, outcome, by_value):
        _step(bounds, result, outcome, guide)
    return result


def _outcomes(bounds: Bounds, result: StratumResult, by_value: dict[Decimal, list[Observation]],
              repetitions: int) -> dict[Decimal, bool] | None:
    """Each probed value's outcome (ready or not), in value order; None once a value decides the stratum's state
    on its own: lost to kit errors (probed again once, then `no_observation`) or repetitions that disagree (`noisy`)."""
    outcome: dict[Decimal, bool] = {}
    for value, obs in sorted(by_value.items()):
        valid = [o for o in obs if o.success is not None]
        if not valid:
            if len(obs) < 2 * repetitions:  # lost once (a kit error): probe it again, once
                result.next = [Probe(result.stratum, bounds.text(value), f"repeats {bounds.text(value)}: its run(s) "
                                                                         f"{_names(obs)} gave no valid observation (a "
                                                                         "kit error)")]
                return None
            result.state = NO_OBSERVATION
            result.note = (f"the probe at {bounds.text(value)} gave no valid observation, twice (runs {_names(obs)}: "
                           "kit errors or interruptions); `launchlab run PARAMS --resume RUN_DIR` repeats them")
            return None
        if len({o.success for o in valid}) > 1:
            ok = [o for o in valid if o.success]
            bad = [o for o in valid if not o.success]
            result.state = NOISY
            result.note = (f"noisy: at {bounds.text(value)} the repeated runs disagree — ready: {_names(ok)}; "
                           f"not ready: {_names(bad)}. The outcome is not a function of the flag here, so no "
                           "threshold is claimed; look at why those runs differ")
            _bracket(result, outcome)
            return None
        outcome[value] = valid[0].success
    return outcome


def _monotone(bounds: Bounds, result: StratumResult, outcome: dict[Decimal, bool],
              by_value: dict[Decimal, list[Observation]]) -> bool:
    """Whether no value fails above one that is ready; else the stratum is `non_monotone`, naming the pair."""
    failing_above = [(f, s) for f in outcome if not outcome[f] for s in outcome if outcome[s] and f > s]
    if not failing_above:
        return True
    f, s = max(failing_above)
    result.state = NON_MONOTONE
    result.note = (f"non-monotone: not ready at {bounds.text(f)} (runs {_names(by_value[f])}) above ready at "
                   f"{bounds.text(s)} (runs {_names(by_value[s])}); bisection assumes the outcome only improves "
                   "with the flag, so no threshold is claimed")
    return False


def _step(bounds: Bounds, result: StratumResult, outcome: dict[Decimal, bool], guide: Guide | None) -> None:
    """The next probe(s) of a monotone stratum: an end of the range not yet probed, then the guide's two values
    (next_probes) while its prediction holds, else the midpoint of the bracket, until it is within the resolution
    (`converged`); `not_bracketed` when both ends give the same outcome."""
    if guide is not None and guide.prior and result.prediction == HELD:
        # the prediction came with the params (a failing log's numbers): its pair first, the ends only if it fails
        below, above = next_probes(bounds, bounds.low, bounds.high, guide.prediction)
        result.next = _guided(bounds, result.stratum, (bounds.low, bounds.high), guide.prediction,
                              source="the diagnosed log's own numbers give", skip=set(outcome))
        if result.next:
            return
        if not outcome[below] and outcome[above]:  # a failing and a ready probe one resolution apart
            result.state = CONVERGED
            return
    result.next = [Probe(result.stratum, bounds.text(end), f"the {side} end of the range: bisection needs it not "
                                                           "ready at low and ready at high")
                   for end, side in ((bounds.low, "low"), (bounds.high, "high")) if end not in outcome]
    if result.next or _not_bracketed(bounds, result, outcome):
        return
    low, high = result.low, result.high
    assert low is not None and high is not None  # both ends are observed and differ
    mid = midpoint(bounds, low, high)
    if mid is None:
        result.state = CONVERGED
        return
    if guide is not None and result.prediction == HELD and outcome.keys() == {bounds.low, bounds.high}:
        # one guided round, right after the ends: where its outcomes leave the bracket open (they contradicted the
        # prediction, if only within its slack), bisection goes on down its own tree
        result.next = _guided(bounds, result.stratum, (low, high), guide.prediction)
        return
    unfollowed = f"; the prediction is not followed: {result.prediction_note}" if guide is not None else ""
    low, high, mid = _tree_node(bounds, outcome)
    result.next = [Probe(result.stratum, bounds.text(mid), f"bisects ({bounds.text(low)}, {bounds.text(high)}], "
                                                          f"{high - low} wide, wider than the resolution "
                                                          f"{bounds.resolution}" + unfollowed)]


def _not_bracketed(bounds: Bounds, result: StratumResult, outcome: dict[Decimal, bool]) -> bool:
    """Whether both ends gave the same outcome: the stratum is then `not_bracketed`."""
    if outcome[bounds.low]:
        result.state = NOT_BRACKETED
        result.note = f"ready even at the low end {bounds.text(bounds.low)}: the threshold is below the range"
        return True
    if not outcome[bounds.high]:
        result.state = NOT_BRACKETED
        result.note = f"not ready even at the high end {bounds.text(bounds.high)}: the threshold is above the range"
        return True
    return False


def _tree_node(bounds: Bounds, outcome: dict[Decimal, bool]) -> tuple[Decimal, Decimal, Decimal]:
    """Bisection's next value: down its own tree from (low, high], each node's outcome known or implied by a
    monotone outcome (not ready at or below a failing value, ready at or above a ready one), to the first node
    not yet known: (its interval, the node). Where no guide probed off the path, this is the bracket's midpoint;
    after a prediction that failed, the guided values probed stay nodes of the same tree, so the search takes at
    most two values more than bisection alone (max_probes)."""
    fails = max((v for v, ok in outcome.items() if not ok), default=bounds.low)
    oks = min((v for v, ok in outcome.items() if ok), default=bounds.high)
    low, high = bounds.low, bounds.high
    while (mid := midpoint(bounds, low, high)) is not None:
        if mid <= fails:
            low = mid
        elif mid >= oks:
            high = mid
        else:
            return low, high, mid
    raise AssertionError("a bracket wider than the resolution lies inside one of bisection's leaves")


def _guided(bounds: Bounds, stratum: str, bracket: tuple[Decimal, Decimal], prediction: Decimal, *,
            source: str = "the server's own numbers predict", skip: set[Decimal] | None = None) -> list[Probe]:
    """The guide's probes not yet made: just below and just above the prediction (next_probes); skip: the values
    probed already (default: the bracket's ends)."""
    low, high = bracket
    below, above = next_probes(bounds, low, high, prediction)
    ends = f"({bounds.text(below)}, {bounds.text(above)}]"
    skip = {low, high} if skip is None else skip
    return [Probe(stratum, bounds.text(value), f"just {side} the break-even {source} ({prediction:.4g}): "
                                               f"bisection of ({bounds.text(low)}, {bounds.text(high)}] ends on "
                                               f"{ends} if the prediction holds")
            for value, side in ((below, "below"), (above, "above")) if value not in skip]


def _bracket(result: StratumResult, outcome: dict[Decimal, bool]) -> None:
    fails = [v for v, ok in outcome.items() if not ok]
    oks = [v for v, ok in outcome.items() if ok]
    result.low = max(fails) if fails else None
    result.high = min(oks) if oks else None


def step(bounds: Bounds, strata: list[str], observations: list[Observation], repetitions: int = 1,
         *, guides: dict[str, Guide] | None = None) -> list[StratumResult]:
    """Every stratum's result, in the order given; those still `searching` carry their next probe(s). The batch
    launches the probes of each in turn, so drift of the host over time affects every stratum alike. guides:
    each stratum's predicted break-even, where its server's numbers gave one (thresholds.guides)."""
    return [stratum_result(bounds, s, [o for o in observations if o.stratum == s], repetitions,
                           guide=(guides or {}).get(s)) for s in strata]


def blind_probes(bounds: Bounds, threshold: Decimal) -> int:
    """The values bisection alone (both ends, then midpoints: `step` without a guide) probes for a server ready
    from `threshold` on and not ready below it — what a stratum would have taken without a prediction."""
    observations: list[Observation] = []
    while (probes := stratum_result(bounds, "", observations).next):
        observations += [Observation("", Decimal(p.value), "", Decimal(p.value) >= threshold) for p in probes]
    return len(observations)


def done(results: list[StratumResult]) -> bool:
    return not any(r.next for r in results)
