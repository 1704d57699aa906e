"""The most launches a threshold search can take, as `launchlab validate` says and the batch's counter shows
(`[n/N]`): search.max_probes, checked against every threshold and every prediction of small ranges, guided and
blind. Before issue 38 the bound left out the guided pair: a real SGLang search on the H200 counted `[7/6]`."""

from __future__ import annotations

from decimal import Decimal

import pytest

from launchlab import search

RANGES = [("0.002", "0.004", "0.0005"), ("0.50", "0.95", "0.05"), ("0.005", "0.007", "0.001"), ("0.1", "0.9", "0.1"),
          ("0.0", "1.0", "0.3"), ("10", "20", "3"), ("0.1", "0.9", "0.04"), ("0.0", "1.0", "0.5")]


def _launches(bounds: search.Bounds, threshold: Decimal, prediction: Decimal | None, slack: Decimal = Decimal(0)) -> int:
    """How many values the search probes for a server ready from `threshold` on, guided by `prediction` (an outcome
    on the wrong side of it by no more than `slack` does not fail it)."""
    guide = None if prediction is None else search.Guide(prediction, slack)
    observations: list[search.Observation] = []
    while (probes := search.stratum_result(bounds, "", observations, guide=guide).next):
        observations += [search.Observation("", Decimal(p.value), f"r{len(observations)}", Decimal(p.value) >= threshold)
                         for p in probes]
    return len(observations)


def _grid(bounds: search.Bounds) -> list[Decimal]:
    step = bounds.quantum
    n = int((bounds.high - bounds.low) / step)
    return [bounds.low + i * step for i in range(1, n + 1)] + [bounds.low + (i + Decimal("0.5")) * step for i in range(n)]


@pytest.mark.parametrize(("low", "high", "resolution"), RANGES)
def test_no_search_takes_more_launches_than_the_bound_and_some_take_exactly_that(low, high, resolution):
    bounds = search.Bounds.parse(low, high, resolution)
    grid = _grid(bounds)
    thresholds = [t for t in grid if t > bounds.low]
    blind = max(_launches(bounds, t, None) for t in thresholds)
    guided = max(_launches(bounds, t, p, slack) for t in thresholds for p in grid
                 for slack in (Decimal(0), bounds.resolution / 2))
    assert blind == search.max_probes(bounds)
    assert guided == search.max_probes(bounds, guided=True)


def test_the_sglang_search_on_the_h200_takes_four_launches_when_the_prediction_holds():
    bounds = search.Bounds.parse("0.002", "0.004", "0.0005")
    assert _launches(bounds, Decimal("0.0029"), Decimal("0.00287")) == 4
    assert search.max_probes(bounds, guided=True) == 5  # what validate says: a prediction that fails costs one more
