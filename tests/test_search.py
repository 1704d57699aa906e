"""search.py, the bisection state: which value to probe next and what the probes so far show, per stratum.
Outcomes come from a threshold function, as a launch's do; the real batch is in test_threshold_search.py."""

import math
from decimal import Decimal

import pytest

from launchlab import search
from launchlab.search import Bounds, Observation


def run_search(bounds: Bounds, thresholds: dict[str, Decimal], repetitions: int = 1, outcome=None, guides=None):
    """Drive step() to the end as the batch does: every probe it asks for becomes `repetitions` observations.
    guides: each stratum's search.Guide (the server's predicted break-even), as searchbatch passes them."""
    observations: list[Observation] = []
    rounds = 0
    while True:
        results = search.step(bounds, list(thresholds), observations, guides=guides)
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


# -- guided by the server's own numbers (issue 30) -------------------------------------------------------------

RANGES = [("0.50", "0.95", "0.005"), ("0", "1", "0.1"), ("0.1", "0.9", "0.03"), ("10", "4000", "1"),
          ("0.700", "0.800", "0.001"), ("0.005", "0.007", "0.001")]


@pytest.mark.parametrize("low,high,resolution", RANGES)
@pytest.mark.parametrize("where", [0.0, 0.01, 0.33, 0.5, 0.77, 0.999])
def test_the_two_values_next_to_a_prediction_are_where_bisection_ends_for_a_server_that_follows_it(
        low, high, resolution, where):
    bounds = Bounds.parse(low, high, resolution)
    predicted = bounds.low + (bounds.high - bounds.low) * Decimal(str(where))
    below, above = search.next_probes(bounds, bounds.low, bounds.high, predicted)
    assert below <= predicted < above and above - below <= bounds.resolution
    (blind,), _ = run_search(bounds, {"s": predicted}, outcome=lambda s, v, rep: v > predicted)
    assert (blind.low, blind.high) == (below, above)
    assert search.blind_probes(bounds, above) == blind.probes


def test_the_demo_predictions_give_todays_intervals_in_four_probes_per_stratum():
    bounds = Bounds.parse("0.50", "0.95", "0.005")
    truth = {"custom_ar=off": Decimal(str(sim_break_even(False))), "custom_ar=on": Decimal(str(sim_break_even(True)))}
    blind, _ = run_search(bounds, truth, outcome=lambda s, v, rep: v > truth[s])
    guides = {s: search.Guide(t) for s, t in truth.items()}
    guided, observations = run_search(bounds, truth, outcome=lambda s, v, rep: v > truth[s], guides=guides)
    for before, after in zip(blind, guided, strict=True):
        assert after.state == search.CONVERGED and (after.low, after.high) == (before.low, before.high)
        assert after.probes == 4 and before.probes == 9 and after.prediction == search.HELD
    probed = {s: sorted(str(o.value) for o in observations if o.stratum == s) for s in truth}
    assert probed == {"custom_ar=off": ["0.50", "0.747", "0.750", "0.95"],
                      "custom_ar=on": ["0.50", "0.750", "0.754", "0.95"]}


def test_the_guided_round_asks_for_both_values_next_to_the_prediction_and_says_why():
    bounds = Bounds.parse("0.50", "0.95", "0.005")
    obs = [Observation("s", Decimal("0.50"), "01", False), Observation("s", Decimal("0.95"), "02", True)]
    (result,) = search.step(bounds, ["s"], obs, guides={"s": search.Guide(Decimal("0.7483"))})
    assert [p.value for p in result.next] == ["0.747", "0.750"]
    assert result.next[0].why.startswith("just below the break-even the server's own numbers predict (0.7483)")
    assert result.next[1].why.startswith("just above") and "ends on (0.747, 0.750]" in result.next[1].why
    # the ends come first, guide or not: bisection's assumption is checked before anything is predicted
    (first,) = search.step(bounds, ["s"], [], guides={"s": search.Guide(Decimal("0.7483"))})
    assert [p.value for p in first.next] == ["0.50", "0.95"]


def test_an_outcome_that_contradicts_the_prediction_sends_the_stratum_back_to_bisection_and_says_it_failed():
    bounds = Bounds.parse("0.50", "0.95", "0.005")
    truth = Decimal("0.7483")
    lie = search.Guide(Decimal("0.7283"), slack=Decimal("0.0007"))  # numbers 2 GiB off what the server really has
    (result,), observations = run_search(bounds, {"s": truth}, outcome=lambda s, v, rep: v > truth,
                                         guides={"s": lie})
    assert result.state == search.CONVERGED and result.low < truth <= result.high
    assert result.high - result.low <= bounds.resolution
    assert result.prediction == search.FAILED and result.prediction_note.startswith("the predicted break-even 0.7283 "
                                                                                    "failed")
    wrong = [o for o in observations if o.value > lie.prediction and not o.success]
    assert wrong and all(o.run_id in result.prediction_note for o in wrong)
    assert 4 < result.probes <= search.max_probes(bounds) + 2  # the two guided values, then bisection
    # the interval is established by probes on both sides, never the prediction
    assert {result.low, result.high} <= {o.value for o in observations}


def test_an_outcome_within_the_slack_of_the_prediction_does_not_contradict_it():
    guide = search.Guide(Decimal("0.7503"), slack=Decimal("0.0007"))
    ready_just_below = [Observation("s", Decimal("0.750"), "01", True)]
    assert search.judge(guide, ready_just_below) == (search.HELD, "")
    state, why = search.judge(search.Guide(Decimal("0.7503")), ready_just_below)
    assert state == search.FAILED and "ready at 0.750 (run 01) at or below it" in why


def test_a_distrusted_prediction_is_not_followed_and_the_search_bisects_as_without_one():
    bounds = Bounds.parse("0.50", "0.95", "0.005")
    truth = Decimal("0.7483")
    plain, _ = run_search(bounds, {"s": truth})
    guide = search.Guide(truth, distrust="probe 0.50 (runs 01) disagrees with the stratum's other probes")
    (result,), observations = run_search(bounds, {"s": truth}, guides={"s": guide})
    assert (result.low, result.high, result.probes) == (plain[0].low, plain[0].high, plain[0].probes)
    assert result.probes == 9 and [o.value for o in observations][2] == Decimal("0.725")  # the first midpoint
    assert result.prediction == search.NOT_FOLLOWED and "disagrees" in result.prediction_note


def test_repetitions_that_disagree_fail_the_prediction_too():
    guide = search.Guide(Decimal("0.70"))
    obs = [Observation("s", Decimal("0.75"), "03", True), Observation("s", Decimal("0.75"), "04", False)]
    state, why = search.judge(guide, obs)
    assert state == search.FAILED and "not ready at 0.75 (run 04) above it" in why and "03" not in why


def test_bisection_alone_takes_the_ends_and_one_probe_per_halving():
    bounds = Bounds.parse("0.50", "0.95", "0.005")
    assert search.blind_probes(bounds, Decimal("0.750")) == 9
    assert search.blind_probes(Bounds.parse("0.005", "0.007", "0.001"), Decimal("0.006")) == 3
    assert search.blind_probes(Bounds.parse("0", "1", "0.5"), Decimal("1")) == 3
