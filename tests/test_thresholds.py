"""thresholds.py: a search's result from runs.parquet rows, the manifest's probes and the budget's break-even —
what it claims, what it refuses to claim, and the difference between strata in flag units and GiB per GPU."""

from decimal import Decimal

import pandas as pd
import pytest

from launchlab import search
from launchlab.store.manifest import ManifestEntry
from launchlab.verdicts import thresholds

BOUNDS = search.Bounds.parse("0.70", "0.80", "0.01")


def probes(rows: list[tuple[str, str, str, str]]):
    """(run_id, stratum, value, status) → the runs frame and the manifest's runs."""
    runs = pd.DataFrame([{"run_id": r, "status": st, "mem_fraction_static": v} for r, _, v, st in rows])
    planned = [ManifestEntry(r, n, f"{s}, mem_fraction_static={v}", {"mem_fraction_static": v}, 1, "box", stratum=s,
                             why="probed") for n, (r, s, v, _) in enumerate(rows, 1)]
    return runs, planned


def budget(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"run_id": r, "break_even_fraction": b, "total_gib": t} for r, b, t in rows])


STEADY = [("01", "off", "0.70", "failed"), ("02", "off", "0.80", "ready"), ("03", "on", "0.70", "failed"),
          ("04", "on", "0.80", "ready"), ("05", "off", "0.75", "ready"), ("06", "on", "0.75", "failed"),
          ("07", "off", "0.72", "failed"), ("08", "on", "0.78", "ready"), ("09", "off", "0.74", "failed"),
          ("10", "on", "0.76", "ready")]


def test_converged_strata_have_their_interval_and_the_prediction_next_to_it():
    runs, planned = probes(STEADY)
    found = thresholds.table(BOUNDS, ["off", "on"], runs, planned, factor="mem_fraction_static",
                             budget=budget([("01", 0.7483, 93.54), ("02", 0.7485, 93.54), ("03", 0.7533, 92.92)]))
    off, on = found.to_dict("records")
    assert (off["state"], off["interval_low"], off["interval_high"], off["probes"]) == ("converged", 0.74, 0.75, 5)
    assert off["predicted_break_even"] == 0.7484 and off["predicted_in_interval"] is True
    assert (on["interval_low"], on["interval_high"]) == (0.75, 0.76) and on["predicted_in_interval"] is True
    assert on["runs"] == "03, 04, 06, 08, 10"
    [diff] = thresholds.differences(found, "off", "--mem-fraction-static")
    assert (diff["difference_low"], round(diff["difference_high"], 6)) == (0.0, 0.02)
    assert round(diff["predicted_difference"], 4) == 0.0049
    assert round(diff["predicted_difference_gib"], 3) == round(0.0049 * (93.54 + 92.92) / 2, 3)
    # both ends excluded: a change in (0, 0.02) is a rise, said as one
    assert diff["summary"].startswith("on raises the minimum --mem-fraction-static that starts, from "
                                      "(0.74, 0.75] at off to (0.75, 0.76]: by 0 to 0.02 (≈ 0.00 to 1.86 GiB per GPU)")


def test_a_threshold_change_reads_in_its_direction_with_sizes_not_signs():
    assert (thresholds.direction(0.0, 0.007), thresholds.span(0.0, 0.007)) == ("up", "0 to 0.007")
    assert (thresholds.direction(-0.01, -0.002), thresholds.span(-0.01, -0.002)) == ("down", "0.002 to 0.01")
    assert (thresholds.direction(-0.01, 0.0), thresholds.span(-0.01, 0.0)) == ("down", "0 to 0.01")
    assert (thresholds.direction(-0.003, 0.007), thresholds.span(-0.003, 0.007)) == ("either", "-0.003 to +0.007")


def test_a_prediction_outside_the_interval_is_said_so():
    runs, planned = probes(STEADY)
    found = thresholds.table(BOUNDS, ["off", "on"], runs, planned, factor="mem_fraction_static",
                             budget=budget([("01", 0.70, 93.5)]))
    assert bool(found.loc[0, "predicted_in_interval"]) is False
    text = thresholds.markdown({"flag": "--mem-fraction-static", "low": "0.70", "high": "0.80", "resolution": "0.01",
                                "strata": found.to_dict("records"), "differences": []})
    assert "predict the break-even at 0.700 (OUTSIDE the interval)" in text


