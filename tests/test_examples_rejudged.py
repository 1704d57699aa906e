"""The committed real vLLM 0.26 runs (examples/h200-vllm-kv, examples/h200-vllm-threshold) judged again by this kit:
each run directory is copied, its frames, parsed logs, verdict.json and report.md removed, and rebuilt from the raw
files (server logs, nvidia-smi samples, provenance, status) as `launchlab run --no-html` does. The verdict they get
is the calibration issue 24 is named for: no false confound on a real server, the warm-up kept out of every
comparison, each decision with its counts and exact test, each effect with its interval or why it has none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1] / "examples"
KV = next((ROOT / "h200-vllm-kv").glob("2*"))
SEARCH = next((ROOT / "h200-vllm-threshold").glob("2*"))
DERIVED = ("compilation_config", "kernel_config")  # vLLM changes them because --enforce-eager was declared


def rejudged(example: Path, into: Path) -> tuple[Path, dict]:
    """A copy of the example's run directory with everything derived removed and rebuilt from the raw files."""
    from launchlab.runner import notebooks

    run_dir = into / example.name
    shutil.copytree(example, run_dir)
    for name in ("runs.parquet", "events.parquet", "telemetry.parquet", "thresholds.parquet", "verdict.json",
                 "report.md", "summary.ipynb", "summary.html"):
        (run_dir / name).unlink(missing_ok=True)
    for parsed in run_dir.glob("runs/*/parsed.json"):
        parsed.unlink()
    notebooks.summarize(run_dir, say=lambda _: None, html=False)
    return run_dir, json.loads((run_dir / "verdict.json").read_text())


@pytest.fixture(scope="module")
def kv(tmp_path_factory):
    return rejudged(KV, tmp_path_factory.mktemp("kv"))


@pytest.fixture(scope="module")
def search(tmp_path_factory):
    return rejudged(SEARCH, tmp_path_factory.mktemp("search"))


def first_screen(run_dir: Path) -> str:
    """report.md's first screen: the headline, the outcomes and the verdict's prose (up to the next section)."""
    return "\n## ".join((run_dir / "report.md").read_text().split("\n## ")[:3])


def counts(stratum: dict) -> list[tuple]:
    return [(c["level"], c["ready"], c["valid"], c["reference"], c["reference_ready"], c["reference_valid"])
            for c in stratum["comparisons"]]


def test_the_kv_example_is_controlled_and_its_graphs_configs_follow_from_graphs_not_confounds(kv):
    run_dir, v = kv
    assert v["confounds"] == [] and v["controlled"] is True, v["confounds"]
    # controlled, but not settled at the kit's bar (issue 63): 3 runs a side give p = 0.1 for a complete split, and
    # no change on 3 a side could not have shown one at 0.05 — what the runs did, observed, said as such
    assert v["conclusive"] is False and [d["settled"] for d in v["factors"].values()] == [False, False]
    assert [r.split(":")[0] for r in v["inconclusive_reasons"]] == ["utilization decides the launch on 3 runs per side",
                                                                   "graphs changed nothing on 3 runs per side"]
    assert {d["arg"]: d["follows_from"] for d in v["derived_args"]} == {name: ["graphs"] for name in DERIVED}
    assert all(d["repeated"] for d in v["derived_args"]), "each level seen in three runs: a derived value, not chance"
    assert all(len(value) <= 110 for d in v["derived_args"] for value in d["values"].values()), "4 KB dumps are cut"
    screen = first_screen(run_dir)
    assert "**Controlled comparison.**" in screen and "Not a controlled" not in screen
    assert all(f"`{name}` follows from `graphs`" in screen for name in DERIVED), screen


def test_the_kv_example_utilization_decides_on_0_of_3_against_3_of_3_with_fisher_p_and_graphs_is_neutral(kv):
    run_dir, v = kv
    assert v["outcome_factors"] == ["utilization"] and v["neutral_factors"] == ["graphs"]
    utilization, graphs = v["factors"]["utilization"], v["factors"]["graphs"]
    assert utilization["status"] == "decides"
    assert {s["held"]["graphs"]: counts(s) for s in utilization["strata"]} == {
        g: [("0.004", 0, 3, "0.3", 3, 3)] for g in ("cuda", "eager")}
    assert utilization["p_value"] == pytest.approx(0.1) and utilization["significant"] is False
    assert utilization["repetitions_to_settle"] == 4 and utilization["runs_per_side"] == 3
    assert graphs["status"] == "neutral" and graphs["p_value"] == 1.0 and graphs["repetitions_to_settle"] is None
    assert {s["held"]["utilization"]: counts(s) for s in graphs["strata"]} == {
        "0.004": [("eager", 0, 3, "cuda", 0, 3)], "0.3": [("eager", 3, 3, "cuda", 3, 3)]}
    screen = first_screen(run_dir)
    assert "0.004 0/3 vs 0.3 3/3 ready at graphs=cuda" in screen and "0.004 0/3 vs 0.3 3/3 ready at graphs=eager" in screen
    assert "Fisher's exact p = 0.1" in screen and "4 runs per side would settle it" in screen
    assert "eager 3/3 vs cuda 3/3 ready at utilization=0.3" in screen and "on one run per side" not in screen


