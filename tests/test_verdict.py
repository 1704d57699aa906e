"""The verdict never says more than the valid observations show: kit errors, missing runs and kernel deaths
are excluded and named, comparisons are matched within strata, and levels are checked against the log.

Run directories come from the real demo batch (copied, then altered the way a crash or an interruption
leaves them) or from small real sim batches."""

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from conftest import LAUNCHLAB, write_params
from launchlab import params
from launchlab.reporting import reportmd
from launchlab.verdicts import frames, levelchecks

pytestmark = pytest.mark.slow
NO_SMI = "the sampler could not start: nvidia-smi not found"


@pytest.fixture
def demo_copy(demo_run, tmp_path) -> Path:
    run_dir, _ = demo_run
    copy = tmp_path / run_dir.parent.name / run_dir.name
    shutil.copytree(run_dir, copy)
    return copy


def rebuild(run_dir: Path) -> dict:
    """What `launchlab report` does before the notebook: frames from the raw files, verdict.json, report.md."""
    exp = params.load(run_dir / "experiment.yaml")
    frames.write(run_dir, frames.build(run_dir, exp))
    reportmd.write_verdict(run_dir)
    return json.loads((run_dir / "verdict.json").read_text())


def folders(run_dir: Path, **levels: str) -> list[Path]:
    out = []
    for folder in sorted((run_dir / "runs").iterdir()):
        status = json.loads((folder / "status.json").read_text())
        if all(status["levels"][f] == lv for f, lv in levels.items()):
            out.append(folder)
    return out


def as_kit_error(folder: Path, message: str = NO_SMI, keep_files: bool = False, peak: float | None = None) -> None:
    """A run the kit could not carry out: status error, and (unless kept) no server log or samples."""
    status = json.loads((folder / "status.json").read_text())
    status.update(status="error", failure_reason=None, failure_phase=None, failure_message=message, startup_s=None,
                  peak_mem_used_mib=peak)
    (folder / "status.json").write_text(json.dumps(status))
    if not keep_files:
        for name in ("server.log", "nvidia-smi.csv", "nvidia-smi.csv.gz", "parsed.json"):
            (folder / name).unlink(missing_ok=True)


