"""`launchlab import`: logs of runs made by hand become a run directory with the full report — real importer,
real parsers, real parquet, real papermill (one render), the committed demo logs and the real-log fixtures."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import DATA, LAUNCHLAB, ROOT
from launchlab import logparse, params
from launchlab.errors import ImportFailed, ParamsError
from launchlab.logparse import logfacts
from launchlab.reporting import reportmd
from launchlab.runner import importer
from launchlab.store import records, rundir
from launchlab.verdicts import confounds, frames
from test_real_logs import ENGINE, FIELDS, GRAPH_END, ORACLES, rank_key

DEMO = ROOT / "params" / "demo-import.yaml"
LOGS = ROOT / "params" / "demo-import" / "logs"
OLD = "05_custom_ar-off.mem_fraction-0.55_imported2"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_imports(folder: Path, body: dict) -> Path:
    path = folder / "imports.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def demo_import(tmp_path_factory) -> tuple[Path, dict]:
    """params/demo-import.yaml through the CLI, summary.html included; the originals' digests before."""
    before = {p.name: sha(p) for p in LOGS.iterdir()}
    out = tmp_path_factory.mktemp("import-out")
    proc = subprocess.run([*LAUNCHLAB, "import", str(DEMO), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    return run_dir, before


def test_the_demo_import_shows_the_old_baseline_ran_at_another_fraction_first(demo_import):
    run_dir, _ = demo_import
    verdict = json.loads((run_dir / "verdict.json").read_text())
    first = verdict["confounds"][0]
    assert first["kind"] == "level" and first["runs"] == [OLD]
    assert "mem_fraction_static=0.85, not 0.55" in first["detail"]
    [check] = [c for c in verdict["level_checks"] if c["check"] == "mem_fraction_static=0.55"]
    assert check["runs_contradicted"] == [OLD] and len(check["runs_confirmed"]) == 2
    # a misfiled log is no observation of the level it was filed under
    assert [(r["run_id"], r["why"]) for r in verdict["excluded_runs"]] == [(OLD, "misfiled")]
    # and its row says so beside the status counts that include it (issue 28: "ready 1" beside "0/1 ready")
    rows = [line for line in (run_dir / "report.md").read_text().splitlines()
            if line.startswith("| custom\\_ar=off, mem\\_fraction=0.55 |") and " ready" in line]
    assert any("| 0/1 ready (left out: 1 misfiled imported log) |" in row for row in rows), rows


def test_the_demo_import_names_the_old_install_as_confounds_with_the_runs_they_touch(demo_import):
    run_dir, _ = demo_import
    verdict = json.loads((run_dir / "verdict.json").read_text())
    details = {c["detail"].split(" differs")[0]: c for c in verdict["confounds"] if c["kind"] != "level"}
    version = details["server version (from the server log)"]
    assert "0.5.6: " + OLD in version["detail"] and "0.5.8: 01_" in version["detail"] and version["runs"] == [OLD]
    assert details["NCCL version (from the server log)"]["runs"] == [OLD]
    graph = details["undeclared server argument cuda_graph_max_bs"]
    assert "128: 01_" in graph["detail"] and f"256: {OLD}" in graph["detail"]
    assert verdict["controlled"] is False


def test_the_demo_import_decides_as_the_launched_demo_does_for_the_consistent_runs(demo_import):
    run_dir, _ = demo_import
    verdict = json.loads((run_dir / "verdict.json").read_text())
    # what tests/test_demo_end_to_end.py finds for the launched demo
    assert verdict["outcome_factors"] == ["mem_fraction"] and verdict["neutral_factors"] == ["custom_ar"]
    low = next(b for b in verdict["budget"] if b["variant"] == "custom_ar=off, mem_fraction=0.55")
    assert 0.55 < low["break_even_fraction"] < 0.85
    events = pd.read_parquet(run_dir / "events.parquet")
    assert (events["field"] == "debug.profile_max_num_token.rest").any()  # the DEBUG instrumentation lines


def test_imported_runs_are_marked_and_what_the_kit_did_not_watch_is_unknown_not_made_up(demo_import):
    run_dir, _ = demo_import
    runs = pd.read_parquet(run_dir / "runs.parquet")
    assert runs["imported"].all() and runs["startup_s"].isna().all()
    peaks = dict(zip(runs["run_id"], runs["peak_mem_used_mib"], strict=True))
    assert peaks["01_custom_ar-off.mem_fraction-0.55_imported1"] > 0  # the one run given an nvidia-smi CSV
    assert all(pd.isna(v) for r, v in peaks.items() if not r.startswith("01_"))
    status = json.loads((run_dir / "runs" / OLD / "status.json").read_text())
    assert status["imported"] is True and status["status"] == "ready" and "mem_fraction_static=0.85" in status["misfiled"]
    prov = json.loads((run_dir / "runs" / OLD / "provenance.json").read_text())
    assert prov["imported"] is True and "preflight" not in prov and "host_env" not in prov and prov["command"] is None
    html = (run_dir / "summary.html").read_text()
    assert "IMPORTED runs" in html and "not observed (imported)" in html
    assert "IMPORTED runs" in (run_dir / "report.md").read_text()


def test_imported_files_are_copied_unchanged_and_the_originals_are_not_touched(demo_import):
    run_dir, before = demo_import
    assert {p.name: sha(p) for p in LOGS.iterdir()} == before
    assert sha(run_dir / "runs" / OLD / "server.log") == before["old_baseline_that_worked.log"]
    folder = run_dir / "runs" / "01_custom_ar-off.mem_fraction-0.55_imported1"
    assert hashlib.sha256(gzip.decompress((folder / "nvidia-smi.csv.gz").read_bytes())).hexdigest() == before["baseline-smi.csv"]
    assert (run_dir / "imports.yaml").read_text() == DEMO.read_text()


def test_the_demo_imports_file_validates_as_the_params_it_declares():
    imports, _ = importer._read_file(DEMO)
    exp = importer.experiment_of(imports, "sglang", 2, str(DEMO))
    assert params.baseline_variant(exp).levels == {"custom_ar": "off", "mem_fraction": "0.55"}


def test_a_log_that_ends_during_weight_loading_has_an_unknown_outcome_and_is_left_out(tmp_path):
    lines = (LOGS / "nocar_085.log").read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "Load weight end" in line)
    (tmp_path / "cut.log").write_text("".join(lines[:cut]))
    path = write_imports(tmp_path, {"experiment": "cut", "server": {"kind": "auto"},
                                    "factors": {"mem_fraction": {"0.85": {"flags": {"--mem-fraction-static": "0.85"}}}},
                                    "baseline": {"mem_fraction": "0.85"},
                                    "runs": [{"levels": {"mem_fraction": "0.85"}, "log": "cut.log"}]})
    run_dir = importer.import_runs(path, tmp_path / "out", summarize=False)
    [run_id] = rundir.RunDir(run_dir).manifest().run_ids
    record = records.read_status(rundir.RunDir(run_dir).run(run_id)).record
    assert record.status == "unknown" and record.failure_reason is None
    assert record.failure_message.startswith("unknown: the log ends during weight loading")
    frames.write(run_dir, frames.build(run_dir, params.load(rundir.RunDir(run_dir).experiment_file)))
    verdict = reportmd.write_verdict(run_dir)
    assert [r.why for r in verdict.excluded_runs] == ["outcome unknown"] and not verdict.conclusive


def test_a_file_that_cannot_be_read_is_named_with_the_reason_and_nothing_is_written(tmp_path):
    shutil.copy(LOGS / "car_085.log", tmp_path / "good.log")
    (tmp_path / "a-folder.log").mkdir()
    path = write_imports(tmp_path, {"experiment": "bad", "server": {"kind": "sglang"},
                                    "factors": {"f": {"a": {}, "b": {}}}, "baseline": {"f": "a"},
                                    "runs": [{"levels": {"f": "a"}, "log": "good.log", "smi": "missing-smi.csv"},
                                             {"levels": {"f": "b"}, "log": "a-folder.log"}]})
    with pytest.raises(ImportFailed) as err:
        importer.import_runs(path, tmp_path / "out", summarize=False)
    text = str(err.value)
    assert "missing-smi.csv" in text and "No such file or directory" in text
    assert "a-folder.log" in text and "it is a folder, not a regular file" in text and "nothing was written" in text
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*"))


def test_a_run_filed_under_levels_no_factor_declares_is_refused_with_the_variants(tmp_path):
    shutil.copy(LOGS / "car_085.log", tmp_path / "good.log")
    path = write_imports(tmp_path, {"experiment": "bad", "factors": {"f": {"a": {}, "b": {}}}, "baseline": {"f": "a"},
                                    "runs": [{"levels": {"f": "c"}, "log": "good.log"}]})
    with pytest.raises(ImportFailed, match=r"levels \{'f': 'c'\} are not a variant.*f=a; f=b"):
        importer.import_runs(path, tmp_path / "out", summarize=False)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("manifest.json"))