def test_a_noisy_stratum_claims_no_interval_and_names_its_runs_in_escaped_markdown():
    rows = [("01", "a*b", "0.70", "failed"), ("02", "a*b", "0.80", "ready"), ("03", "a*b", "0.75", "ready"),
            ("04", "a*b", "0.75", "failed")]
    runs, planned = probes(rows)
    found = thresholds.table(BOUNDS, ["a*b"], runs, planned, factor="mem_fraction_static", budget=pd.DataFrame())
    row = found.iloc[0]
    assert row["state"] == "noisy" and row["interval_low"] is None and row["interval_high"] is None
    assert "03" in row["note"] and "04" in row["note"]
    assert thresholds.differences(found, "a*b", "--x") == []
    text = thresholds.markdown({"flag": "--x", "low": "0.70", "high": "0.80", "resolution": "0.01",
                                "strata": found.to_dict("records"), "differences": []})
    assert "**a\\*b**: noisy" in text


def test_kit_errors_are_not_observations():
    rows = [("01", "s", "0.70", "failed"), ("02", "s", "0.80", "error"), ("03", "s", "0.80", "error")]
    runs, planned = probes(rows)
    found = thresholds.table(BOUNDS, ["s"], runs, planned, factor="mem_fraction_static", budget=pd.DataFrame())
    assert found.iloc[0]["state"] == "no_observation" and "02, 03" in found.iloc[0]["note"]


def test_an_unfinished_search_says_so_with_its_probes_and_prediction_not_an_empty_dash(tmp_path):
    """The real vLLM search (examples/h200-vllm-threshold) as it stood before its last round: the bisection probes at
    0.006 planned but never run (the batch stopped when the GPU time ran out, as it once did)."""
    import json
    import shutil

    from conftest import ROOT
    from launchlab import params
    from launchlab.reporting import reportmd
    from launchlab.verdicts import frames

    [example] = ROOT.glob("examples/h200-vllm-threshold/2*")
    run_dir = tmp_path / example.name
    shutil.copytree(example, run_dir)
    for folder in run_dir.glob("runs/0[56]_*"):  # the manifest still lists them: planned, not run
        shutil.rmtree(folder)
    frames.write(run_dir, frames.build(run_dir, params.load(run_dir / "experiment.yaml")))
    reportmd.write_verdict(run_dir)
    text = thresholds.markdown(json.loads((run_dir / "verdict.json").read_text())["thresholds"])
    lines = [line for line in text.splitlines() if "searching" in line]
    assert len(lines) == 2 and not any(line.rstrip().endswith("—") for line in lines), text
    assert all("the batch stopped before the search ended" in line and "predict the break-even at 0.0052" in line
               for line in lines), text


# -- what the prediction did for the search (issue 30) ---------------------------------------------------------

def test_each_stratum_says_its_launches_against_bisection_alone_and_that_the_prediction_held():
    runs, planned = probes(STEADY)
    found = thresholds.table(BOUNDS, ["off", "on"], runs, planned, factor="mem_fraction_static",
                             budget=budget([("01", 0.7483, 93.54), ("02", 0.7485, 93.54), ("03", 0.7533, 92.92)]))
    off, on = found.to_dict("records")
    # bisection alone over 0.70–0.80 by 0.01: both ends, 0.75, 0.72, 0.74 (off) / 0.75, 0.78, 0.76 (on)
    assert (off["launches"], off["blind_launches"], off["prediction_held"], off["prediction_note"]) == (5, 5, True, "")
    assert (on["launches"], on["blind_launches"], on["prediction_held"]) == (5, 5, True)
    text = thresholds.markdown({"flag": "--mem-fraction-static", "low": "0.70", "high": "0.80", "resolution": "0.01",
                                "strata": found.to_dict("records"), "differences": []})
    assert "(5 probed values; 5 launches, bisection alone 5; the prediction held)" in text
    assert "prediction failed" not in text
    # a stratum still searching has seen one side of the prediction: it has not held yet, nothing contradicts it
    searching = [{**off, "state": "searching"}]
    text = thresholds.markdown({"flag": "--mem-fraction-static", "low": "0.70", "high": "0.80", "resolution": "0.01",
                                "strata": searching, "differences": []})
    assert "no outcome so far contradicts the prediction" in text and "the prediction held" not in text


