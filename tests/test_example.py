"""The committed real-GPU example (examples/h200-transformers-kv) holds what issue 6 says it shows."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from conftest import LAUNCHLAB, ROOT
from launchlab.reporting import export

EXAMPLE = next((Path(__file__).resolve().parents[1] / "examples" / "h200-transformers-kv").glob("2*"))
GIB = 1024


def test_provenance_names_the_real_gpu_and_driver():
    for folder in (EXAMPLE / "runs").iterdir():
        prov = json.loads((folder / "provenance.json").read_text())
        assert prov["simulated"] is False and prov["transport"] == "local"
        facts = prov["host_facts"]
        assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H200"]
        assert facts["driver"].startswith("580.") and facts["cuda"]
        assert prov["interpreter"]["packages"]["transformers"]


def test_the_90_percent_variant_takes_tens_of_gib_more_in_the_trace_and_the_report(example_frames):
    runs = pd.read_parquet(EXAMPLE / "runs.parquet")
    telemetry = example_frames(EXAMPLE).telemetry
    auto = runs[(runs["batching"] == "continuous") & (runs["num_blocks"] == "auto")]
    by_level = {lv: auto[auto["memory_percent"] == lv]["run_id"] for lv in ("0.5", "0.9")}
    trace_peak = {lv: telemetry[telemetry["run_id"].isin(ids)].groupby("run_id")["mem_used_mib"].max()
                  for lv, ids in by_level.items()}
    assert trace_peak["0.9"].min() - trace_peak["0.5"].max() > 20 * GIB  # every 0.9 run above every 0.5 run
    assert len(trace_peak["0.5"]) == len(trace_peak["0.9"]) == 2
    samples = telemetry.groupby("run_id")["t_s"].apply(lambda t: t.sort_values().diff().median())
    assert (samples < 0.5).all()  # sampled every ~100 ms
    html = (EXAMPLE / "summary.html").read_text()
    assert "121.29" in html and "68.41" in html  # 124,197 and 70,049 MiB, shown in GiB by the current kit
    assert export.remote_references(html) == []


def test_the_over_asking_variant_is_degraded_with_its_reason():
    runs = pd.read_parquet(EXAMPLE / "runs.parquet")
    over = runs[runs["num_blocks"] == "50M"]
    assert list(over["status"]) == ["degraded", "degraded"]
    assert set(over["failure_reason"]) == {"kv_cache_no_memory"}
    assert over["failure_message"].str.contains("No positive solution").all()
    assert set(runs[runs["num_blocks"] == "auto"]["status"]) == {"ready"}


def _judged_again() -> dict:
    """The example's verdict as this kit makes it from the raw files (frames.build, casefile; nothing written but
    the runs' parsed.json, which git ignores)."""
    from launchlab import params
    from launchlab.reporting import report
    from launchlab.store import rundir
    from launchlab.verdicts import frames

    directory = rundir.RunDir.check(EXAMPLE)
    exp = params.load(directory.experiment_file)
    built = report.Report(directory.path, exp, directory.manifest(), frames.build(directory.path, exp))
    return built.computed_verdict().to_json()


def test_the_verdict_attributes_the_kv_memory_to_the_memory_percent_factor():
    for verdict in (json.loads((EXAMPLE / "verdict.json").read_text()), _judged_again()):
        assert verdict["controlled"] is True
        [effect] = [e for e in verdict["effects"]
                    if (e["factor"], e["level"], e["metric"]) == ("memory_percent", "0.9", "peak_mem_used_mib")]
        assert effect["n"] == 2 and effect["diff"] > 40 * GIB and effect["ratio"] == pytest.approx(1.77, abs=0.1)
        assert verdict["outcome_factors"] == ["num_blocks"]


@pytest.mark.slow
def test_launchlab_report_rebuilds_the_committed_run_directory_an_older_kit_wrote(tmp_path):
    """Written on 2026-11-29, before the GPU state during runs (gpu_state, mem_free_mib), the exact tests and the
    typed verdict: `launchlab report` on a copy, its frames and reports removed, rebuilds them from the raw files."""
    copy = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, copy)
    for name in ("verdict.json", "report.md", "summary.html", "summary.ipynb", "runs.parquet", "events.parquet",
                 "telemetry.parquet"):
        (copy / name).unlink(missing_ok=True)  # summary.ipynb and telemetry.parquet: not committed, maybe built
    assert not any("gpu_state" in json.loads((f / "provenance.json").read_text()) for f in (copy / "runs").iterdir())
    proc = subprocess.run([*LAUNCHLAB, "report", str(copy)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = pd.read_parquet(copy / "runs.parquet").sort_values("run_id")
    committed = pd.read_parquet(EXAMPLE / "runs.parquet").sort_values("run_id")
    assert list(runs["status"]) == list(committed["status"])
    verdict = json.loads((copy / "verdict.json").read_text())
    assert verdict["controlled"] is True and verdict["outcome_factors"] == ["num_blocks"], verdict["confounds"]
    decision = verdict["factors"]["num_blocks"]
    assert decision["p_value"] is not None and decision["repetitions_to_settle"] == 4  # 2 runs per side
    html = (copy / "summary.html").read_text()
    assert export.remote_references(html) == []
    text = " ".join(re.sub(r"<[^>]+>", " ", html).split())  # the page's text: the peaks of the 0.9 and 0.5 runs
    assert "memory_percent=0.9 121.3 GiB vs memory_percent=0.5 68.4 GiB" in text


def test_the_imports_of_the_notebooks_run_directories_keep_still_resolve():
    """A run directory keeps its executed notebooks; those saved before the layers became packages import
    `from launchlab import runview` (and report, batch, lifecycle), and must run again as they were saved."""
    import json
    import re

    lines = set()
    # one executed run notebook per set of imports the examples' batches saved (tests/fixtures/README.md)
    for path in (ROOT / "tests/fixtures/saved-notebooks").glob("*.ipynb"):
        for cell in json.loads(path.read_text())["cells"]:
            lines |= {m.group(0) for m in re.finditer(r"^from launchlab[\w.]* import [\w, ]+$", "".join(cell["source"]),
                                                       re.M)}
    assert "from launchlab import runview" in lines, "the runs' notebooks saved before the layers were packages"
    # and what the summaries saved then imported (`make examples` renders them anew with today's imports)
    lines |= {"from launchlab import report", "from launchlab import batch", "from launchlab import lifecycle"}
    for line in sorted(lines):
        exec(line, {})  # an ImportError names the line
