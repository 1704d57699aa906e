"""The committed real SGLang 0.5.17 examples (examples/h200-sglang-kv, examples/h200-sglang-threshold, run on an
H200 by scripts/server-example.sh on 2026-12-03) hold what issue 38 says they show, and this kit judges them again
from their raw files to the verdicts committed with them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1] / "examples"
KV = next((ROOT / "h200-sglang-kv").glob("2*"))
SEARCH = next((ROOT / "h200-sglang-threshold").glob("2*"))
SGLANG_MINIMUM = 0.0029  # what SGLang's own error says of this model on this card


def verdict(run_dir: Path) -> dict:
    return json.loads((run_dir / "verdict.json").read_text())


def rejudged(example: Path, into: Path) -> dict:
    """The verdict of a copy of the example with everything derived removed and rebuilt from the raw files."""
    from launchlab.runner import notebooks

    run_dir = into / example.name
    shutil.copytree(example, run_dir)
    for name in ("runs.parquet", "events.parquet", "telemetry.parquet", "thresholds.parquet", "verdict.json",
                 "report.md", "summary.ipynb", "summary.html"):
        (run_dir / name).unlink(missing_ok=True)
    for parsed in run_dir.glob("runs/*/parsed.json"):
        parsed.unlink()
    notebooks.summarize(run_dir, say=lambda _: None, html=False)
    return verdict(run_dir)


def test_every_run_is_real_sglang_0517_on_an_h200_and_the_patched_ones_were_reverted():
    for run_dir in (KV, SEARCH):
        for folder in (run_dir / "runs").iterdir():
            if not (folder / "provenance.json").exists():
                continue  # a run interrupted before its start (the batch's time ran out)
            prov = json.loads((folder / "provenance.json").read_text())
            assert prov["simulated"] is False and prov["transport"] == "local" and prov["server_kind"] == "sglang"
            assert [g["name"] for g in prov["host_facts"]["gpus"]] == ["NVIDIA H200"]
            assert (prov["integrity"]["package"], prov["integrity"]["version"]) == ("sglang", "0.5.17")
            assert prov["integrity"]["modified"] == [] and prov["integrity"]["added"] == []  # before the patch
            status = json.loads((folder / "status.json").read_text())
            debug = "debug-print" in folder.name
            assert bool(prov.get("patched")) is debug, folder.name
            if debug and status["state"] == "done" and status["status"] != "error":
                assert "package pristine (RECORD check): True" in " ".join(status["notes"]), folder.name
            log = (folder / "server.log").read_text()
            assert ("DEBUG profile_available_bytes:" in log) is debug, folder.name


def test_below_the_break_even_sglang_fails_at_kv_sizing_and_above_it_starts_whatever_else_varies():
    runs = pd.read_parquet(KV / "runs.parquet")
    valid = runs[runs["status"].isin(["ready", "failed"])]
    low, high = valid[valid["fraction"] == "0.002"], valid[valid["fraction"] == "0.004"]
    assert set(low["status"]) == {"failed"} and set(low["failure_reason"]) == {"kv_cache_no_memory"}
    assert set(low["failure_phase"]) == {"kv_cache"}
    assert set(high["status"]) == {"ready"} and len(high) == 12 and len(low) == 6


def test_the_three_runs_resumed_on_another_machine_make_the_verdict_inconclusive_and_say_what_it_would_read():
    """Runs 16-18 were finished with --resume in a later session, on another lease of the H200 (another kernel
    build, another container): the kit names that difference and will not compare across it. Without those runs
    it would read what the 15 runs of the first machine show: fraction decides; graphs and the debug print do not
    change the outcome; custom all-reduce cannot take effect at TP 1."""
    v = verdict(KV)
    factors = v["factors"]
    assert not v["conclusive"] and not v["controlled"] and v["excluded_runs"] == []
    assert {f: d["status"] for f, d in factors.items()} == {
        "fraction": "confounded", "graphs": "confounded", "debug": "confounded", "custom_ar": "undetermined"}
    reasons = v["inconclusive_reasons"]
    assert reasons[0].startswith("fraction is confounded: host, environment")
    assert "without them it would read: fraction decides the launch" in reasons[0]
    assert "without them it would read: graphs does not change the launch outcome" in reasons[1]
    assert "without them it would read: debug does not change the launch outcome" in reasons[2]
    assert "custom all-reduce was not used: one GPU (tp_size=1)" in factors["custom_ar"]["summary"]
    resumed = sorted(p.name for p in (KV / "runs").iterdir() if p.name[:2] in ("16", "17", "18"))
    machine = {c["kind"]: sorted(c["runs"]) for c in v["confounds"] if c["kind"] in ("host", "environment")}
    assert machine == {"host": resumed, "environment": resumed}
    kernels = {json.loads((KV / "runs" / r / "provenance.json").read_text())["host_facts"]["kernel"]
               for r in resumed}
    assert len(kernels) == 1 and kernels.isdisjoint(
        {json.loads((KV / "runs" / r / "provenance.json").read_text())["host_facts"]["kernel"]
         for r in json.loads((KV / "manifest.json").read_text())["run_ids"] if r not in resumed})


def test_the_debug_line_agrees_with_the_kits_budget_and_the_break_even_is_sglangs():
    v = verdict(KV)
    budget = {b["variant"]: b for b in v["budget"]}
    debug = budget["fraction=0.004, graphs=off, debug=print, custom_ar=on"]
    assert debug["logged_agrees"] is True and debug["logged_rest_gib"] == pytest.approx(0.1505, abs=1e-4)
    for row in budget.values():
        assert abs(row["break_even_fraction"] - SGLANG_MINIMUM) < 0.0001, row
        assert row["total_gib"] == pytest.approx(139.19, abs=0.01)  # SGLang's pre, as its debug line says


def test_the_guided_search_converges_in_four_launches_around_sglangs_own_minimum():
    [row] = verdict(SEARCH)["thresholds"]["strata"]
    assert row["state"] == "converged" and (row["interval_low"], row["interval_high"]) == (0.0025, 0.003)
    assert row["launches"] == 4 and row["prediction_held"] is True and row["predicted_in_interval"] is True
    assert row["interval_low"] < SGLANG_MINIMUM <= row["interval_high"]
    assert row["interval_low"] < row["predicted_break_even"] <= row["interval_high"]


def test_the_live_counter_never_passes_the_most_launches_validate_gave():
    for log in (ROOT / "h200-sglang-kv/sglang-example.log", ROOT / "h200-sglang-threshold/sglang-example.log"):
        counters = [(int(a), int(b)) for a, b in re.findall(r"^\[(\d+)/(\d+)\]", log.read_text(), re.M)]
        assert counters and all(a <= b for a, b in counters), log
    assert "at most 5 runs" in (ROOT / "h200-sglang-threshold/sglang-example.log").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("example", [KV, SEARCH], ids=["kv", "threshold"])
def test_this_kit_judges_the_raw_files_again_to_the_committed_verdict(example, tmp_path):
    committed, again = verdict(example), rejudged(example, tmp_path)
    keys = ("conclusive", "controlled", "outcome_factors", "inconclusive_reasons")
    assert {k: again.get(k) for k in keys} == {k: committed.get(k) for k in keys}
    assert {f: d["status"] for f, d in again["factors"].items()} == {f: d["status"] for f, d in committed["factors"].items()}
    assert again.get("thresholds") == committed.get("thresholds")


def test_a_factor_of_one_level_is_a_constant_of_the_design_not_an_open_question():
    v = verdict(SEARCH)  # `graphs: {"off": {}}` labels the search's one stratum
    assert "graphs" not in v["factors"] and v["conclusive"] is True and v["inconclusive_reasons"] == []
    assert v["factors"]["mem_fraction_static"]["status"] == "searched"  # what its counts say: would_be
    assert v["factors"]["mem_fraction_static"]["would_be"] == "decides"


@pytest.mark.parametrize("example", [SEARCH, next((ROOT / "h100-sglang-threshold").glob("2*"))], ids=["h200", "h100"])
def test_a_search_s_verdict_is_its_intervals_never_a_fixed_comparison_of_its_probes(example, tmp_path):
    """Issue 67, 4: below the interval a search found, its "## Verdict" said "Decides the launch, on one run per
    side: … p = 1, not significant" — a reader took the search for a failed experiment. The searched flag is
    `searched`: in no factor list, no effect or few-runs warning of its probes, one line pointing at the threshold."""
    again = rejudged(example, tmp_path)
    factor = "mem_fraction_static"
    assert again["factors"][factor]["status"] == "searched" and again["thresholds"]["factor"] == factor
    named = [f for key in ("outcome_factors", "failure_mode_factors", "neutral_factors", "undetermined_factors",
                           "flaky_factors", "confounded_factors", "not_varied_factors") for f in again[key]]
    assert factor not in named
    assert not [e for e in again["effects"] if e["factor"] == factor]
    assert not [w for w in again["warnings"] if f"{factor}=" in w]
    text = (tmp_path / example.name / "report.md").read_text()
    verdict_section = text.split("## Verdict", 1)[1].split("\n## ", 2)[1]
    assert "Decides the launch" not in verdict_section and "p = 1" not in verdict_section
    assert "**Searched:** `mem_fraction_static` — its answer is the threshold above" in verdict_section
