"""`launchlab run params/demo.yaml` end to end: real papermill kernels, real parquet, the real HTML export."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import LAUNCHLAB

pytestmark = pytest.mark.slow
def test_the_run_directory_has_the_documented_layout(demo_run):
    run_dir, _ = demo_run
    assert run_dir.parent.name == "demo-custom-ar-vs-mem-fraction"
    assert re.fullmatch(r"\d{8}-\d{6}", run_dir.name)
    for name in ("experiment.yaml", "manifest.json", "runs.parquet", "events.parquet", "telemetry.parquet",
                 "summary.ipynb", "summary.html"):
        assert (run_dir / name).is_file(), name
    runs = sorted((run_dir / "runs").iterdir())
    assert len(runs) == 16
    for folder in runs:
        for name in ("run_variant.ipynb", "status.json", "server.log", "nvidia-smi.csv.gz", "provenance.json"):
            assert (folder / name).is_file(), f"{folder.name}/{name}"
        nb = json.loads((folder / "run_variant.ipynb").read_text())
        assert nb["metadata"]["papermill"]["parameters"]["run_id"] == folder.name
        assert any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), "notebook was executed"
        # the batch leaves the run's GPU trace to summary.html (it cost each run 1.5 s; bench/run_overhead.py)
        assert nb["metadata"]["papermill"]["parameters"]["draw_trace"] is False
        trace = next(c for c in nb["cells"] if "gpu_trace" in "".join(c["source"]))
        assert "summary.html" in "".join("".join(o.get("text", "")) for o in trace["outputs"])  # text: a list of lines
        assert not any("image/png" in o.get("data", {}) for o in trace["outputs"])


def test_the_outcome_matrix_is_the_seed_scenario(demo_run):
    run_dir, _ = demo_run
    runs = pd.read_parquet(run_dir / "runs.parquet")
    assert len(runs) == 16
    # 0.75 lies between the break-evens (0.748 without custom all-reduce, 0.753 with it): the seed's symptom
    dies = runs[(runs["mem_fraction"] == "0.75") & (runs["custom_ar"] == "on")]
    starts = runs[~runs["run_id"].isin(dies["run_id"])]
    assert len(dies) == 4 and set(dies["status"]) == {"failed"}
    assert set(dies["failure_reason"]) == {"kv_cache_no_memory"}
    assert set(dies["failure_phase"]) == {"kv_cache"}
    assert len(starts) == 12 and set(starts["status"]) == {"ready"}
    assert starts["startup_s"].notna().all()
    # interleaved: A B C D A B C D …
    assert list(runs["variant"].iloc[:4]) * 4 == list(runs["variant"])


def test_custom_all_reduce_costs_kv_capacity_and_decides_the_launch_only_at_the_fraction_between(demo_run):
    run_dir, _ = demo_run
    runs = pd.read_parquet(run_dir / "runs.parquet")
    events = pd.read_parquet(run_dir / "events.parquet")
    kv = events[(events["field"] == "kv_tokens") & (events["rank"] == "0")].merge(runs, on="run_id")
    kv = kv[kv["mem_fraction"] == "0.85"]
    on = kv[kv["custom_ar"] == "on"]["value"]
    off = kv[kv["custom_ar"] == "off"]["value"]
    assert len(on) == len(off) == 4
    assert on.max() < off.min()
    assert on.min() > 0.9 * off.max()  # a little, not a lot
    # both decide the launch, in the verdict the kit wrote (analysis.outcome_deciders, an older frame-based path to
    # the same question, is gone: issue 68)
    assert set(json.loads((run_dir / "verdict.json").read_text())["outcome_factors"]) == {"custom_ar", "mem_fraction"}


def test_frames_have_the_documented_columns(demo_run):
    run_dir, _ = demo_run
    runs = pd.read_parquet(run_dir / "runs.parquet")
    assert list(runs.columns[:10]) == ["run_id", "variant", "repetition", "host", "status", "failure_reason",
                                       "failure_phase", "failure_message", "startup_s", "peak_mem_used_mib"]
    assert {"custom_ar", "mem_fraction"} <= set(runs.columns)
    events = pd.read_parquet(run_dir / "events.parquet")
    assert list(events.columns) == ["run_id", "t_s", "rank", "field", "value"]
    assert set(events["rank"]) == {str(r) for r in range(8)}
    telemetry = pd.read_parquet(run_dir / "telemetry.parquet")
    assert {"run_id", "t_s", "gpu_index", "gpu_uuid", "mem_used_mib", "mem_total_mib", "util_gpu_pct"} <= set(telemetry.columns)
    assert telemetry.groupby("run_id")["gpu_index"].nunique().eq(8).all()
    assert (telemetry["mem_total_mib"] == 97887).all()
    ready = runs[runs["status"] == "ready"]["peak_mem_used_mib"]
    assert (ready > 70 * 1024).all()  # the weights (70 GiB a rank) and a KV pool


def test_progress_lines_name_the_run_its_state_and_elapsed_time(demo_run):
    _, stderr = demo_run
    assert re.search(r"\[1/16\] 01_custom_ar-off\.mem_fraction-0\.75_rep1  watching  [\d.]+ s", stderr)
    assert re.search(r"\[16/16\] 16_custom_ar-on\.mem_fraction-0\.85_rep4  ready at [\d.]+ s, stopped by the kit "
                     r"\(done in [\d.]+ s\)", stderr)


def test_summary_html_has_tables_and_embedded_plots_and_no_code_or_remote_fetches(demo_run):
    run_dir, _ = demo_run
    html = (run_dir / "summary.html").read_text()
    from launchlab.reporting import export

    assert export.remote_references(html) == []
    assert "<table" in html and "kv_cache_no_memory" in html
    # figures inline as SVG that scales with the page (a PNG only for a timeline of more than 40 runs)
    assert html.count("<svg") >= 3 and not re.search(r"<img[^>]+src=\"data:image/png", html)
    assert "SIMULATED" in html
    assert "rep.outcomes()" not in html and "import report" not in html


def test_report_starts_the_summary_kernel_again_once_when_it_dies_before_it_answers(demo_run, demo_env, tmp_path):
    # a kernel died at its start under load in a newcomer run ("Kernel died before replying to kernel_info"): here a
    # real kernel spec, found first on JUPYTER_PATH, whose first start exits at once and whose second is ipykernel
    run_dir, _ = demo_run
    _, env = demo_env
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    flag = tmp_path / "died-once"
    start = 'if [ ! -e "$0" ]; then : > "$0"; exit 1; fi; py=$1 cf=$2; shift 2; exec "$py" -m ipykernel_launcher -f "$cf" "$@"'
    (spec / "kernel.json").write_text(json.dumps({
        "argv": ["/bin/sh", "-c", start, str(flag), sys.executable, "{connection_file}"],
        "display_name": "dies once", "language": "python"}))
    proc = subprocess.run([*LAUNCHLAB, "report", str(copy)], capture_output=True, text=True, timeout=300,
                          env={**env, "JUPYTER_PATH": str(tmp_path / "jupyter")})
    assert flag.exists(), "the first kernel started from the spec and died"
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and (copy / "summary.html").is_file()


def test_report_rebuilds_everything_from_the_raw_files(demo_run, demo_env, tmp_path):
    run_dir, _ = demo_run
    _, env = demo_env
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    for name in ("runs.parquet", "events.parquet", "telemetry.parquet", "summary.html", "summary.ipynb"):
        (copy / name).unlink()
    # a relative path, as a user types it (papermill runs the summary from another folder)
    proc = subprocess.run([*LAUNCHLAB, "report", copy.name], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pd.testing.assert_frame_equal(pd.read_parquet(copy / "runs.parquet"), pd.read_parquet(run_dir / "runs.parquet"))
    assert (copy / "summary.html").is_file()


def test_resume_skips_finished_runs_and_repeats_the_rest(small_params, tmp_path):
    path = small_params(pace=0.2)
    env = {**os.environ}
    first = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                           text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    run_dir = Path(first.stdout.strip())
    second_run = sorted((run_dir / "runs").iterdir())[1]
    (second_run / "status.json").unlink()
    again = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--resume", str(run_dir)], capture_output=True, text=True,
                           env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "[1/2] 01_mem_fraction-0.55_rep1  already done, skipped" in again.stderr
    assert "[2/2] 02_mem_fraction-0.85_rep1  ready" in again.stderr
    assert json.loads((second_run / "status.json").read_text())["status"] == "ready"
    other = path.with_name("other.yaml")
    other.write_text(path.read_text().replace("repetitions: 1", "repetitions: 2"))
    refused = subprocess.run([*LAUNCHLAB, "run", str(other), "--resume", str(run_dir)], capture_output=True, text=True,
                             env=env, timeout=120)
    assert refused.returncode == 1 and "different plan" in refused.stderr


def test_runs_of_different_hosts_proceed_in_parallel(tmp_path, sim_root):
    """A slow host does not hold up a fast one: the fast host finishes its replicate while the slow one works."""
    text = f"""\