def test_an_unknown_key_in_the_imports_file_is_a_params_error_naming_it(tmp_path):
    path = write_imports(tmp_path, {"experiment": "x", "runs": [{"levels": {}, "log": "a.log", "smi_csv": "b"}]})
    with pytest.raises(ParamsError, match="smi_csv"):
        importer.import_runs(path, tmp_path / "out", summarize=False)


def test_secrets_in_an_imported_log_and_command_are_masked_in_every_file_of_the_run_directory(tmp_path):
    text = (LOGS / "car_085.log").read_text().replace("ep_size=1,", "ep_size=1, api_key='sk-live-0123456789',")
    (tmp_path / "secret.log").write_text(text)
    original = sha(tmp_path / "secret.log")
    path = write_imports(tmp_path, {
        "experiment": "secret", "factors": {"f": {"a": {}}}, "baseline": {"f": "a"},
        "runs": [{"levels": {"f": "a"}, "log": "secret.log",
                  "command": "python3 -m sglang.launch_server --api-key sk-live-0123456789 --hf-token hf_abcdefgh"}]})
    run_dir = importer.import_runs(path, tmp_path / "out", summarize=False)
    frames.write(run_dir, frames.build(run_dir, params.load(rundir.RunDir(run_dir).experiment_file)))
    reportmd.write_verdict(run_dir)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "server.log" for p in files) and any(p.name == "parsed.json" for p in files)
    for p in files:
        data = p.read_bytes()
        assert b"sk-live-0123456789" not in data and b"hf_abcdefgh" not in data, p
    assert b"/models/kimi-k2.5-int4" in (run_dir / "runs").joinpath(
        rundir.RunDir(run_dir).manifest().run_ids[0], "server.log").read_bytes()  # a path is not a secret
    assert sha(tmp_path / "secret.log") == original