def test_a_prediction_an_outcome_contradicts_failed_and_the_report_names_the_runs():
    runs, planned = probes(STEADY)
    # off's numbers predict 0.70, but it was not ready at 0.72 (run 07) and 0.74 (run 09), well above it
    found = thresholds.table(BOUNDS, ["off", "on"], runs, planned, factor="mem_fraction_static",
                             budget=budget([("01", 0.70, 93.5), ("02", 0.70, 93.5)]))
    off, on = found.to_dict("records")
    assert off["prediction_held"] is False and off["state"] == "converged"
    assert "not ready at 0.72 (run 07) above it" in off["prediction_note"]
    assert "not ready at 0.74 (run 09) above it" in off["prediction_note"]
    assert (on["prediction_held"], on["prediction_note"]) == (None, "")  # no numbers: no prediction
    text = thresholds.markdown({"flag": "--mem-fraction-static", "low": "0.70", "high": "0.80", "resolution": "0.01",
                                "strata": found.to_dict("records"), "differences": []})
    assert "5 launches, bisection alone 5; the prediction failed)" in text
    assert "**The prediction failed**, so the search bisected: the predicted break-even 0.7 failed" in text


def test_the_guides_carry_the_prediction_with_the_drain_tolerance_as_slack_and_distrust_a_disturbed_probe():
    from launchlab.verdicts import gpustate

    runs, planned = probes(STEADY[:4])
    figures = budget([("01", 0.7483, 93.54), ("02", 0.7485, 93.54), ("03", 0.7533, 92.92), ("04", 0.7533, 92.92)])
    guides = thresholds.guides(["off", "on"], runs, planned, factor="mem_fraction_static", budget=figures,
                               resolution=Decimal("0.01"), tolerance_mib=64)
    assert guides["off"].prediction == pytest.approx(Decimal("0.7484"))
    assert guides["off"].slack == Decimal("0.000668")  # 64 MiB of 93.54 GiB
    coarse = thresholds.guides(["off"], runs, planned, factor="mem_fraction_static", budget=figures,
                               resolution=Decimal("0.001"), tolerance_mib=512)
    assert coarse["off"].slack == Decimal("0.0005")  # 512 MiB is 0.0053 of the card: half the resolution instead
    assert guides["off"].distrust == guides["on"].distrust == ""
    # the kind predicts another argument than the searched flag: nothing to follow
    assert thresholds.guides(["off"], runs, planned, factor="tp_size", budget=figures, resolution=Decimal("0.01")) == {}
    # another process held 2 GiB of a GPU during run 04: on's prediction is not followed, off's still is
    hog = gpustate.GpuProcess("box", 4242, "gpu-hog", "GPU-0", 2048.0)
    disturbed = gpustate.DuringRun((gpustate.Moment("watched", "box", 70000.0, 2048.0, 0.0),), (hog,))
    facts = {r: {"gpu_state": gpustate.DuringRun().to_json()} for r in ("01", "02", "03")}
    facts["04"] = {"gpu_state": disturbed.to_json()}
    guides = thresholds.guides(["off", "on"], runs, planned, factor="mem_fraction_static", budget=figures,
                               resolution=Decimal("0.01"), facts=facts, tolerance_mib=64)
    assert guides["off"].distrust == "" and "during run 04 processes outside it held up to 2048 MiB" in \
        guides["on"].distrust
    found = thresholds.table(BOUNDS, ["off", "on"], runs, planned, factor="mem_fraction_static", budget=figures,
                             facts=facts, tolerance_mib=64)
    assert found.loc[1, "prediction_held"] is None and "pid 4242 (gpu-hog)" in found.loc[1, "prediction_note"]
    # a probe whose figures disagree with the others' is not followed either
    figures.loc[figures["run_id"] == "02", "break_even_fraction"] = 0.7600
    guides = thresholds.guides(["off"], runs, planned, factor="mem_fraction_static", budget=figures,
                               resolution=Decimal("0.01"), tolerance_mib=64)
    assert "disagrees with the stratum's other probes" in guides["off"].distrust