experiment: two-boxes
host: [slow, fast]
hosts:
  slow: {{transport: sim, gpus: 2, pace: 3.0, workdir: {tmp_path / 'w1'}}}
  fast: {{transport: sim, gpus: 2, pace: 0.2, workdir: {tmp_path / 'w2'}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}",
            --mem-fraction-static, "0.85"]
  ready: {{timeout_s: 120, health_url: "http://127.0.0.1:{{port}}/health"}}
factors:
  graphs:
    "128": {{flags: {{--cuda-graph-max-bs: "128"}}}}
    "256": {{flags: {{--cuda-graph-max-bs: "256"}}}}
baseline: {{graphs: "128"}}
repetitions: 2
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""
    path = tmp_path / "two.yaml"
    path.write_text(text)
    t0 = time.monotonic()
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    finished = [line for line in proc.stderr.splitlines()
                if re.search(r"\]\s\S+\s+ready at [\d.]+ s, .*\(done in [\d.]+ s\)$", line)]
    order = [line.split()[1] for line in finished]
    assert len(order) == 4, proc.stderr[-3000:]
    # the fast host's two runs (replicate 2) are both done before the slow host's second run is
    assert order.index("04_graphs-256_rep2") < order.index("02_graphs-256_rep1")
    runs = pd.read_parquet(Path(proc.stdout.strip()) / "runs.parquet")
    assert sorted(runs["host"]) == ["fast", "fast", "slow", "slow"]
    assert time.monotonic() - t0 < 300


