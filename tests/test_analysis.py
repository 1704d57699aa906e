"""Confounds planted into the provenance of real runs are each detected and named."""

import copy
import json

import pandas as pd
import pytest

from launchlab.verdicts import confounds


@pytest.fixture
def demo_facts(demo_run):
    run_dir, _ = demo_run
    runs = pd.read_parquet(run_dir / "runs.parquet")
    facts = {r: json.loads((run_dir / "runs" / r / "provenance.json").read_text()) for r in runs["run_id"]}
    return runs, facts


BASELINE = "custom_ar=off, mem_fraction=0.75"


def test_the_real_demo_runs_have_no_confound(demo_facts):
    runs, facts = demo_facts
    assert confounds.find(runs, facts, BASELINE) == []


def test_a_package_version_that_differs_between_runs(demo_facts):
    runs, facts = demo_facts
    facts = copy.deepcopy(facts)
    target = runs["run_id"][3]
    facts[target]["interpreter"]["packages"]["pydantic"] = "1.10.0"
    [found] = confounds.find(runs, facts, BASELINE)
    assert found["kind"] == "versions" and "pydantic" in found["detail"] and found["runs"] == [target]


def test_a_modified_installed_file(demo_facts):
    runs, facts = demo_facts
    facts = copy.deepcopy(facts)
    target = runs["run_id"][5]
    facts[target]["integrity"]["modified"] = ["launchlab/sim/sglang_server.py"]
    [found] = confounds.find(runs, facts, BASELINE)
    assert found["kind"] == "modified files" and "sglang_server.py" in found["detail"] and found["runs"] == [target]


def test_an_undeclared_environment_variable(demo_facts):
    runs, facts = demo_facts
    facts = copy.deepcopy(facts)
    target = runs["run_id"][2]
    facts[target]["host_env"]["NCCL_P2P_DISABLE"] = "1"
    [found] = confounds.find(runs, facts, BASELINE)
    assert found["kind"] == "environment" and "NCCL_P2P_DISABLE" in found["detail"] and found["runs"] == [target]


def test_every_run_running_modified_code_is_a_warning_not_a_confound(demo_facts):
    runs, facts = demo_facts
    facts = copy.deepcopy(facts)
    for f in facts.values():
        f["integrity"]["modified"] = ["launchlab/sim/sglang_server.py"]
    assert confounds.find(runs, facts, BASELINE) == []
    assert any("every run ran a modified" in n for n in confounds.provenance_notes(facts))


def test_a_baseline_that_is_not_reproducible(demo_facts):
    runs, facts = demo_facts
    runs = runs.copy()
    runs.loc[runs["run_id"] == runs["run_id"][0], "status"] = "failed"  # one of the baseline's 4 ready runs
    kinds = [c["kind"] for c in confounds.find(runs, facts, BASELINE)]
    assert kinds == ["baseline"]


def test_hosts_that_are_not_balanced_over_the_variants(demo_facts):
    runs, facts = demo_facts
    runs = runs.copy()
    runs.loc[runs["run_id"] == runs["run_id"][0], "host"] = "other-box"
    [found] = confounds.find(runs, facts, BASELINE)
    assert found["kind"] == "host" and "other-box×1" in found["detail"]
    balanced = runs.copy()
    balanced["host"] = ["a"] * 8 + ["b"] * 8  # two replicates per host, as the plan spreads them
    assert confounds.find(balanced, facts, BASELINE) == []
