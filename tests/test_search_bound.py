"""The most launches a threshold search can take, as `launchlab validate` says and the batch's counter shows
(`[n/N]`): search.max_probes, checked against every threshold and every prediction of small ranges, guided and
blind. Before issue 38 the bound left out the guided pair: a real SGLang search on the H200 counted `[7/6]`."""

from __future__ import annotations

from decimal import Decimal

import pytest

from launchlab import search

RANGES = [("0.002", "0.004", "0.0005"), ("0.50", "0.95", "0.05"), ("0.005", "0.007", "0.001"), ("0.1", "0.9", "0.1"),
          ("0.0", "1.0", "0.3"), ("10", "20", "3"), ("0.1", "0.9", "0.04"), ("0.0", "1.0", "0.5")]


class _Replay:
    """search.stratum_result as a function of the outcomes so far, each history asked once. The exhaustive tests
    search every threshold of a range with the same guide: the first probes, and the search's answer to their
    outcomes, are the same for most thresholds, so they are computed once rather than once per threshold (a
    search's next probes depend on nothing but the observations and the guide)."""

    def __init__(self, bounds: search.Bounds, guide: search.Guide | None):
        self.bounds, self.guide = bounds, guide
        self.known: dict[tuple[tuple[Decimal, bool], ...], search.StratumResult] = {}

    def result(self, history: tuple[tuple[Decimal, bool], ...]) -> search.StratumResult:
        if history not in self.known:
            observations = [search.Observation("", value, f"r{i}", ready) for i, (value, ready) in enumerate(history)]
            self.known[history] = search.stratum_result(self.bounds, "", observations, guide=self.guide)
        return self.known[history]

    def search(self, threshold: Decimal) -> tuple[int, search.StratumResult]:
        """How many values the search probes for a server ready from `threshold` on, and where it ends."""
        history: tuple[tuple[Decimal, bool], ...] = ()
        while (result := self.result(history)).next:
            history += tuple((Decimal(p.value), Decimal(p.value) >= threshold) for p in result.next)
        return len(history), result


def _launches(bounds: search.Bounds, threshold: Decimal, prediction: Decimal | None, slack: Decimal = Decimal(0)) -> int:
    """How many values the search probes for a server ready from `threshold` on, guided by `prediction` (an outcome
    on the wrong side of it by no more than `slack` does not fail it)."""
    guide = None if prediction is None else search.Guide(prediction, slack)
    return _Replay(bounds, guide).search(threshold)[0]


def _grid(bounds: search.Bounds) -> list[Decimal]:
    step = bounds.quantum
    n = int((bounds.high - bounds.low) / step)
    return [bounds.low + i * step for i in range(1, n + 1)] + [bounds.low + (i + Decimal("0.5")) * step for i in range(n)]


@pytest.mark.parametrize(("low", "high", "resolution"), RANGES)
def test_no_search_takes_more_launches_than_the_bound_and_some_take_exactly_that(low, high, resolution):
    bounds = search.Bounds.parse(low, high, resolution)
    grid = _grid(bounds)
    thresholds = [t for t in grid if t > bounds.low]
    unguided = _Replay(bounds, None)
    blind = max(unguided.search(t)[0] for t in thresholds)
    guides = [_Replay(bounds, search.Guide(p, slack)) for p in grid for slack in (Decimal(0), bounds.resolution / 2)]
    guided = max(guide.search(t)[0] for guide in guides for t in thresholds)
    assert blind == search.max_probes(bounds)
    assert guided == search.max_probes(bounds, guided=True)


def test_the_sglang_search_on_the_h200_takes_four_launches_when_the_prediction_holds():
    bounds = search.Bounds.parse("0.002", "0.004", "0.0005")
    assert _launches(bounds, Decimal("0.0029"), Decimal("0.00287")) == 4
    assert search.max_probes(bounds, guided=True) == 5  # what validate says: a prediction that fails costs one more


def _prior_launches(bounds: search.Bounds, threshold: Decimal, prediction: Decimal) -> tuple[int, search.StratumResult]:
    return _Replay(bounds, search.Guide(prediction, prior=True)).search(threshold)


@pytest.mark.parametrize(("low", "high", "resolution"), RANGES)
def test_a_prediction_given_with_the_params_never_takes_more_than_its_bound_and_claims_only_what_probes_show(
        low, high, resolution):
    """Issue 48: a break-even from a failing log's own numbers (`search: predicted`) is probed first, just below and
    above it; the ends and bisection only where it fails. Whatever the threshold and the prediction, the search
    stays within max_probes(prior=True) and converges on an interval between a failing and a ready probe that holds
    the threshold."""
    bounds = search.Bounds.parse(low, high, resolution)
    grid = _grid(bounds)
    worst = 0
    for prediction in [p for p in grid if bounds.low < p < bounds.high]:
        replay = _Replay(bounds, search.Guide(prediction, prior=True))
        for threshold in [t for t in grid if bounds.low < t <= bounds.high]:
            n, result = replay.search(threshold)
            worst = max(worst, n)
            assert result.state == search.CONVERGED, (threshold, prediction, result)
            assert result.low < threshold <= result.high and result.width <= bounds.resolution
    assert worst <= search.max_probes(bounds, prior=True)


def test_the_diagnosed_sglang_search_takes_two_launches_when_the_logs_prediction_holds():
    """The draft of the real H200 log (SGLang: minimum viable 0.0029): (0.0024, 0.0032], resolution 0.0002,
    predicted 0.0029 — probed at 0.0028 and 0.0030; the server's true break-even (about 0.002875) lies between."""
    bounds = search.Bounds.parse("0.0024", "0.0032", "0.0002")
    n, result = _prior_launches(bounds, Decimal("0.002875"), Decimal("0.0029"))
    assert n == 2 and (result.low, result.high) == (Decimal("0.0028"), Decimal("0.0030"))
    n, result = _prior_launches(bounds, Decimal("0.0031"), Decimal("0.0029"))  # the prediction fails: more launches
    assert n > 2 and result.state == search.CONVERGED and result.low < Decimal("0.0031") <= result.high
