"""The time to ready as a manipulation signal (varied._startup_apart): per pair of levels, the exact Mann-Whitney
test in each stratum, the strata combined by Fisher's method, significant at 0.05 over the pairs (Bonferroni).
One test per stratum at 0.05 let chance decide — 4 runs against 4 separate by chance 2.9 % of the time, in each
stratum — and a factor that did nothing was then called neutral (its level taking effect), not "not shown to vary";
a shift that every stratum shows still counts."""

from __future__ import annotations

from launchlab.verdicts import varied, verdict
from test_varied_property import evidence_of

SLOW = [40.0, 41.0, 42.0, 43.0]
FAST = [30.0, 31.0, 32.0, 33.0]


def judged(x0: dict[str, list[float]], x1: dict[str, list[float]]):
    """x's two levels with these times to ready in each stratum of y (all runs ready, all else alike)."""
    runs = [({"x": x, "y": y}, "ready", t, 70 * 1024) for x, by_y in (("x0", x0), ("x1", x1))
            for y, times in by_y.items() for t in times]
    factors = {"x": ["x0", "x1"], "y": sorted(x0)}
    return verdict.build(evidence_of(factors, runs)).factors["x"]


def test_four_against_four_separated_in_one_stratum_and_alike_in_the_other_shows_nothing():
    x = judged({"y0": FAST, "y1": FAST}, {"y0": SLOW, "y1": FAST})  # Fisher over 0.029 and 1: 0.13
    assert x.status == "not_shown_to_vary", "before: neutral, from one stratum's chance separation"
    assert "are not told apart by anything their logs give" in x.summary, x.summary


def test_a_shift_every_stratum_shows_is_the_level_taking_effect():
    assert judged({"y0": FAST, "y1": FAST}, {"y0": SLOW, "y1": SLOW}).status == "neutral"  # Fisher: 0.0066
    assert judged({"y0": FAST}, {"y0": SLOW}).status == "neutral"  # one stratum alone: 0.029


def test_three_levels_are_three_pairs_and_ties_are_tested_exactly():
    strata = [{"a": FAST, "b": FAST, "c": SLOW}]
    assert not varied._startup_apart(strata), "the one separated pair, 0.029 × 3 pairs"
    assert varied._startup_apart([{"a": FAST + [34.0], "b": FAST + [34.0], "c": SLOW + [44.0]}]), "0.008 × 3"
    # with a tie scipy's default turns to the normal approximation (0.072 here, 0.047 for other values); exact: 0.1
    assert varied._mann_whitney([30.0, 30.0, 31.0], [40.0, 40.0, 41.0]) == 0.1
    assert not varied._startup_apart([{"a": [30.0], "b": [40.0]}]), "one run a side is no comparison"
