"""manifest.json is read into a typed record whose parts are typed too (issue 26): the runs and warm-ups it lists are
ManifestEntry records and a search is a ManifestSearch, read as fields; written back, every key is as the kit always
wrote it, and a manifest of an older kit (no runs, warm-ups or search) still reads."""

import json

import pytest

from conftest import ROOT
from launchlab.errors import RunDirError
from launchlab.store.manifest import Manifest, ManifestEntry, ManifestSearch

MANIFESTS = sorted(ROOT.glob("examples/*/*/manifest.json"))


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.parent.parent.name)
def test_a_manifest_s_runs_and_search_read_as_typed_records_and_write_back_with_the_keys_they_had(path):
    data = json.loads(path.read_text())
    manifest = Manifest.from_json(data, path)
    assert manifest.runs and all(isinstance(e, ManifestEntry) for e in [*manifest.runs, *manifest.warmup_runs])
    assert [e.run_id for e in manifest.runs] == [e["run_id"] for e in data["runs"]]
    assert manifest.search is None or isinstance(manifest.search, ManifestSearch)
    again = manifest.to_json()
    assert {key: again[key] for key in data} == data  # every key, and every key of every entry, as it was
    assert Manifest.from_json(json.loads(json.dumps(again)), path) == manifest


def test_the_examples_hold_a_probe_a_warm_up_and_a_manifest_of_an_older_kit():
    manifests = {p.parent.parent.name: Manifest.from_json(json.loads(p.read_text()), p) for p in MANIFESTS}
    search = manifests["h200-vllm-threshold"]
    assert search.search == ManifestSearch("--gpu-memory-utilization", "0.005", "0.007", "0.001")
    assert all(e.stratum and e.why for e in search.runs)
    assert [e.warmup for e in manifests["h200-vllm-kv"].warmup_runs] == [True]
    assert "warmup_runs" not in json.loads((ROOT / "examples/h200-transformers-kv/20261129-232709/manifest.json")
                                           .read_text())
    assert manifests["h200-transformers-kv"].warmup_runs == [] and manifests["h200-transformers-kv"].search is None


def test_a_manifest_without_runs_reads_and_one_whose_entries_are_not_runs_is_refused():
    data = json.loads(MANIFESTS[0].read_text())
    old = {k: v for k, v in data.items() if k not in ("runs", "warmup_runs", "search")}
    assert Manifest.from_json(old).runs == []
    with pytest.raises(RunDirError, match="is not a launchlab manifest"):
        Manifest.from_json({**data, "runs": [{"run": "x"}]})


def test_a_report_says_the_resume_command_from_the_folder_holding_params_and_run_directory(tmp_path):
    # a shared report carried the renderer's checkout path (/home/…/launchlab/outputs/…) in its resume command
    manifest = Manifest(experiment="x", baseline="b", factors={}, host="h", run_ids=[],
                        params_file=str(tmp_path / "ws" / "params" / "x.yaml"))
    run_dir = tmp_path / "ws" / "outputs" / "x" / "20261205-000000"
    assert manifest.resume_command(run_dir, shared=True) == \
        "launchlab run params/x.yaml --resume outputs/x/20261205-000000"
    assert manifest.resume_command(run_dir) == f"launchlab run {tmp_path}/ws/params/x.yaml --resume {run_dir}"
    elsewhere = Manifest(experiment="x", baseline="b", factors={}, host="h", run_ids=[],
                         params_file="/params-of-another-disk/x.yaml")
    assert elsewhere.resume_command(run_dir, shared=True) == \
        f"launchlab run /params-of-another-disk/x.yaml --resume {run_dir}"  # nothing in common but the root
