"""The committed real vLLM 0.26 examples (examples/h200-vllm-kv, examples/h200-vllm-threshold, run on an H200 by
scripts/vllm-example.sh on 2026-12-02) hold what issue 25 says they show."""

import json
from pathlib import Path

import pandas as pd
import pytest

from launchlab.reporting import export

ROOT = Path(__file__).resolve().parents[1] / "examples"
KV = next((ROOT / "h200-vllm-kv").glob("2*"))
SEARCH = next((ROOT / "h200-vllm-threshold").glob("2*"))


def verdict(run_dir: Path) -> dict:
    return json.loads((run_dir / "verdict.json").read_text())


def rebuilt(run_dir: Path):
    """The report of a committed run directory with its frames read again from its raw files by this kit, as
    `launchlab report` does (frames.build; nothing is written)."""
    from launchlab import params
    from launchlab.reporting import report
    from launchlab.store import rundir
    from launchlab.verdicts import frames

    directory = rundir.RunDir.check(run_dir)
    exp = params.load(directory.experiment_file)
    return report.Report(directory.path, exp, directory.manifest(), frames.build(directory.path, exp))


def test_every_run_is_real_vllm_026_on_an_h200():
    for run_dir in (KV, SEARCH):
        for folder in (run_dir / "runs").iterdir():
            prov = json.loads((folder / "provenance.json").read_text())
            assert prov["simulated"] is False and prov["transport"] == "local" and prov["server_kind"] == "vllm"
            assert [g["name"] for g in prov["host_facts"]["gpus"]] == ["NVIDIA H200"]
            assert (prov["integrity"]["package"], prov["integrity"]["version"]) == ("vllm", "0.26.0")
            assert prov["integrity"]["modified"] == []


def test_the_low_utilization_fails_at_kv_sizing_and_the_high_one_starts_with_or_without_graphs():
    runs = pd.read_parquet(KV / "runs.parquet")
    assert len(runs) == 12 and not runs["run_id"].str.startswith("warmup").any()  # the warm-up is not compared
    low, high = runs[runs["utilization"] == "0.004"], runs[runs["utilization"] == "0.3"]
    assert set(low["status"]) == {"failed"} and set(low["failure_reason"]) == {"kv_cache_no_memory"}
    assert set(high["status"]) == {"ready"} and len(low) == len(high) == 6
    assert set(runs["graphs"]) == {"cuda", "eager"}
    [warmup] = verdict(KV)["warmup_runs"]
    assert warmup["status"] == "ready" and warmup["startup_s"] > 2 * high["startup_s"].max()  # the cold compile


def test_nvml_samples_every_5_ms_and_sees_the_kv_cache_allocated_right_after_vllm_logs_its_size(example_frames):
    telemetry = example_frames(KV).telemetry
    events = pd.read_parquet(KV / "events.parquet")
    steps = telemetry.groupby("run_id")["t_s"].apply(lambda t: t.sort_values().diff().median())
    assert steps.round(4).eq(0.005).all()
    for run_id in pd.read_parquet(KV / "runs.parquet").query("utilization == '0.3'")["run_id"]:
        trace = telemetry[telemetry["run_id"] == run_id].sort_values("t_s")
        allocated = trace[trace["mem_used_mib"] > 20 * 1024]["t_s"].min()  # 41.21 GiB of KV cache on top of ~1.3
        logged = events[(events["run_id"] == run_id) & (events["field"] == "kv_avail_gib")]["t_s"].min()
        assert 0 <= allocated - logged < 2, run_id  # the log's time has whole seconds


def test_the_kv_budget_is_recomputed_from_the_log_and_agrees_and_graphs_configs_follow_from_the_factor():
    v = verdict(KV)
    assert {b["variant"]: (b["kv_gib"], b["logged_kv_gib"], b["logged_agrees"]) for b in v["budget"]} == {
        "utilization=0.3, graphs=cuda": (pytest.approx(41.21), 41.21, True),
        "utilization=0.3, graphs=eager": (pytest.approx(41.21), 41.21, True),
        # the failed launches too, their profile from the ready runs ("Available KV cache memory: -0.17 GiB")
        "utilization=0.004, graphs=cuda": (pytest.approx(-0.17, abs=0.005), -0.17, True),
        "utilization=0.004, graphs=eager": (pytest.approx(-0.17, abs=0.005), -0.17, True)}
    assert [b["break_even_utilization"] for b in v["budget"]] == pytest.approx([0.73 / 139.8] * 4)
    assert {d["arg"]: d["follows_from"] for d in v["derived_args"]} == {
        "compilation_config": ["graphs"], "kernel_config": ["graphs"]}
    utilization, graphs = v["factors"]["utilization"], v["factors"]["graphs"]
    assert (utilization["status"], utilization["p_value"], utilization["repetitions_to_settle"]) == (
        "decides", pytest.approx(0.1), 4)  # 0/3 vs 3/3 ready per stratum: Fisher's p = 0.1; 0/4 vs 4/4 settles it
    assert graphs["status"] == "neutral"
    assert export.remote_references((KV / "summary.html").read_text()) == []