def test_an_nvidia_smi_table_gives_the_gpu_model_and_a_different_one_is_a_confound(tmp_path):
    tables = DATA / "nvsmi-samples"
    shutil.copy(LOGS / "car_085.log", tmp_path / "a.log")
    shutil.copy(LOGS / "nocar_085.log", tmp_path / "b.log")  # another launch: the same log twice would be one
    path = write_imports(tmp_path, {
        "experiment": "gpus", "factors": {"f": {"a": {}, "b": {}}}, "baseline": {"f": "a"},
        "runs": [{"levels": {"f": "a"}, "log": "a.log", "smi": str(tables / "measured-h200-580-default-table-idle.txt")},
                 {"levels": {"f": "b"}, "log": "b.log", "smi": str(tables / "club-3090-1322-kmd-version-header-partial.txt")}]})
    run_dir = importer.import_runs(path, tmp_path / "out", summarize=False)
    directory = rundir.RunDir(run_dir)
    first = directory.run(directory.manifest().run_ids[0])
    assert first.samples_table.is_file() and not first.samples().exists()
    names = [json.loads(directory.run(r).provenance.read_text())["gpus"] for r in directory.manifest().run_ids]
    assert names[0][0]["name"] == "NVIDIA H200" and names[1][0]["name"] == "NVIDIA GeForce RTX 5090"
    frames.write(run_dir, frames.build(run_dir, params.load(directory.experiment_file)))
    verdict = reportmd.write_verdict(run_dir)
    assert any(c.kind == "gpu" and "GPU model differs" in c.detail for c in verdict.confounds)


# --- real logs ----------------------------------------------------------------------------------------------------

REAL = {
    "vllm": ["vllm-pr14447-v0-tp4-memory-profiling-workers.log", "vllm-mlcommons-issue2267-v0-tp8-loading-weights-gpu-blocks.log",
             "vllm-issue28228-kimi-linear-tp2-available-kv-cache.log", "vllm-pr29335-enginecore-dp0-model-loading-kv-size.log",
             "vllm-issue17431-v1-0.8.5-enginecore-failed-to-start.log", "vllm-issue4429-v0.4.1-tp2-initialize-cache-error.log",
             "vllm-issue27508-enginecore-dp0-cuda-oom-sampler-warmup.log"],
    "sglang": ["sglang-pr11716-tp8-init-dist-load-begin.log", "sglang-pr15909-tp4-kv-alloc-capture-begin.log",
               "sglang-issue7227-tp1-capture-begin-exception.log",
               "sglang-kvcached-issue198-noprefix-load-weight-end-exception.log"],
}


