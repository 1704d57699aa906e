"""Issue 68: the finding "a predicted break-even the runs contradict" (consistency.break_even_contradicted) could be
switched off with every fast test still passing. Each way the runs can contradict it, and the ways they cannot."""

from __future__ import annotations

import pandas as pd

from launchlab.verdicts import consistency, ledger

FACTORS = ["fraction"]


def runs(rows: list[tuple[str, str, str | None]]) -> pd.DataFrame:
    """(fraction, status, failure_reason) → a runs frame as frames.py writes it, one variant per fraction."""
    return pd.DataFrame([{"run_id": f"{i:02d}_fraction-{f}_rep1", "variant": f"fraction={f}", "repetition": 1,
                          "host": "gpu", "status": status, "failure_reason": reason, "failure_phase": None,
                          "failure_message": None, "fraction": f, "peak_mem_used_mib": 1.0, "startup_s": 10.0}
                         for i, (f, status, reason) in enumerate(rows, 1)])


def found(frame: pd.DataFrame, predicted: dict[str, float]) -> list[dict]:
    led = ledger.build(frame, FACTORS)
    summary = pd.DataFrame({"variant": list(predicted), "break_even_fraction": list(predicted.values())})
    # each run's own argument dump, as parsed.json holds it: the fraction it was launched with
    parsed = {r.run_id: {"args": {"mem_fraction_static": r.fraction}} for r in frame.itertuples()}
    return consistency.break_even_contradicted(led, summary, pd.DataFrame(columns=["run_id", "field", "value"]),
                                               parsed=parsed, kind="sglang")


def test_a_run_that_started_below_its_predicted_break_even_contradicts_it():
    said = found(runs([("0.004", "ready", None)]), {"fraction=0.004": 0.0052})
    assert [f["kind"] for f in said] == ["break-even"] and said[0]["runs"] == ["01_fraction-0.004_rep1"]
    assert "started at mem_fraction_static=0.00400 against 0.00520 predicted for fraction=0.004" in said[0]["detail"]


def test_a_run_that_failed_for_want_of_room_above_it_contradicts_it():
    said = found(runs([("0.008", "failed", "kv_cache_no_memory")]), {"fraction=0.008": 0.0052})
    assert said and "failed for want of room at mem_fraction_static=0.00800" in said[0]["detail"]


def test_runs_on_the_side_of_the_break_even_it_predicts_and_other_failures_contradict_nothing():
    frame = runs([("0.004", "failed", "kv_cache_no_memory"), ("0.008", "ready", None), ("0.008", "failed", "oom")])
    assert found(frame, {"fraction=0.004": 0.0052, "fraction=0.008": 0.0052}) == []
    # within the margin (0.5 % of the prediction) is agreement, not a contradiction
    assert found(runs([("0.00519", "ready", None)]), {"fraction=0.00519": 0.0052}) == []
