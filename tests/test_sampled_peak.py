"""A sampled peak is a value only of a run that stood ready (records.STOOD_READY): a failed launch may free its
memory before the sampler looks (two failing levels of one launch read 73.9 and 45.2 GiB). It never shows a level
taking effect, never makes an effect or the question's answer; ready runs' differences still do. compare: test_compare."""

from __future__ import annotations

import math

from launchlab.verdicts import analysis, question, varied, verdict
from test_varied_property import evidence_of

ASK = "How much GPU memory does x save?"


def judged(ends: dict[str, list[tuple[str, float]]]):
    runs = [({"x": lv}, end, 30.0, gib * 1024) for lv, said in ends.items() for end, gib in said]
    v = verdict.build(evidence_of({"x": ["x0", "x1"]}, runs))
    return v, [e for e in v.effects if e.metric == "peak_mem_used_mib"], [
        w for w in v.warnings if w.startswith("peak_mem_used_mib of x=x1")]


def test_two_levels_failing_at_kv_sizing_with_other_peaks_make_no_effect_and_no_answer():
    v, peaks, [note] = judged({"x0": [("failed-kv", 73.9)] * 3, "x1": [("failed-kv", 45.2)] * 3})
    assert v.factors["x"].status == "not_shown_to_vary" and peaks == []
    assert "is not compared with x=x0" in note and "3 runs failed in kv_cache" in note and "lower bound" in note
    assert question.answer_lines(ASK, v.effects, {"x": "x0"}) == []


def test_ready_runs_whose_peaks_differ_show_the_level_taking_effect_and_make_the_effect():
    v, [peak], _ = judged({"x0": [("ready", 70.0)] * 3, "x1": [("ready", 40.0)] * 3})
    assert v.factors["x"].status == "neutral"  # the manipulation check: the peaks tell the levels apart
    assert round(peak.diff / 1024, 1) == -30.0 and peak.n == peak.baseline_n == 3
    assert "`x=x1` 40.0 GiB vs `x=x0` 70.0 GiB" in question.answer_lines(ASK, v.effects, {"x": "x0"})[0]
    row = {"status": "failed", "peak_mem_used_mib": 7e4}
    assert varied.PEAK not in varied.observed(row, {}, outcome="fails", env={}, kind="sglang")
    assert varied.observed({**row, "status": "degraded"}, {}, outcome="x", env={}, kind="sglang")[varied.PEAK] == 7e4


def test_one_failed_run_beside_ready_ones_is_left_out_and_said_and_the_ready_ones_are_compared():
    _, [peak], [note] = judged({"x0": [("ready", 70.0)] * 2 + [("failed-kv", 20.0)], "x1": [("ready", 60.0)] * 3})
    assert round(peak.diff / 1024, 1) == -10.0 and (peak.n, peak.baseline_n) == (3, 2)
    assert note.startswith("peak_mem_used_mib of x=x1 against x=x0 is compared over the runs that stood ready: runs "
                           "not ready left out (x=x0: 1 run failed in kv_cache)"), note


def test_the_outcomes_table_gives_the_peak_of_the_runs_that_stood_ready_and_none_for_a_variant_that_never_did():
    ev = evidence_of({"x": ["x0", "x1"]}, [({"x": "x0"}, "ready", 30.0, 70.0 * 1024),
                                           ({"x": "x0"}, "failed-kv", 30.0, 75.0 * 1024),
                                           ({"x": "x1"}, "failed-kv", 30.0, 45.2 * 1024)])
    table = analysis.outcomes(ev.ledger.frame(ev.runs), ["x"]).set_index("x")
    assert table.loc["x0", "ready_peak_mem_used_mib_max"] == 70.0 * 1024  # not the failed run's 75.0
    assert math.isnan(table.loc["x1", "ready_peak_mem_used_mib_max"])  # blank, not the lower bound 45.2