def import_real(tmp_path: Path, names: list[str], versions: dict[str, str] | None = None) -> tuple[Path, dict[str, str]]:
    """versions: what the user declares for some logs (`version:` of a run in the imports file)."""
    levels = {f"log{i}": {} for i in range(len(names))}
    runs = [{"levels": {"log": f"log{i}"}, "log": str(DATA / "real-logs" / n)} for i, n in enumerate(names)]
    for run, name in zip(runs, names, strict=True):
        if name in (versions or {}):
            run["version"] = versions[name]
    path = write_imports(tmp_path, {
        "experiment": "real-logs", "server": {"kind": "auto"}, "factors": {"log": levels},
        "baseline": {"log": "log0"}, "runs": runs})
    run_dir = importer.import_runs(path, tmp_path / "out", summarize=False)
    frames.write(run_dir, frames.build(run_dir, params.load(rundir.RunDir(run_dir).experiment_file)))
    reportmd.write_verdict(run_dir)
    run_ids = rundir.RunDir(run_dir).manifest().run_ids
    return run_dir, dict(zip(names, run_ids, strict=True))


@pytest.mark.parametrize("server", sorted(REAL))
def test_real_logs_import_with_their_index_facts_in_the_events_and_nothing_made_up(tmp_path, server):
    run_dir, run_of = import_real(tmp_path, REAL[server])
    events = pd.read_parquet(run_dir / "events.parquet")
    checked = 0
    for name, run_id in run_of.items():
        mine = events[events["run_id"] == run_id]
        for rank, fields in (ORACLES[name].get("ranks") or {}).items():
            for key, want in fields.items():
                wanted = ({GRAPH_END[k]: v for k, v in want.items()} if key == "graph_end"
                          else {FIELDS[key]: want} if key in FIELDS else {})
                for field, value in wanted.items():
                    got = mine[(mine["rank"] == rank_key(rank)) & (mine["field"] == field)]["value"]
                    assert value in [pytest.approx(v) for v in got], f"{name} rank {rank} {field}: {list(got)}"
                    checked += 1
        for key, want in ORACLES[name].items():  # numbers the engine (or one rank for it) prints
            if key in ENGINE and isinstance(want, (int, float)):
                got = mine[mine["field"] == ENGINE[key]]["value"]
                assert want in [pytest.approx(v) for v in got], f"{name} {key}: {list(got)}"
                checked += 1
    assert checked >= 10
    runs = pd.read_parquet(run_dir / "runs.parquet")
    assert runs["peak_mem_used_mib"].isna().all() and runs["startup_s"].isna().all()  # no nvidia-smi, no watch
    assert pd.read_parquet(run_dir / "telemetry.parquet").empty
    for name, run_id in run_of.items():  # the outcome is the log's own: a failure it shows, else unknown
        row = runs[runs["run_id"] == run_id].iloc[0]
        failure = ORACLES[name].get("failure")
        assert row["status"] == ("failed" if failure else "ready" if ORACLES[name].get("ready") else "unknown"), name


def test_real_vllm_logs_of_both_engine_generations_and_pythons_are_a_version_confound(tmp_path):
    run_dir, run_of = import_real(tmp_path, REAL["vllm"])
    verdict = json.loads((run_dir / "verdict.json").read_text())
    by_label = {c["detail"].split(" differs")[0]: c for c in verdict["confounds"]}
    engine = by_label["vLLM engine generation (from the server log)"]
    assert "v0: " in engine["detail"] and "v1: " in engine["detail"]
    python = by_label["Python of the server's install (from the server log)"]["detail"]
    assert f"3.11: {run_of['vllm-issue17431-v1-0.8.5-enginecore-failed-to-start.log']}" in python
    assert "3.10: " in python
    total = by_label["GPU memory total in GiB (from the server log)"]["detail"]
    assert f"23.58: {run_of['vllm-pr14447-v0-tp4-memory-profiling-workers.log']}" in total and "79.11: " in total
    # no version number is stated in these excerpts and none was declared: none is reported
    assert not [label for label in by_label if label.startswith("server version")]


