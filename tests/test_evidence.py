"""The strength of evidence of each decision (issue 24, points 3 and 4), from observation frames: Fisher's exact
test (scipy.stats) and the repetitions per side that would settle a split, a neutral factor's counts, effects with
a 95 % interval from two runs per side and the single values below that, and each metric's own n in a warning."""

import pandas as pd
import pytest

from launchlab.verdicts import analysis, ledger
from launchlab.verdicts import effects as effects_mod


def factor_effects(runs: pd.DataFrame, events: pd.DataFrame, factors: list[str], baseline: dict[str, str]) -> list[dict]:
    """The effects of the runs' levels, from their evidence ledger (every run as declared)."""
    return effects_mod.factor_effects(ledger.build(runs, factors), runs, events, baseline)[0]


def test_fisher_gives_the_issues_two_examples_and_four_runs_per_side_settle_an_all_or_nothing_split():
    assert analysis.exact_p(2, 2, 0, 2) == pytest.approx(1 / 3)
    assert analysis.exact_p(4, 4, 0, 4) == pytest.approx(0.0286, abs=1e-4)
    assert analysis.settling_repetitions(1.0, 0.0) == analysis.settling_repetitions(0.0, 1.0) == 4
    # a weaker split needs more: 3 of 4 ready against none
    assert analysis.settling_repetitions(0.75, 0.0) > 4
    assert analysis.exact_p(*(lambda n: (round(0.75 * n), n, 0, n))(analysis.settling_repetitions(0.75, 0.0)))
    assert analysis.settling_repetitions(0.5, 0.5) is None  # equal shares: no number of runs tells them apart


def runs_frame(rows: list[tuple[str, str, int, str]]) -> pd.DataFrame:
    """(custom_ar, mem_fraction, repetition, status) → a runs frame as frames.py writes it."""
    return pd.DataFrame([{"run_id": f"{i:02d}_{car}.{mf}_rep{rep}", "variant": f"custom_ar-{car}.mem_fraction-{mf}",
                          "repetition": rep, "host": "box", "status": status, "failure_reason": None,
                          "failure_message": None, "custom_ar": car, "mem_fraction": mf, "peak_mem_used_mib": 1.0,
                          "startup_s": 10.0}
                         for i, (car, mf, rep, status) in enumerate(rows, 1)])


def demo_like(repetitions: int) -> pd.DataFrame:
    """The demo's outcomes: the fraction decides, custom all-reduce does not."""
    return runs_frame([(car, mf, rep, "ready" if mf == "0.85" else "failed")
                       for rep in range(1, repetitions + 1) for car in ("off", "on") for mf in ("0.55", "0.85")])


def decided(runs: pd.DataFrame, factor: str, reference: str):
    obs = analysis.observations(runs, ["custom_ar", "mem_fraction"])
    return analysis.decide(obs, factor, ["custom_ar", "mem_fraction"], reference=reference)


@pytest.mark.parametrize(("repetitions", "p", "settle"), [(2, 1 / 3, 4), (4, 0.0286, None)])
def test_a_deciding_factor_carries_its_weakest_p_and_the_repetitions_that_would_settle_it(repetitions, p, settle):
    decision = decided(demo_like(repetitions), "mem_fraction", "0.55")
    assert decision.status == "decides"
    assert decision.p_value == pytest.approx(p, abs=1e-4) and decision.significant is (p < 0.05)
    assert decision.repetitions_to_settle == settle


def test_a_neutral_factor_carries_its_counts_and_p_one_and_nothing_to_settle():
    decision = decided(demo_like(2), "custom_ar", "off")
    assert decision.status == "neutral" and decision.p_value == 1.0 and decision.significant is False
    assert decision.repetitions_to_settle is None
    evidence = decision.evidence()
    assert "on 2/2 vs off 2/2 ready at mem_fraction=0.85" in evidence
    assert "on 0/2 vs off 0/2 ready at mem_fraction=0.55" in evidence and "the same share ready" in evidence


def kv_events(runs: pd.DataFrame, tokens: dict[str, float]) -> pd.DataFrame:
    """kv_tokens logged by rank 0 of the runs named in tokens; no value for the others."""
    return pd.DataFrame([{"run_id": r, "t_s": 1.0, "rank": "0", "field": "kv_tokens", "value": v}
                         for r, v in tokens.items()])