def _why_not_ready(run_dir: Path) -> str:
    """Each run's final status and its log's last lines: a failure that happens once in many suites explains itself
    (this test failed once in CI with no more than the statuses to read)."""
    parts = []
    for folder in sorted((run_dir / "runs").iterdir()):
        log = folder / "server.log"
        tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else ["(no server.log)"]
        parts += [f"== {folder.name}: {(folder / 'status.json').read_text()}", *tail]
    return "\n".join(parts)


def test_gpu_slots_run_two_variants_at_once_on_different_gpus(tmp_path, sim_root):
    from datetime import datetime

    text = f"""\
experiment: slots
hosts:
  box: {{transport: sim, gpus: 4, pace: 1.0, gpu_slots: [[0, 1], [2, 3]], workdir: {tmp_path / 'w'}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"]
  ready: {{timeout_s: 120, health_url: "http://127.0.0.1:{{port}}/health"}}
factors:
  mem_fraction:
    "0.80": {{flags: {{--mem-fraction-static: "0.80"}}}}
    "0.85": {{flags: {{--mem-fraction-static: "0.85"}}}}
baseline: {{mem_fraction: "0.80"}}
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""
    path = tmp_path / "slots.yaml"
    path.write_text(text)
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip())
    runs = pd.read_parquet(run_dir / "runs.parquet")
    assert list(runs["status"]) == ["ready", "ready"], _why_not_ready(run_dir)
    telemetry = pd.read_parquet(run_dir / "telemetry.parquet")
    seen = {run_id: sorted(g["gpu_index"].unique()) for run_id, g in telemetry.groupby("run_id")}
    assert sorted(seen.values()) == [[0, 1], [2, 3]]
    windows = []
    for folder in sorted((run_dir / "runs").iterdir()):
        status = json.loads((folder / "status.json").read_text())
        env = json.loads((folder / "provenance.json").read_text())["env"]
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, status["gpus"]))
        start = datetime.fromisoformat(status["server_started_at"][:26]).timestamp()
        windows.append((start, (folder / "status.json").stat().st_mtime))
    (a0, a1), (b0, b1) = windows
    assert a0 < b1 and b0 < a1, f"the two runs did not overlap: {windows}"


def test_the_demo_verdict_has_custom_all_reduce_decide_at_one_fraction_significantly_and_says_why(demo_run):
    run_dir, _ = demo_run
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert set(verdict) >= {"controlled", "conclusive", "inconclusive_reasons", "baseline", "outcome_factors",
                            "neutral_factors", "undetermined_factors", "factors", "confounds", "effects",
                            "level_checks", "excluded_runs", "budget", "warnings"}, "the stable keys stay"
    assert verdict["flaky_factors"] == [] and verdict["confounded_factors"] == []
    assert verdict["controlled"] is True, verdict["confounds"]
    assert verdict["conclusive"] is True and verdict["inconclusive_reasons"] == [] and verdict["excluded_runs"] == []
    assert verdict["undetermined_factors"] == []
    assert verdict["baseline"] == "custom_ar=off, mem_fraction=0.75"
    assert verdict["outcome_factors"] == ["custom_ar", "mem_fraction"] and verdict["neutral_factors"] == []
    # custom all-reduce decides at 0.75 (4/4 vs 0/4: Fisher's exact p = 2/70 < 0.05) and not at 0.85
    car = verdict["factors"]["custom_ar"]
    assert car["status"] == "decides_in_some" and car["significant"] is True and car["repetitions_to_settle"] is None
    assert car["p_value"] == pytest.approx(2 / 70) and car["p_value"] < 0.05
    by_stratum = {s["held"]["mem_fraction"]: s for s in car["strata"]}
    assert by_stratum["0.75"]["changes"] is True and by_stratum["0.85"]["changes"] is False
    [compared] = by_stratum["0.75"]["comparisons"]
    assert (compared["ready"], compared["reference_ready"], compared["valid"]) == (0, 4, 4) and compared["significant"]
    assert verdict["factors"]["mem_fraction"]["status"] == "decides_in_some"
    [kv] = [e for e in verdict["effects"] if (e["factor"], e["level"], e["metric"]) == ("custom_ar", "on", "kv_tokens")]
    assert kv["n"] == 4 and kv["pairs"] == 4 and kv["diff"] < 0 and 0.9 < kv["ratio"] < 1
    assert kv["strata"] == ["mem_fraction=0.85"], "compared where both start"
    # the first screen: the headline (its strength), the outcomes, the verdict's prose
    first_screen = "\n## ".join((run_dir / "report.md").read_text().split("\n## ")[:3])
    assert "on 0/4 vs off 4/4 ready at mem\\_fraction=0.75" in first_screen, first_screen
    assert "p = 0.029, significant at 0.05" in first_screen
    headline = (run_dir / "report.md").read_text().split("\n## ")[0]
    assert "p = 0.029" in headline and "significant at 0.05" in headline, headline
    # the mechanism and the fix, in the headline's own paragraph (issue 67)
    lead = headline.split("\n\n")[1]
    assert ("custom\\_ar=on takes +0.62 GiB a rank at distributed init (with its all-reduce buffers), which moves "
            "the break-even of mem\\_fraction\\_static from 0.748 (custom\\_ar=off) to 0.753 (custom\\_ar=on)") in lead, lead
    assert "to start: raise --mem-fraction-static above 0.753, or set custom\\_ar=off" in lead, lead
    html = (run_dir / "summary.html").read_text()
    assert html.index("p = 0.029") < html.index(">Outcomes<"), "the headline, first"
    # why: the all-reduce buffers move the break-even from 0.748 to 0.753, and 0.75 lies between
    by_variant = {b["variant"]: b for b in verdict["budget"]}
    off, on = by_variant["custom_ar=off, mem_fraction=0.75"], by_variant["custom_ar=on, mem_fraction=0.75"]
    assert round(off["break_even_fraction"], 3) == 0.748 and round(on["break_even_fraction"], 3) == 0.753
    assert on["rest_gib"] < 0 < off["rest_gib"]
    assert "the break-even moves from 0.748 to 0.753" in first_screen
    assert "mem\\_fraction\\_static = 0.75 lies between them" in first_screen, first_screen
    html = (run_dir / "summary.html").read_text()
    assert "Break-even" in html and "the break-even moves from 0.748 to 0.753" in html
    assert "Controlled comparison" in (run_dir / "report.md").read_text()


def test_the_demo_level_checks_confirm_every_level_from_the_log(demo_run):
    run_dir, _ = demo_run
    checks = json.loads((run_dir / "verdict.json").read_text())["level_checks"]
    levels = {(c["factor"], c["level"]) for c in checks}
    assert levels == {("custom_ar", "off"), ("custom_ar", "on"), ("mem_fraction", "0.75"), ("mem_fraction", "0.85")}
    assert all(not c["runs_contradicted"] for c in checks), checks
    by = {(c["factor"], c["level"], c["check"]): c for c in checks}
    assert len(by[("custom_ar", "off", "disable_custom_all_reduce=True")]["runs_confirmed"]) == 8
    assert len(by[("custom_ar", "off", "custom all-reduce inactive")]["runs_confirmed"]) == 8
    assert len(by[("custom_ar", "on", "disable_custom_all_reduce=False")]["runs_confirmed"]) == 8
    # the on/0.75 runs fail before CUDA-graph capture, where the log shows custom all-reduce at work
    active = by[("custom_ar", "on", "custom all-reduce active")]
    assert len(active["runs_confirmed"]) == 4 and len(active["runs_unknown"]) == 4
    assert len(by[("mem_fraction", "0.75", "mem_fraction_static=0.75")]["runs_confirmed"]) == 8


def test_the_report_shows_commands_level_checks_failed_logs_and_links_to_each_run(demo_run):
    run_dir, _ = demo_run
    html = (run_dir / "summary.html").read_text()
    assert "Did each level take effect?" in html and "disable_custom_all_reduce=True" in html
    assert "--disable-custom-all-reduce" in html and "launchlab.sim.sglang_server" in html  # the commands
    first = sorted((run_dir / "runs").iterdir())[0].name
    assert f'href="runs/{first}/server.log"' in html and f'href="runs/{first}/run_variant.ipynb"' in html
    assert "Not enough memory. Please try to increase --mem-fraction-static" in html  # a failed run's log tail
    md = (run_dir / "report.md").read_text()
    assert "## Commands" in md and "## Did each level take effect?" in md