def test_the_kv_examples_warm_up_run_is_listed_and_never_compared(kv):
    run_dir, v = kv
    [warmup] = v["warmup_runs"]
    assert warmup["run_id"].startswith("warmup1_") and warmup["status"] == "ready" and warmup["startup_s"] > 200
    runs = pd.read_parquet(run_dir / "runs.parquet")
    assert len(runs) == 12 and warmup["run_id"] not in set(runs["run_id"])
    # the cold compile (225 s) is in no comparison: every startup effect rests on the three compared runs a side
    startup = [e for e in v["effects"] if e["metric"] == "startup_s"]
    assert startup and all((e["n"], e["baseline_n"]) == (3, 3) and e["max"] < 100 for e in startup), startup
    assert not any("cold" in w for w in v["warnings"]), v["warnings"]
    assert f"`{warmup['run_id']}` on gpu: ready, started in 224.8 s" in (run_dir / "report.md").read_text()


def test_the_kv_examples_effects_have_intervals_and_a_difference_that_never_varies_shows_none(kv):
    run_dir, v = kv
    effects = {(e["factor"], e["level"], e["metric"]): e for e in v["effects"]}
    assert all(e["ci_low"] is not None and e["ci_high"] is not None for e in effects.values()), "3 runs a side"
    # a launch that failed at KV sizing may free its memory before the sampler looks: its peak is a lower bound, not
    # what the level costs, so peak memory is compared only between runs that stood ready, and the verdict says so
    assert ("utilization", "0.004", "peak_mem_used_mib") not in effects
    assert any(w.startswith("peak_mem_used_mib of utilization=0.004 is not compared with utilization=0.3")
               and "(utilization=0.004: 3 runs failed in kv_cache)" in w for w in v["warnings"]), v["warnings"]
    assert any(w.startswith("peak_mem_used_mib of graphs=eager is not compared with graphs=cuda at utilization=0.004")
               for w in v["warnings"]), v["warnings"]
    peak = effects[("graphs", "eager", "peak_mem_used_mib")]  # the ready runs at 0.3: 170 MiB less in every pair
    assert (peak["n"], peak["baseline_n"]) == (3, 3) and peak["diffs_identical"] is True and peak["diff"] == -170
    startup = effects[("graphs", "eager", "startup_s")]
    assert startup["ci_low"] < startup["diff"] < startup["ci_high"] and startup["ci_high"] - startup["ci_low"] > 10
    # the same KV cache in every pair: said so, not a zero-width "95 % CI +0 to +0" that reads as a precise zero
    kv_tokens = effects[("graphs", "eager", "kv_tokens")]
    assert kv_tokens["diffs_identical"] is True and kv_tokens["ci_low"] == kv_tokens["ci_high"] == 0
    report = (run_dir / "report.md").read_text()
    assert "95 % CI +0 to +0" not in report
    assert "identical values in each of the 3 matched pairs: no spread, no interval; n=3 vs 3" in report


def test_the_search_example_is_controlled_leads_with_its_thresholds_and_the_prediction_lies_inside(search):
    run_dir, v = search
    assert v["confounds"] == [] and v["controlled"] is True, v["confounds"]
    assert {d["arg"]: d["follows_from"] for d in v["derived_args"]} == {name: ["graphs"] for name in DERIVED}
    strata = v["thresholds"]["strata"]
    assert len(strata) == 2
    for stratum in strata:
        assert (stratum["state"], stratum["interval_low"], stratum["interval_high"]) == ("converged", 0.005, 0.006)
        # 0.73 GiB of weights, non-torch memory and activation peak of 139.8 GiB: 0.00522
        assert stratum["predicted_break_even"] == pytest.approx(0.73 / 139.8, abs=1e-4)
        assert stratum["interval_low"] < stratum["predicted_break_even"] <= stratum["interval_high"]
        assert stratum["predicted_in_interval"] is True and stratum["predicted_n"] == 2
    assert not any(p["flagged"] for p in v["thresholds"]["probes"]), v["thresholds"]["probes"]
    report = (run_dir / "report.md").read_text()
    assert report.index("## Threshold of `--gpu-memory-utilization`") < report.index("**Controlled comparison.**")
    assert "Not a controlled" not in report


def test_the_search_examples_decision_on_one_run_a_side_says_so_and_keeps_its_meaning(search):
    run_dir, v = search
    decision = v["factors"]["gpu_memory_utilization"]
    # the searched flag is answered by the search's intervals (issue 67, 4), which converged: conclusive as a search.
    # Its probes are no fixed comparison: `searched`, what the counts alone would say kept in `would_be` (with its
    # p = 1 on one run a side), never "decides" — nor "Decides the launch … p = 1" in the report
    assert decision["status"] == "searched" and decision["would_be"] == "decides" and decision["p_value"] == 1.0
    assert v["conclusive"] is True and v["thresholds"] is not None
    assert "gpu_memory_utilization" not in v["outcome_factors"]
    report = (run_dir / "report.md").read_text()
    assert not [line for line in report.splitlines() if line.startswith("**Decides the launch")]
    assert "**Searched:** `gpu_memory_utilization` — its answer is the threshold above" in report
    # the other factor of the design (graphs) is still compared, and its one-run-a-side KV sentence has no
    # zero-width interval
    assert "95 % CI 0 to 0" not in report and "95 % CI +0 to +0" not in report
    assert "`graphs=eager` changes the KV capacity by +0 tokens" in report