def test_the_verdict_is_controlled_utilization_decides_and_graphs_is_neutral():
    for v in (verdict(KV), rebuilt(KV).computed_verdict().to_json()):  # as committed, and judged again by this kit
        assert v["confounds"] == [] and v["controlled"] is True
        assert v["outcome_factors"] == ["utilization"] and v["neutral_factors"] == ["graphs"]


def test_the_search_converges_at_both_graphs_levels_on_an_interval_that_holds_the_break_even_vllm_predicts():
    runs = pd.read_parquet(SEARCH / "runs.parquet")
    observed = {(r["graphs"], r["gpu_memory_utilization"]): r["status"] for _, r in runs.iterrows()}
    assert observed == {(g, "0.005"): "failed" for g in ("cuda", "eager")} | {
        (g, u): "ready" for g in ("cuda", "eager") for u in ("0.006", "0.007")}
    assert set(runs.loc[runs["status"] == "failed", "failure_reason"]) == {"kv_cache_no_memory"}
    v = verdict(SEARCH)
    assert v["controlled"] is True and v["confounds"] == []
    for stratum in v["thresholds"]["strata"]:
        assert (stratum["state"], stratum["interval_low"], stratum["interval_high"]) == ("converged", 0.005, 0.006)
        # 0.73 GiB of weights, non-torch memory and activation peak of 139.8 GiB: 0.00522
        assert stratum["predicted_break_even"] == pytest.approx(0.73 / 139.8) and stratum["predicted_in_interval"]
    report = (SEARCH / "report.md").read_text()
    assert report.index("## Threshold of `--gpu-memory-utilization`") < report.index("**Controlled comparison.**")
    assert export.remote_references((SEARCH / "summary.html").read_text()) == []


def test_each_failed_launchs_budget_row_recomputes_its_negative_kv_memory_from_its_log_and_agrees():
    """A launch below the break-even fails before vLLM 0.26 prints its profile line, so its row takes the total,
    non-torch memory and activation peak the ready runs printed ("Free memory on device (139.29/139.8 GiB) …
    0.21 GiB for peak activation, 0.22 GiB for non-torch memory"), with its own "'gpu_memory_utilization': 0.004"
    (non-default args), "Model loading took 0.3 GiB" and "Available KV cache memory: -0.17 GiB" (-0.03 at 0.005)."""
    for run_dir, utilization, logged in ((KV, 0.004, -0.17), (SEARCH, 0.005, -0.03)):
        rep = rebuilt(run_dir)
        runs = rep.frames.runs
        failed, ready = (set(runs.loc[runs["status"] == s, "run_id"]) for s in ("failed", "ready"))
        rows = rep.budget.set_index("run_id")
        assert failed <= set(rows.index), run_dir.name
        for run_id in failed:
            row = rows.loc[run_id]
            assert (row["total_gib"], row["utilization"], row["logged_kv_gib"]) == (139.8, utilization, logged)
            assert row["non_kv_gib"] == pytest.approx(0.3 + 0.22 + 0.21)
            assert row["kv_gib"] == pytest.approx(utilization * 139.8 - 0.73) and bool(row["agrees"])
            assert row["break_even_utilization"] == pytest.approx(0.73 / 139.8)
            assert set(row["borrowed_from"].split(", ")) == ready
        assert set(rows.loc[sorted(ready), "borrowed_from"]) == {""}  # a ready run's figures are its own
        summary = rep.budget_summary().set_index("variant")
        assert set(summary.loc[summary["outcome"] == "failed", "profile_from"]) == {f"{len(ready)} other runs"}
    # the search's prediction rests on the runs that printed their own profile: 2 per stratum, not the failed probe
    assert list(rebuilt(SEARCH).thresholds["predicted_n"]) == [2, 2]


def test_the_real_search_reads_with_its_launches_against_bisection_alone_and_vllms_prediction_held():
    """Issue 30 on the real run (made by bisection alone, before the search was guided): 3 launches per stratum, what
    bisection takes over 0.005–0.007 by 0.001, and every outcome agreed with the break-even vLLM's numbers predict —
    whose guided probes are the same three values, so the guide saves nothing on a range this narrow."""
    from decimal import Decimal

    from launchlab import search
    from launchlab.verdicts import thresholds

    rep = rebuilt(SEARCH)
    found = rep.thresholds
    assert list(found["launches"]) == list(found["blind_launches"]) == [3, 3]
    assert list(found["prediction_held"]) == [True, True] and list(found["prediction_note"]) == ["", ""]
    bounds = rep.exp.search.bounds
    assert search.next_probes(bounds, bounds.low, bounds.high, Decimal("0.00522")) == (Decimal("0.005"),
                                                                                       Decimal("0.006"))
    assert "(3 probed values; 3 launches, bisection alone 3; the prediction held)" in thresholds.markdown(
        rep.threshold_verdict)
