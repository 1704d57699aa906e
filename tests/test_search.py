"""search.py, the bisection state: which value to probe next and what the probes so far show, per stratum.
Outcomes come from a threshold function, as a launch's do; the real batch is in test_threshold_search.py."""

import math
from decimal import Decimal

import pytest

from launchlab import search
from launchlab.search import Bounds, Observation


def run_search(bounds: Bounds, thresholds: dict[str, Decimal], repetitions: int = 1, outcome=None):
    """Drive step() to the end as the batch does: every probe it asks for becomes `repetitions` observations."""
    observations: list[Observation] = []
    rounds = 0
    while True:
        results = search.step(bounds, list(thresholds), observations)
        probes = [p for r in results for p in r.next]
        if not probes:
            return results, observations
        rounds += 1
        assert rounds < 100, "the search does not end"
        for probe in probes:
            for rep in range(repetitions):
                value = Decimal(probe.value)
                ok = outcome(probe.stratum, value, rep) if outcome else value >= thresholds[probe.stratum]
                observations.append(Observation(probe.stratum, value, f"{len(observations) + 1:02d}_{probe.stratum}"
                                                f"_{probe.value}_rep{rep + 1}", ok))


def sim_break_even(custom_ar: bool) -> float:
    """The simulated SGLang server's break-even fraction on the demo box: weights over the memory free before them
    (card − reserved − CUDA context − NCCL − custom all-reduce buffers), from sim/sglang_server.py's constants."""
    free_mib = 97887 - 566 - 512 - 1024 - (640 if custom_ar else 0)
    return 70.0 * 1024 / free_mib


def test_both_ends_of_every_stratum_are_probed_first():
    results = search.step(Bounds.parse("0.50", "0.95", "0.005"), ["custom_ar=off", "custom_ar=on"], [])
    assert [(p.stratum, p.value) for r in results for p in r.next] == [
        ("custom_ar=off", "0.50"), ("custom_ar=off", "0.95"), ("custom_ar=on", "0.50"), ("custom_ar=on", "0.95")]
    assert "low end" in results[0].next[0].why and "high end" in results[0].next[1].why


def test_the_demo_search_brackets_the_simulated_break_even_within_the_resolution_and_the_probe_bound():
    bounds = Bounds.parse("0.50", "0.95", "0.005")
    truth = {"custom_ar=off": Decimal(str(sim_break_even(False))), "custom_ar=on": Decimal(str(sim_break_even(True)))}
    results, observations = run_search(bounds, truth)
    bound = 2 + math.ceil(math.log2((0.95 - 0.50) / 0.005))
    assert search.max_probes(bounds) == bound == 9
    for result in results:
        assert result.state == search.CONVERGED
        assert result.low < truth[result.stratum] <= result.high
        assert result.high - result.low <= Decimal("0.005")
        assert result.probes <= bound
        assert len({o.value for o in observations if o.stratum == result.stratum}) == result.probes
    # the midpoints are written with the decimals the user wrote, never a float's tail
    assert all(len(str(o.value).split(".")[1]) <= 3 for o in observations)
    assert results[0].high <= results[1].low + Decimal("0.005")  # custom AR needs more


@pytest.mark.parametrize("low,high,resolution", [("0.50", "0.95", "0.005"), ("0", "1", "0.1"), ("0.1", "0.9", "0.03"),
                                                 ("10", "4000", "1"), ("0.700", "0.800", "0.001")])
@pytest.mark.parametrize("where", [0.01, 0.33, 0.5, 0.77, 0.999])
def test_any_threshold_inside_the_range_is_bracketed_within_the_resolution_in_at_most_the_bound(
        low, high, resolution, where):
    bounds = Bounds.parse(low, high, resolution)
    threshold = bounds.low + (bounds.high - bounds.low) * Decimal(str(where))
    results, _ = run_search(bounds, {"s": threshold})
    (result,) = results
    assert result.state == search.CONVERGED
    assert result.low < threshold <= result.high
    assert result.high - result.low <= bounds.resolution
    assert result.probes <= search.max_probes(bounds)