def test_a_search_guided_by_the_params_prediction_is_judged_by_it_not_by_its_runs_own_figures():
    """The H100 search (examples/h100-sglang-diagnose-search/20261205-231315) in small: the params predicted 0.745,
    the search probed 0.74 and 0.75 around it and stopped; the same runs' own figures say 0.7435. Judged with
    the runs' figures, the pair is no bracket bisection would have reached (the ends are missing); judged as the
    search ran, it converged."""
    runs, planned = probes([("01", "s", "0.74", "failed"), ("02", "s", "0.75", "ready")])
    figures = budget([("01", 0.7440, 93.54), ("02", 0.7430, 93.54)])
    prior = search.Guide(Decimal("0.745"), prior=True)
    assert thresholds.guides(["s", "t"], runs, planned, factor="mem_fraction_static", budget=figures,
                             resolution=BOUNDS.resolution, prior=prior) == {"s": prior, "t": prior}
    [unguided] = thresholds.table(BOUNDS, ["s"], runs, planned, factor="mem_fraction_static",
                                  budget=figures).to_dict("records")
    assert unguided["state"] == "searching"
    [row] = thresholds.table(BOUNDS, ["s"], runs, planned, factor="mem_fraction_static", budget=figures,
                             prior=prior).to_dict("records")
    assert (row["state"], row["interval_low"], row["interval_high"], row["launches"]) == ("converged", 0.74, 0.75, 2)
    assert row["prediction_held"] is True and row["predicted_break_even"] == pytest.approx(0.7435)
    found = {"flag": "--mem-fraction-static", "strata": [row, unguided]}
    assert thresholds.unfinished(found) == ["the threshold search of --mem-fraction-static has no interval at s: not "
                                            "converged after 2 probed value(s): the batch stopped before the search "
                                            "ended; --resume continues it"]


def test_a_prediction_given_with_the_params_is_named_where_it_held_apart_from_the_runs_own_figures():
    """The H100 search followed the params' 0.0052 and its runs' own figures said 0.00512: "the prediction held" next
    to 0.00512 read as if 0.00512 had held. The CLI's end of search and the report name the one it followed."""
    from launchlab.params.searchspec import SearchSpec
    from launchlab.runner import searchbatch

    spec = SearchSpec(flag="--mem-fraction-static", low="0.0047", high="0.0055", resolution="0.0002", predicted="0.0052")
    result = search.StratumResult("baseline", search.CONVERGED, Decimal("0.0051"), Decimal("0.0053"), probes=2,
                                  runs=["01", "02"], prediction=search.HELD)
    said = searchbatch.cost(spec, result, spec.prior)
    assert said == " — 2 launches, bisection alone 4; the prediction it followed (0.0052, given with the params) held"
    row = {"stratum": "baseline", "state": "converged", "interval_low": 0.0051, "interval_high": 0.0053, "probes": 2,
           "launches": 2, "blind_launches": 4, "prediction_held": True, "predicted_break_even": 0.00512,
           "predicted_in_interval": True, "predicted_n": 2, "predicted_min": 0.00505, "predicted_max": 0.0052,
           "guide_prediction": 0.0052, "guide_from": "params", "note": "", "prediction_note": ""}
    text = thresholds.markdown({"flag": "--mem-fraction-static", "low": "0.0047", "high": "0.0055",
                                "resolution": "0.0002", "strata": [row], "differences": []})
    assert ("2 launches, bisection alone 4; the prediction it followed (0.0052, given with the params) held); the "
            "server's own numbers predict the break-even at 0.00512") in text
    # the runs' own prediction is the figure said right after: not named twice
    assert "the prediction held" in thresholds.markdown({**{"flag": "f", "low": "0", "high": "1", "resolution": "0.1"},
                                                         "strata": [{**row, "guide_from": "runs"}], "differences": []})
