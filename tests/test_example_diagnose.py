"""The committed diagnose route on a real GPU (examples/h100-sglang-diagnose, issue 48, run 2026-12-05 on one H100 by
scripts/diagnose-example.sh): a launch of SGLang 0.5.17 that failed by hand at --mem-fraction-static 0.002, the
drafts `launchlab diagnose --host local` made from its log there, and the 2×2 run from the draft (14 of its 16
runs: the device time ran out before the last two). This kit drafts the same files from the log, and judges the
runs again from their raw files: reproduced 4 of 4, the fraction decides at p < 0.05 in each stratum, the kit's
own instrumentation changes nothing and agrees with every outcome."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB
from test_example_sglang import rejudged

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h100-sglang-diagnose"
RUN_DIR = next(EXAMPLE.glob("2*"))
SGLANG_MINIMUM = 0.0052  # what SGLang's own error in failing-launch.log says of this model on this card


def test_the_log_is_sglang_s_own_failure_on_an_h100_with_its_minimum():
    log = (EXAMPLE / "failing-launch.log").read_text()
    assert "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.002" in log
    assert f"minimum viable = 1 - available/pre = {SGLANG_MINIMUM}" in log


@pytest.mark.parametrize(("draft", "flags"), [("diagnose-here.yaml", []), ("diagnose-here-search.yaml", ["--search"])])
def test_the_committed_drafts_are_what_this_kit_drafts_from_the_log(tmp_path, draft, flags):
    out = tmp_path / draft
    subprocess.run([*LAUNCHLAB, "diagnose", str(EXAMPLE / "failing-launch.log"),
                    "--host", "local", *flags, "-o", str(out)], check=True, capture_output=True, cwd=tmp_path)
    assert out.read_text() == (EXAMPLE / draft).read_text()


def test_the_search_draft_brackets_sglang_s_minimum_in_two_probes_and_is_named_apart():
    text = (EXAMPLE / "diagnose-here-search.yaml").read_text()
    low, high, resolution, predicted = (float(re.search(rf'{k}: "([0-9.]+)"', text).group(1))
                                        for k in ("low", "high", "resolution", "predicted"))
    assert 0 < low < 0.002 + 0.003 < SGLANG_MINIMUM <= predicted < high <= 1  # inside the flag's domain
    assert predicted - resolution < SGLANG_MINIMUM <= predicted and resolution <= 0.0002
    assert 'experiment: "diagnose-sglang-kv_cache_no_memory-search"' in text


def test_every_run_is_real_sglang_0517_on_an_h100_and_the_instrumented_ones_print_and_were_reverted():
    seen = 0
    for folder in sorted((RUN_DIR / "runs").iterdir()):
        status = json.loads((folder / "status.json").read_text())
        if status["status"] == "error" or not (folder / "provenance.json").exists():
            continue  # interrupted when the call's time ran out
        prov = json.loads((folder / "provenance.json").read_text())
        assert prov["simulated"] is False and prov["transport"] == "local" and prov["server_kind"] == "sglang"
        assert [g["name"] for g in prov["host_facts"]["gpus"]] == ["NVIDIA H100 80GB HBM3"]
        assert (prov["integrity"]["package"], prov["integrity"]["version"]) == ("sglang", "0.5.17")
        debug = "debug-print" in folder.name
        assert bool(prov.get("patched")) is debug, folder.name
        if debug:
            assert "package pristine (RECORD check): True" in " ".join(status["notes"]), folder.name
        line = re.search(r"DEBUG profile_available_bytes: .* rest=(-?[0-9.]+) GB", (folder / "server.log").read_text())
        assert (line is not None) is debug, folder.name
        if line:  # the instrumentation's own verdict agrees with the outcome
            assert (float(line.group(1)) > 0) is (status["status"] == "ready"), folder.name
        seen += 1
    assert seen == 15  # the warm-up and 14 of the 16 planned runs


def test_judged_again_the_baseline_reproduces_the_log_and_the_fraction_decides_at_p_below_005(tmp_path):
    for v in (json.loads((RUN_DIR / "verdict.json").read_text()), rejudged(RUN_DIR, tmp_path)):
        assert v["reproduced"]["reproduced"] is True and len(v["reproduced"]["matched"]) == 4
        assert v["controlled"] and v["confounds"] == []
        assert v["outcome_factors"] == ["mem_fraction_static"] and v["neutral_factors"] == ["debug"]
        # the fraction's decision is settled (p < 0.05); debug's "no change" is not in its stratum of 3 runs a side,
        # where even a complete change would give p = 0.1 (issue 63: conclusive means settled at the kit's bar)
        assert v["factors"]["mem_fraction_static"]["settled"] is True and v["factors"]["debug"]["settled"] is False
        assert not v["conclusive"] and [r.split(":")[0] for r in v["inconclusive_reasons"]] == [
            "debug changed nothing on 3 runs per side"]
        fraction = v["factors"]["mem_fraction_static"]
        assert len(fraction["strata"]) == 2 and all(s["changes"] for s in fraction["strata"])
        assert fraction["significant"] and fraction["p_value"] < 0.05  # the weakest stratum's: 0/4 vs 3/3
        for row in v["budget"]:
            assert row["break_even_fraction"] == pytest.approx(SGLANG_MINIMUM, abs=0.0001)
    report = (RUN_DIR / "report.md").read_text()
    assert "**Reproduced:** the baseline failed as `failing-launch.log` did" in report and "in 4 of 4 runs" in report
    assert "p = 0.029" in report and "Finish the batch (2 of 16 runs interrupted or not run)" in report
    # its paths are said from the folder that holds both (a shared report names no folder of the renderer's disk):
    # the command says where it runs from
    assert "--repetitions 4` from the folder that holds both its paths." in report


SEARCHED_RUN_DIR = EXAMPLE.parent / "h100-sglang-diagnose-search" / "20261205-231315"


def test_the_search_run_to_its_end_on_the_h100_brackets_sglang_s_minimum_in_two_launches_as_the_search_said(tmp_path):
    """The search draft as drafted (with its warm-up) in the next session: 0.0051 failed as the log did, 0.0053
    started; the search said "converged in (0.0051, 0.0053] — 2 launches, bisection alone 4; the prediction held".
    The report judged it "no threshold yet" on the same runs — it followed the runs' own mean break-even (0.00512)
    where the search had followed the params' (0.00520) — until both asked thresholds.guides for the prior."""
    statuses = {p.name: json.loads((p / "status.json").read_text()) for p in (SEARCHED_RUN_DIR / "runs").iterdir()}
    assert [(statuses[r]["status"], statuses[r]["failure_reason"]) for r in sorted(statuses)] == [
        ("failed", "kv_cache_no_memory"), ("ready", None), ("ready", None)]  # 01, 02 and the warm-up
    log = (SEARCHED_RUN_DIR / "runs/01_mem_fraction_static-0.0051_rep1/server.log").read_text()
    assert f"minimum viable = 1 - available/pre = {SGLANG_MINIMUM}" in log
    call = (SEARCHED_RUN_DIR.parent / "sglang-example.log").read_text()
    assert "converged in (0.0051, 0.0053] — 2 launches, bisection alone 4; the prediction held" in call
    for v in (json.loads((SEARCHED_RUN_DIR / "verdict.json").read_text()), rejudged(SEARCHED_RUN_DIR, tmp_path)):
        [stratum] = v["thresholds"]["strata"]
        assert stratum["state"] == "converged" and (stratum["interval_low"], stratum["interval_high"]) == (0.0051, 0.0053)
        assert stratum["interval_low"] < SGLANG_MINIMUM <= stratum["interval_high"]
        assert (stratum["launches"], stratum["blind_launches"], stratum["prediction_held"]) == (2, 4, True)
        # what held is the params' prediction, not the runs' own mean next to it (0.00512): the report names which
        assert (stratum["guide_prediction"], stratum["guide_from"]) == (0.0052, "params")
        assert v["reproduced"]["reproduced"] is True and v["reproduced"]["matched"] == ["01_mem_fraction_static-0.0051_rep1"]
        assert v["conclusive"] and not v["inconclusive_reasons"]
    report = (SEARCHED_RUN_DIR / "report.md").read_text()
    assert report.splitlines()[2].startswith("**The launch starts from a --mem-fraction-static in (0.0051, 0.0053\\]")
    assert "--resume" not in report and ("2 launches, bisection alone 4; the prediction it followed (0.0052, given with "
                                          "the params) held); the server's own numbers predict the break-even at "
                                          "0.00512") in report