def test_repeated_probes_that_disagree_make_the_stratum_noisy_with_the_runs_named():
    bounds = Bounds.parse("0.60", "0.90", "0.01")

    def flaky(stratum, value, rep):  # certain far from 0.75, a coin near it: rep 1 ready, rep 2 not
        return value >= Decimal("0.80") or (value > Decimal("0.70") and rep == 0)

    results, observations = run_search(bounds, {"steady": Decimal("0.75"), "flaky": Decimal("0.75")}, 2,
                                       lambda s, v, rep: v >= Decimal("0.75") if s == "steady" else flaky(s, v, rep))
    steady, noisy = results
    assert steady.state == search.CONVERGED
    assert noisy.state == search.NOISY and noisy.next == []
    mixed = [o for o in observations if o.stratum == "flaky" and o.value == Decimal("0.75")]
    assert len(mixed) == 2 and all(o.run_id in noisy.note for o in mixed)
    assert "noisy" in noisy.note and "0.75" in noisy.note


def test_a_failure_above_a_success_is_reported_as_non_monotone_with_the_runs_named():
    bounds = Bounds.parse("0.50", "0.90", "0.01")
    obs = [Observation("s", Decimal("0.50"), "01_low", False), Observation("s", Decimal("0.90"), "02_high", True),
           Observation("s", Decimal("0.70"), "03_mid", True), Observation("s", Decimal("0.80"), "04_above", False)]
    (result,) = search.step(bounds, ["s"], obs)
    assert result.state == search.NON_MONOTONE and result.next == []
    assert "04_above" in result.note and "03_mid" in result.note and "0.80" in result.note


def test_ready_at_the_low_end_and_failing_at_the_high_end_is_non_monotone_too():
    bounds = Bounds.parse("0.50", "0.90", "0.01")
    obs = [Observation("s", Decimal("0.50"), "01_low", True), Observation("s", Decimal("0.90"), "02_high", False)]
    (result,) = search.step(bounds, ["s"], obs)
    assert result.state == search.NON_MONOTONE and "01_low" in result.note and "02_high" in result.note


@pytest.mark.parametrize("low_ok,high_ok,said", [(True, True, "below the range"), (False, False, "above the range")])
def test_a_threshold_outside_the_range_is_said_and_not_searched(low_ok, high_ok, said):
    bounds = Bounds.parse("0.50", "0.90", "0.01")
    obs = [Observation("s", Decimal("0.50"), "01", low_ok), Observation("s", Decimal("0.90"), "02", high_ok)]
    (result,) = search.step(bounds, ["s"], obs)
    assert result.state == search.NOT_BRACKETED and said in result.note and result.next == []


def test_a_probe_lost_to_a_kit_error_is_probed_once_more_then_the_stratum_stops_and_says_to_resume():
    bounds = Bounds.parse("0.50", "0.90", "0.01")
    obs = [Observation("s", Decimal("0.50"), "01", False), Observation("s", Decimal("0.90"), "02_lost", None)]
    (result,) = search.step(bounds, ["s"], obs)
    assert result.state == search.SEARCHING and [p.value for p in result.next] == ["0.90"]
    assert "02_lost" in result.next[0].why
    (result,) = search.step(bounds, ["s"], [*obs, Observation("s", Decimal("0.90"), "03_lost", None)])
    assert result.state == search.NO_OBSERVATION and result.next == []
    assert "02_lost, 03_lost" in result.note and "--resume" in result.note


def test_an_invalid_repetition_leaves_the_valid_ones_to_decide():
    bounds = Bounds.parse("0.50", "0.90", "0.1")
    obs = [Observation("s", Decimal("0.50"), "01", False), Observation("s", Decimal("0.50"), "02", None),
           Observation("s", Decimal("0.90"), "03", True)]
    (result,) = search.step(bounds, ["s"], obs)
    assert result.state == search.SEARCHING and [p.value for p in result.next] == ["0.70"]
    assert "bisects (0.50, 0.90]" in result.next[0].why


def test_the_most_probes_follow_the_range_and_resolution():
    assert search.max_probes(Bounds.parse("0.50", "0.95", "0.005")) == 9
    assert search.max_probes(Bounds.parse("0", "1", "0.5")) == 3
    assert search.max_probes(Bounds.parse("0", "1", "0.25")) == 4