def test_an_experiment_whose_every_run_is_a_kit_error_concludes_nothing(demo_copy):
    for folder in folders(demo_copy):
        as_kit_error(folder)
    v = rebuild(demo_copy)
    assert v["conclusive"] is False and v["controlled"] is False
    [reason] = v["inconclusive_reasons"]
    assert reason.startswith("nothing can be concluded") and "16 kit errors" in reason and "nvidia-smi not found" in reason
    assert v["outcome_factors"] == [] and v["neutral_factors"] == []
    assert v["undetermined_factors"] == ["custom_ar", "mem_fraction"]
    assert v["effects"] == []
    assert len(v["excluded_runs"]) == 16 and {r["why"] for r in v["excluded_runs"]} == {"kit error"}
    md = (demo_copy / "report.md").read_text()
    head, verdict_part = md.split("## Outcomes")[0], md.split("\n## Verdict\n")[1].split("\n## ")[0]
    assert "Nothing can be concluded" in head, "the headline: the verdict's own reason"
    assert "**Inconclusive**" in verdict_part and "Nothing can be concluded" in verdict_part
    assert "Controlled comparison" not in md and "Does not change" not in md
    proc = subprocess.run([*LAUNCHLAB, "report", str(demo_copy)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Nothing can be concluded" in proc.stderr
    assert "INCONCLUSIVE:" not in proc.stderr  # the answer said once, as the headline, not also in other words
    html = (demo_copy / "summary.html").read_text()
    verdict_at, outcomes_at = html.index("Nothing can be concluded"), html.index(">Outcomes<")
    assert verdict_at < outcomes_at and "Controlled comparison" not in html


def test_a_level_with_only_kit_errors_leaves_its_factor_and_the_others_undetermined(demo_copy):
    for folder in folders(demo_copy, mem_fraction="0.85"):
        as_kit_error(folder)
    v = rebuild(demo_copy)
    assert v["conclusive"] is False
    assert "mem_fraction" not in v["neutral_factors"] and "mem_fraction" not in v["outcome_factors"]
    # custom AR decided where it could be compared (0.75, 4/4 vs 0/4): that stands; the fraction is unknown
    assert v["undetermined_factors"] == ["mem_fraction"] and v["outcome_factors"] == ["custom_ar"]
    text = " ".join(v["inconclusive_reasons"])
    assert "no valid runs of mem_fraction=0.85" in text and "kit error" in text and "nvidia-smi not found" in text
    # custom AR was compared where it could be (0.75) and changed the outcome there: said, not hidden
    assert "custom_ar decides the launch at mem_fraction=0.75" in v["factors"]["custom_ar"]["summary"]
    assert v["controlled"] is True  # what was observed is controlled; it just cannot decide


def test_runs_that_never_finished_are_missing_named_and_not_counted(demo_copy):
    gone = folders(demo_copy, mem_fraction="0.85")
    for folder in gone:  # Ctrl-C before these runs: the manifest lists them, nothing else exists
        shutil.rmtree(folder)
    v = rebuild(demo_copy)
    missing = [r for r in v["excluded_runs"] if r["why"] == "missing"]
    assert sorted(r["run_id"] for r in missing) == sorted(f.name for f in gone)
    assert v["undetermined_factors"] == ["mem_fraction"] and v["conclusive"] is False
    assert any("missing run" in r for r in v["inconclusive_reasons"])
    assert any("8 of 16 planned runs are not observations" in w for w in v["warnings"])
    outcomes = (demo_copy / "report.md").read_text()
    assert "no valid run" in outcomes


def test_a_run_whose_kernel_died_is_excluded_and_its_peak_does_not_count(demo_copy):
    victim, survivor, *_ = folders(demo_copy, custom_ar="off", mem_fraction="0.85")
    as_kit_error(victim, "the run notebook failed: DeadKernelError: Kernel died", keep_files=True, peak=0.0)
    v = rebuild(demo_copy)
    assert [r["run_id"] for r in v["excluded_runs"]] == [victim.name]
    assert v["conclusive"] is True and v["outcome_factors"] == ["custom_ar", "mem_fraction"]
    [peak] = [e for e in v["effects"] if (e["factor"], e["level"], e["metric"]) == ("custom_ar", "on", "peak_mem_used_mib")]
    survivor_peak = json.loads((survivor / "status.json").read_text())["peak_mem_used_mib"]
    assert peak["baseline_n"] == 3  # 3 of 4 at 0.85 (at 0.75 the phases differ): the dead run is not one of them
    assert peak["baseline_mean"] > 70_000 and survivor_peak > 80_000
    assert not any("peak_mem_used_mib: the spread" in w for w in v["warnings"])


def test_a_run_without_samples_has_no_peak_rather_than_zero(demo_copy):
    [folder] = folders(demo_copy, custom_ar="on", mem_fraction="0.85")[:1]
    (folder / "nvidia-smi.csv.gz").unlink()
    (folder / "nvidia-smi.csv").write_text("")  # the sampler started but never wrote a line (as a run cut short keeps it)
    rebuild(demo_copy)
    runs = pd.read_parquet(demo_copy / "runs.parquet").set_index("run_id")
    assert pd.isna(runs.loc[folder.name, "peak_mem_used_mib"])
    assert (runs.drop(index=folder.name)["peak_mem_used_mib"] > 70_000).all()


def test_a_parsed_server_argument_that_differs_from_the_level_is_contradicted():
    exp = params.Experiment.model_validate({
        "experiment": "x", "hosts": {"box": {"transport": "sim"}},
        "server": {"kind": "sglang", "command": ["python3", "-m", "sglang.launch_server", "--tp", "8"]},
        "factors": {"mem_fraction": {"0.55": {"flags": {"--mem-fraction-static": "0.55"}},
                                     "0.85": {"flags": {"--mem-fraction-static": "0.85"}}}},
        "baseline": {"mem_fraction": "0.55"}})
    runs = [{"run_id": "01", "levels": {"mem_fraction": "0.55"}}, {"run_id": "02", "levels": {"mem_fraction": "0.85"}},
            {"run_id": "03", "levels": {"mem_fraction": "0.85"}}]
    parsed = {"01": {"args": {"mem_fraction_static": "0.55"}},
              "02": {"args": {"mem_fraction_static": "0.54"}},  # e.g. SGLang's multimodal auto-reduction
              "03": {}}
    checks = {(c["level"], c["check"]): c for c in levelchecks.level_checks(exp, runs, parsed)}
    low, high = checks[("0.55", "mem_fraction_static=0.55")], checks[("0.85", "mem_fraction_static=0.85")]
    assert low["runs_confirmed"] == ["01"] and not low["runs_contradicted"]
    assert high["runs_contradicted"] == ["02"] and high["runs_unknown"] == ["03"]
    assert "mem_fraction=0.85: the server ran with mem_fraction_static=0.54, not 0.85 in run 02" in high["detail"]
    [confound] = levelchecks.contradictions(list(checks.values()))
    assert confound["kind"] == "level" and confound["runs"] == ["02"]


def test_custom_ar_disabled_by_the_server_itself_contradicts_an_on_level():
    exp = params.Experiment.model_validate({
        "experiment": "x", "hosts": {"box": {"transport": "sim"}},
        "server": {"kind": "sglang", "command": ["python3", "-m", "sglang.launch_server", "--tp", "8"]},
        "factors": {"custom_ar": {"off": {"flags": {"--disable-custom-all-reduce": True}}, "on": {}}},
        "baseline": {"custom_ar": "off"}})
    pcie = {r: {"state": "disabled", "reason": "pcie_more_than_two_gpus",
                "message": "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs."}
            for r in map(str, range(8))}
    parsed = {"01": {"args": {"disable_custom_all_reduce": "True", "tp_size": "8"}},
              "02": {"args": {"disable_custom_all_reduce": "False", "tp_size": "8"}, "custom_ar": pcie}}
    runs = [{"run_id": "01", "levels": {"custom_ar": "off"}}, {"run_id": "02", "levels": {"custom_ar": "on"}}]
    checks = {(c["level"], c["check"]): c for c in levelchecks.level_checks(exp, runs, parsed)}
    assert checks[("off", "disable_custom_all_reduce=True")]["runs_confirmed"] == ["01"]
    assert checks[("on", "disable_custom_all_reduce=False")]["runs_confirmed"] == ["02"]
    on = checks[("on", "custom all-reduce active")]
    assert on["runs_contradicted"] == ["02"]
    assert "custom_ar=on: custom all-reduce was disabled on ranks 0–7 (pcie_more_than_two_gpus) in run 02" in on["detail"]


THREE_LEVELS = """\
experiment: three-levels
hosts:
  box: {{transport: sim, gpus: 8, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.25, workdir: {work}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "8", --host, 127.0.0.1, --port, "{{port}}",
            --cuda-graph-max-bs, "128"]
  ready: {{timeout_s: 120, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  custom_ar:
    "off": {{flags: {{--disable-custom-all-reduce: true}}}}
    "on": {{}}
  mem_fraction:
    "0.55": {{flags: {{--mem-fraction-static: "0.55"}}}}
    "0.75": {{flags: {{--mem-fraction-static: "0.75"}}}}
    "0.85": {{flags: {{--mem-fraction-static: "0.85"}}}}
baseline: {{custom_ar: "off", mem_fraction: "0.55"}}
repetitions: 1
drain: {{timeout_s: 20, tolerance_mib: 64}}
"""


def test_custom_ar_decides_only_at_the_middle_fraction_and_its_matched_kv_effect_is_negative(tmp_path, sim_root):
    path = write_params(tmp_path, THREE_LEVELS.format(work=tmp_path / "hostwork"))
    proc = subprocess.run([*LAUNCHLAB, "run", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip())
    runs = pd.read_parquet(run_dir / "runs.parquet").set_index(["custom_ar", "mem_fraction"])["status"]
    assert runs[("off", "0.75")] == "ready" and runs[("on", "0.75")] == "failed"
    assert runs[("off", "0.85")] == runs[("on", "0.85")] == "ready"
    v = json.loads((run_dir / "verdict.json").read_text())
    # one run a side: what those runs did, observed, never settled (issue 63) — the decisions are the same
    assert v["conclusive"] is False and all("on 1 run per side: observed, not settled" in r
                                            for r in v["inconclusive_reasons"]), v["inconclusive_reasons"]
    assert set(v["outcome_factors"]) == {"custom_ar", "mem_fraction"}
    car = v["factors"]["custom_ar"]
    assert car["status"] == "decides_in_some"
    assert car["summary"].startswith("custom_ar decides the launch at mem_fraction=0.75; does not change the launch "
                                     "outcome at mem_fraction=0.55 and mem_fraction=0.85")
    [kv] = [e for e in v["effects"] if (e["factor"], e["level"], e["metric"]) == ("custom_ar", "on", "kv_tokens")]
    assert kv["strata"] == ["mem_fraction=0.85"] and kv["n"] == 1 and kv["baseline_n"] == 1
    assert -20_000 < kv["diff"] < 0 and kv["ratio"] < 1
    html = (run_dir / "summary.html").read_text()
    assert "at mem_fraction=0.75; does not change the launch outcome at" in html.replace("\\_", "_")


CONTRADICTED = """\
experiment: claims-off
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.25, workdir: {work}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}",
            --mem-fraction-static, "0.85"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  custom_ar:
    "off": {{env: {{SGLANG_FORCE_CUSTOM_AR_PCIE: "0"}}}}   # believed to turn it off; on two GPUs it does not
    "on": {{}}
baseline: {{custom_ar: "off"}}
repetitions: 1
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


def test_a_level_that_claims_custom_ar_off_but_does_not_disable_it_is_a_contradicted_level(tmp_path, sim_root):
    path = write_params(tmp_path, CONTRADICTED.format(work=tmp_path / "hostwork"))
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip())
    v = json.loads((run_dir / "verdict.json").read_text())
    [off] = [c for c in v["level_checks"] if (c["factor"], c["level"], c["check"]) ==
             ("custom_ar", "off", "custom all-reduce inactive")]
    assert off["runs_contradicted"] == ["01_custom_ar-off_rep1"]
    assert "custom_ar=off: custom all-reduce was active on ranks 0, 1 in run 01_custom_ar-off_rep1" in off["detail"]
    assert v["controlled"] is False
    assert any(c["kind"] == "level" and c["runs"] == ["01_custom_ar-off_rep1"] for c in v["confounds"])
    [on] = [c for c in v["level_checks"] if (c["level"], c["check"]) == ("on", "custom all-reduce active")]
    assert on["runs_confirmed"] == ["02_custom_ar-on_rep1"]
    # its runs leave the factor's comparisons: with nothing left of "off", custom_ar is undetermined, not neutral,
    # and no custom_ar effect is computed from a run that did not have its level
    assert v["factors"]["custom_ar"]["status"] == "undetermined" and v["neutral_factors"] == []
    assert not [e for e in v["effects"] if e["factor"] == "custom_ar"]
    assert "01_custom_ar-off_rep1" in v["factors"]["custom_ar"]["summary"]
    report = (run_dir / "report.md").read_text()
    assert "A level did not take effect" in report and "left out of that factor's comparisons" in report


def test_an_inconclusive_reason_that_starts_with_a_factor_keeps_its_name_as_written():
    # issue 28: the summary said "Custom_ar is undetermined"
    from launchlab.verdicts.verdict import _sentence

    assert _sentence("custom_ar is undetermined: only custom_ar=off was planned", {"custom_ar": None}) \
        == "custom_ar is undetermined: only custom_ar=off was planned."
    assert _sentence("graphs is undetermined", {"graphs": None}) == "graphs is undetermined."
    assert _sentence("no run finished", {"graphs": None}) == "No run finished."
    assert _sentence("--enforce-eager was never applied", {}) == "--enforce-eager was never applied."