def test_an_effect_has_a_95_interval_with_two_runs_per_side_and_single_values_with_one():
    runs = runs_frame([("off", "0.85", 1, "ready"), ("on", "0.85", 1, "ready"),
                       ("off", "0.85", 2, "ready"), ("on", "0.85", 2, "ready")])
    ids = list(runs["run_id"])
    both = kv_events(runs, {ids[0]: 1000.0, ids[1]: 900.0, ids[2]: 1010.0, ids[3]: 880.0})
    [kv] = [e for e in factor_effects(runs, both, ["custom_ar", "mem_fraction"],
                                               {"custom_ar": "off", "mem_fraction": "0.85"}) if e["metric"] == "kv_tokens"]
    assert (kv["n"], kv["baseline_n"]) == (2, 2) and kv["diff"] == pytest.approx(-115.0)
    # the matched differences are -100 and -130: their t-interval (scipy.stats), which holds the mean difference
    assert kv["ci_low"] < -115.0 < kv["ci_high"] and kv["ci_high"] - kv["ci_low"] > 30
    # paired by repetition, not by row order: the same interval with one level's rows the other way round
    shuffled = runs.iloc[[0, 3, 2, 1]].reset_index(drop=True)
    [again] = [e for e in factor_effects(shuffled, both, ["custom_ar", "mem_fraction"],
                                                  {"custom_ar": "off", "mem_fraction": "0.85"})
               if e["metric"] == "kv_tokens"]
    assert (again["ci_low"], again["ci_high"]) == pytest.approx((kv["ci_low"], kv["ci_high"]))
    one = kv_events(runs, {ids[0]: 1000.0, ids[1]: 900.0})
    [kv] = [e for e in factor_effects(runs, one, ["custom_ar", "mem_fraction"],
                                               {"custom_ar": "off", "mem_fraction": "0.85"}) if e["metric"] == "kv_tokens"]
    assert (kv["n"], kv["baseline_n"]) == (1, 1) and kv.get("ci_low") is None and kv.get("ci_high") is None
    assert kv["values"] == [900.0] and kv["baseline_values"] == [1000.0]


def test_a_warning_names_each_metrics_own_n():
    runs = runs_frame([("off", "0.85", 1, "ready"), ("on", "0.85", 1, "ready"),
                       ("off", "0.85", 2, "ready"), ("on", "0.85", 2, "ready")])
    ids = list(runs["run_id"])
    events = kv_events(runs, {ids[0]: 1000.0, ids[1]: 900.0})  # kv_tokens from one run per side only
    effects = factor_effects(runs, events, ["custom_ar", "mem_fraction"],
                                      {"custom_ar": "off", "mem_fraction": "0.85"})
    [line] = [w for w in effects_mod.effect_warnings(effects) if w.startswith("custom_ar=on")]
    assert "kv_tokens n=1 vs 1" in line and "startup_s n=2 vs 2" in line


def test_a_run_stopped_because_the_batch_was_interrupted_is_known_by_its_reason_and_an_older_record_by_its_message():
    runs = runs_frame([("off", "0.85", 1, "error"), ("off", "0.85", 2, "error"), ("off", "0.85", 3, "error")])
    runs["failure_reason"] = ["interrupted", None, None]
    runs["failure_message"] = ["stopped by the batch", "interrupted by SIGTERM; the kit stopped the server",
                               "the run notebook failed: DeadKernelError"]
    obs = analysis.observations(runs, ["custom_ar", "mem_fraction"])
    assert list(obs["invalid_kind"]) == [analysis.INTERRUPTED, analysis.INTERRUPTED, analysis.KIT_ERROR]


def test_an_unsettled_change_of_how_the_launch_fails_without_a_p_value_is_said_without_one():
    """Found by tests/test_varied_property.py: both levels fail, differently, and no share of ready runs was tested
    (p_value None) — the reason's sentence raised a TypeError formatting it."""
    from launchlab.store.verdictrecord import Decision
    from launchlab.verdicts import verdict

    said = verdict._unsettled("x", Decision(status="changes_how_it_fails", summary="", strata=[], runs_per_side=2))
    assert said == ("x changes how the launch fails on 2 runs per side: observed, not settled — more than 100 runs "
                    "per side would be needed")
