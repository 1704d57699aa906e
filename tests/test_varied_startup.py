"""The time to ready as a manipulation signal (varied._startup_apart): the exact Mann-Whitney test of each pair of
levels in each stratum, significant at 0.05 over all of them (Bonferroni). Taken one by one, 4 runs against 4
separate by chance in 2.9 % of batches, and a factor has a comparison per stratum and pair of levels: a factor that
did nothing was then called neutral (its level taking effect) instead of not shown to vary."""

from __future__ import annotations

from launchlab.verdicts import varied, verdict
from test_varied_property import evidence_of


def status(runs) -> str:
    factors = {"x": ["x0", "x1"], "y": ["y0", "y1"]} if any("y" in lv for lv, *_ in runs) else {"x": ["x0", "x1"]}
    return verdict.build(evidence_of(factors, runs)).factors["x"].status


def test_times_to_ready_that_separate_five_against_five_show_the_level_taking_effect():
    runs = [({"x": "x0"}, "ready", 30.0 + i, 70 * 1024) for i in range(5)]
    runs += [({"x": "x1"}, "ready", 40.0 + i, 70 * 1024) for i in range(5)]  # p = 2/252 = 0.008, one comparison
    assert status(runs) == "neutral"
    assert varied._startup_apart([([30.0, 31.0, 32.0, 33.0, 34.0], [40.0, 41.0, 42.0, 43.0, 44.0])])


def test_one_chance_separation_of_four_against_four_in_one_of_two_strata_shows_nothing():
    runs = []
    for y, shift in (("y0", 10.0), ("y1", 0.0)):  # at y0 x1's four runs are all slower (p = 0.029); at y1 the same
        runs += [({"x": "x0", "y": y}, "ready", 30.0 + i, 70 * 1024) for i in range(4)]
        runs += [({"x": "x1", "y": y}, "ready", 30.0 + shift + i, 70 * 1024) for i in range(4)]
    assert status(runs) == "not_shown_to_vary"  # 0.029 × 2 comparisons > 0.05: before, `neutral`
    one = [([30.0, 31.0, 32.0, 33.0], [40.0, 41.0, 42.0, 43.0])]
    assert varied._startup_apart(one) and not varied._startup_apart(one + [([30.0, 31.0], [30.0, 31.0])])
    assert not varied._startup_apart([([30.0], [40.0])]), "one run a side is no comparison"
