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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal

# the states of a stratum; only `searching` asks for more probes
SEARCHING, CONVERGED, NOISY, NON_MONOTONE, NOT_BRACKETED, NO_OBSERVATION = (
    "searching", "converged", "noisy", "non_monotone", "not_bracketed", "no_observation")


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

    @property
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


def max_probes(bounds: Bounds) -> int:
    """The most probed values one stratum can take: both ends, then one bisection per halving of the range
    until it is no wider than the resolution."""
    ratio = (bounds.high - bounds.low) / bounds.resolution
    return 2 + max(0, math.ceil(math.log2(ratio))) if ratio > 0 else 2


@dataclass(frozen=True)
class Observation:
    """One finished probe run. success: its outcome was the searched one (`ready`); None: the run is not an
    observation of the server (a kit error, an interruption)."""

    stratum: str
    value: Decimal
    run_id: str
    success: bool | None


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

    @property
    def width(self) -> Decimal | None:
        return None if self.low is None or self.high is None else self.high - self.low


def _names(obs: list[Observation]) -> str:
    return ", ".join(o.run_id for o in obs)


def stratum_result(bounds: Bounds, stratum: str, observations: list[Observation], repetitions: int = 1
                   ) -> StratumResult:
    """The state of one stratum from its observations, and its next probe while it is `searching`. A probed
    value none of whose runs is an observation (a kit error) is probed once more; lost twice, the stratum stops
    (`no_observation`)."""
    by_value: dict[Decimal, list[Observation]] = {}
    for o in observations:
        by_value.setdefault(o.value, []).append(o)
    result = StratumResult(stratum, SEARCHING, probes=len(by_value), runs=[o.run_id for o in observations])
    outcome = _outcomes(bounds, result, by_value, repetitions)
    if outcome is None:  # a probe to repeat, or nothing to claim (no observation, noisy)
        return result
    _bracket(result, outcome)
    if _monotone(bounds, result, outcome, by_value):
        _step(bounds, result, outcome)
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


def _step(bounds: Bounds, result: StratumResult, outcome: dict[Decimal, bool]) -> None:
    """The next probe of a monotone stratum: an end of the range not yet probed, else the midpoint of the bracket,
    until it is within the resolution (`converged`); `not_bracketed` when both ends give the same outcome."""
    result.next = [Probe(result.stratum, bounds.text(end), f"the {side} end of the range: bisection needs it not "
                                                           "ready at low and ready at high")
                   for end, side in ((bounds.low, "low"), (bounds.high, "high")) if end not in outcome]
    if result.next:
        return
    if outcome[bounds.low]:
        result.state = NOT_BRACKETED
        result.note = f"ready even at the low end {bounds.text(bounds.low)}: the threshold is below the range"
        return
    if not outcome[bounds.high]:
        result.state = NOT_BRACKETED
        result.note = f"not ready even at the high end {bounds.text(bounds.high)}: the threshold is above the range"
        return
    low, high = result.low, result.high
    assert low is not None and high is not None  # both ends are observed and differ
    mid = ((low + high) / 2).quantize(bounds.quantum, rounding=ROUND_HALF_EVEN)
    if high - low <= bounds.resolution or not low < mid < high:
        result.state = CONVERGED
        return
    result.next = [Probe(result.stratum, bounds.text(mid), f"bisects ({bounds.text(low)}, {bounds.text(high)}], "
                                                          f"{high - low} wide, wider than the resolution "
                                                          f"{bounds.resolution}")]


def _bracket(result: StratumResult, outcome: dict[Decimal, bool]) -> None:
    fails = [v for v, ok in outcome.items() if not ok]
    oks = [v for v, ok in outcome.items() if ok]
    result.low = max(fails) if fails else None
    result.high = min(oks) if oks else None


def step(bounds: Bounds, strata: list[str], observations: list[Observation], repetitions: int = 1
         ) -> list[StratumResult]:
    """Every stratum's result, in the order given; those still `searching` carry their next probe. The batch
    launches one probe of each in turn, so drift of the host over time affects every stratum alike."""
    return [stratum_result(bounds, s, [o for o in observations if o.stratum == s], repetitions) for s in strata]


def done(results: list[StratumResult]) -> bool:
    return not any(r.next for r in results)