def test_versions_declared_for_real_logs_that_do_not_print_them_are_a_named_version_confound(tmp_path):
    # what the users of these threads said they ran: vLLM 0.4.1 (issue 4429, stated), 0.8.5 (issue 17431: the
    # environment `python_vllm_env_085`); the other logs are left without a version
    old, new = "vllm-issue4429-v0.4.1-tp2-initialize-cache-error.log", "vllm-issue17431-v1-0.8.5-enginecore-failed-to-start.log"
    run_dir, run_of = import_real(tmp_path, REAL["vllm"], {old: "0.4.1", new: "0.8.5"})
    verdict = json.loads((run_dir / "verdict.json").read_text())
    [version] = [c for c in verdict["confounds"] if c["detail"].startswith("server version")]
    declared = ", ".join(sorted([run_of[old], run_of[new]]))
    assert version["detail"].startswith(f"server version (from the server log; declared in the imports file for {declared})")
    assert f"0.4.1: {run_of[old]}" in version["detail"] and f"0.8.5: {run_of[new]}" in version["detail"]
    assert version["runs"] == [run_of[old]]  # the runs of all but the first value (0.8.5 comes first in run order)
    assert verdict["controlled"] is False
    events = pd.read_parquet(run_dir / "events.parquet")  # the declaration adds no parsed fact
    assert not (events["field"].astype(str).str.contains("version")).any()


def test_a_declared_version_the_log_contradicts_is_named_and_the_logs_version_is_used():
    logs = ["baseline_debug_nocar.log", "car_085.log"]
    parsed = {name: parsed_of(LOGS / name) for name in logs}
    facts = {"baseline_debug_nocar.log": {"declared": {"server_version": "0.5.8"}},
             "car_085.log": {"declared": {"server_version": "0.5.6"}}}
    found = confounds.log_differences(logs, parsed, {"mem_fraction_static", "disable_custom_all_reduce"}, facts)
    assert found == [{"kind": "declared", "runs": ["car_085.log"],
                      "detail": "run car_085.log: the imports file declares server version 0.5.6, but its log states "
                                "0.5.8 (the log's is used)"}]


# --- the log confounds, for launched runs too -------------------------------------------------------------------

def parsed_of(path: Path) -> dict:
    parsed = logparse.parse_file(path, "sglang")
    return {**parsed.to_json(), "log_facts": logfacts.read(path, parsed)}


def test_logs_of_one_install_differ_only_in_their_declared_arguments():
    logs = ["baseline_debug_nocar.log", "custom_ar_debug.log", "nocar_085.log", "car_085.log"]
    parsed = {name: parsed_of(LOGS / name) for name in logs}
    assert parsed["car_085.log"]["log_facts"]["server_version"] == "0.5.8"
    declared = {"mem_fraction_static", "disable_custom_all_reduce"}
    assert confounds.log_differences(logs, parsed, declared) == []
    undeclared = confounds.log_differences(logs, parsed, set())
    assert {c["detail"].split(" differs")[0] for c in undeclared} == {
        "undeclared server argument mem_fraction_static", "undeclared server argument disable_custom_all_reduce"}


def test_a_fact_one_log_does_not_state_is_not_a_difference():
    parsed = {"a": {"log_facts": {"server_version": "0.5.8", "nccl_version": "2.27.3"}, "args": {"x": "1"}},
              "b": {"log_facts": {"nccl_version": "2.27.3"}, "args": {}},
              "c": {"log_facts": {"server_version": "0.5.8"}}}
    assert confounds.log_differences(["a", "b", "c"], parsed, set()) == []
    parsed["c"]["log_facts"]["server_version"] = "0.5.6"
    [found] = confounds.log_differences(["a", "b", "c"], parsed, set())
    assert found["runs"] == ["c"] and "0.5.8: a; 0.5.6: c" in found["detail"]


def test_logs_without_a_standard_ready_line_need_the_users_ready_pattern(tmp_path):
    (tmp_path / "a.log").write_text("starting my server\nmodel loaded\nlistening on :8000, accepting requests\n")
    body = {"experiment": "generic", "server": {"kind": "generic"}, "factors": {"f": {"a": {}}}, "baseline": {"f": "a"},
            "runs": [{"levels": {"f": "a"}, "log": "a.log"}]}
    with pytest.raises(ImportFailed, match="ready_pattern: REGEX"):
        importer.import_runs(write_imports(tmp_path, body), tmp_path / "out", summarize=False)
    body["server"]["ready_pattern"] = "accepting requests"
    run_dir = importer.import_runs(write_imports(tmp_path, body), tmp_path / "out", summarize=False)
    [run_id] = rundir.RunDir(run_dir).manifest().run_ids
    assert records.read_status(rundir.RunDir(run_dir).run(run_id)).record.status == "ready"
