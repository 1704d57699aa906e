"""Server arguments that follow from the declared levels (derivedargs.py), and confound texts cut to about 80
characters per value — from real vLLM 0.26 logs with and without `--enforce-eager` (tests/fixtures/vllm-0.26-h200),
brought in through `launchlab import`'s real path: importer, parsers, frames, verdict.json and report.md."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from conftest import DATA
from launchlab import params
from launchlab.reporting import reportmd
from launchlab.runner import importer
from launchlab.store import rundir
from launchlab.verdicts import frames

LOGS = DATA / "vllm-0.26-h200"
GRAPHS, EAGER, EAGER_LOW = ("vllm-0.26-util0.3-graphs.log", "vllm-0.26-util0.3-enforce-eager.log",
                            "vllm-0.26-util0.004-enforce-eager.log")
UTIL = {"0.3": {"flags": {"--gpu-memory-utilization": "0.3"}}, "0.004": {"flags": {"--gpu-memory-utilization": "0.004"}}}


def import_verdict(folder: Path, factors: dict, baseline: dict, runs: list[tuple[dict, str]]) -> tuple[dict, str]:
    """The imports file → run directory → verdict.json and report.md (no HTML render)."""
    body = {"experiment": "vllm-026", "server": {"kind": "vllm"}, "factors": factors, "baseline": baseline,
            "runs": [{"levels": levels, "log": str(LOGS / log)} for levels, log in runs]}
    path = folder / "imports.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    run_dir = importer.import_runs(path, folder / "out", summarize=False)
    frames.write(run_dir, frames.build(run_dir, params.load(rundir.RunDir(run_dir).experiment_file)))
    reportmd.write_verdict(run_dir)
    return json.loads((run_dir / "verdict.json").read_text()), (run_dir / "report.md").read_text()


def test_vllm_configs_that_change_with_enforce_eager_follow_from_the_graphs_factor_and_are_no_confound(tmp_path):
    graphs = {"on": {}, "off": {"flags": {"--enforce-eager": True}}}
    verdict, report = import_verdict(tmp_path, {"graphs": graphs, "util": UTIL}, {"graphs": "on", "util": "0.3"}, [
        ({"graphs": "on", "util": "0.3"}, GRAPHS), ({"graphs": "off", "util": "0.3"}, EAGER),
        ({"graphs": "off", "util": "0.004"}, EAGER_LOW)])
    assert verdict["confounds"] == [] and verdict["controlled"] is True
    derived = {d["arg"]: d for d in verdict["derived_args"]}
    assert sorted(derived) == ["compilation_config", "kernel_config"]
    for d in derived.values():
        assert d["follows_from"] == ["graphs"]  # not util, and not both: the smallest set that determines it
        assert sorted(d["values"]) == ["off", "on"] and d["repeated"] is True  # graphs=off has two runs
        assert all(len(v) <= 110 for v in d["values"].values()), d["values"]
    assert "CompilationMode.VLLM_COMPILE" in derived["compilation_config"]["values"]["on"]
    assert "CompilationMode.NONE" in derived["compilation_config"]["values"]["off"]
    assert "`compilation_config` follows from `graphs`" in report and "`kernel_config` follows from `graphs`" in report
    assert "Not a controlled comparison" not in report


def test_a_config_that_differs_between_runs_of_the_same_levels_stays_a_confound_with_each_value_cut(tmp_path):
    # both 0.3 logs filed under one level of a factor that does not touch --enforce-eager: the configs differ
    # between runs of equal levels, so they do not follow from the design
    verdict, report = import_verdict(tmp_path, {"util": UTIL}, {"util": "0.3"}, [
        ({"util": "0.3"}, GRAPHS), ({"util": "0.3"}, EAGER), ({"util": "0.004"}, EAGER_LOW)])
    assert verdict["derived_args"] == [] and verdict["controlled"] is False
    by_field = {c["detail"].split(" differs")[0]: c for c in verdict["confounds"]}
    config = by_field["undeclared server argument compilation_config"]
    eager_runs = sorted(c["runs"] for c in verdict["confounds"])[0]
    assert config["runs"] == eager_runs and len(config["runs"]) == 2  # the runs of the second value: both eager logs
    # the field, each distinct value cut to about 80 characters with its length, and the runs — not 2 KB of config
    assert len(config["detail"]) < 400, config["detail"]
    assert "(2,244 characters)" in config["detail"] and "(1,455 characters)" in config["detail"]
    assert "CompilationMode.VLLM_COMPILE" in config["detail"] and "CompilationMode.NONE" in config["detail"]
    assert "undeclared server argument enforce_eager" in by_field
    [line] = [line for line in report.splitlines() if "(2,244 characters)" in line]  # the report's confound line
    assert len(line) < 600
