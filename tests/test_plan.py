from conftest import ROOT
from launchlab import params
from launchlab.runner.plan import make_plan


def test_runs_are_interleaved_variant_by_variant_not_blocked():
    exp = params.load(ROOT / "params" / "demo.yaml")
    runs = make_plan(exp)
    assert len(runs) == 16
    assert [r.variant.name for r in runs[:4]] == [r.variant.name for r in runs[4:8]] == [r.variant.name for r in runs[12:]]
    assert [r.repetition for r in runs] == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4


def test_run_ids_are_stable_and_unique():
    exp = params.load(ROOT / "params" / "demo.yaml")
    ids = [r.run_id for r in make_plan(exp)]
    assert ids == [r.run_id for r in make_plan(params.load(ROOT / "params" / "demo.yaml"))]
    assert len(set(ids)) == len(ids)
    assert ids[0] == "01_custom_ar-off.mem_fraction-0.75_rep1"
    assert make_plan(exp)[5].seq == 6 and make_plan(exp)[5].run_id == ids[5]


def test_with_several_hosts_each_runs_whole_replicates():
    two_hosts = "host: [box, box2]\nhosts:\n  box2: {transport: sim}\n  box:"
    text = (ROOT / "params" / "demo.yaml").read_text().replace("hosts:\n  box:", two_hosts)
    exp = params.loads(text)  # 4 repetitions
    runs = make_plan(exp)
    assert [r.host for r in runs] == ["box"] * 4 + ["box2"] * 4 + ["box"] * 4 + ["box2"] * 4
    for variant in {r.variant.name for r in runs}:
        assert sorted(r.host for r in runs if r.variant.name == variant) == ["box", "box", "box2", "box2"]


def test_a_run_notebook_takes_every_run_as_the_batch_s_manifest_lists_it_warm_ups_and_probes_too(tmp_path, monkeypatch):
    """runview.recorded_run reads the run from the manifest the batch wrote (issue 26: one run's notebook does not
    plan): the same run as the batch planned, for a fixed plan with warm-ups on two hosts and for a search's probes."""
    import pytest

    from launchlab.errors import RunDirError
    from launchlab.runner import batch, runview, searchbatch
    from launchlab.store import rundir

    monkeypatch.setenv("LAUNCHLAB_OUTPUTS", str(tmp_path / "outputs"))
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text((ROOT / "params" / "demo.yaml").read_text().replace(
        "hosts:\n  box:", "warmup: 1\nhost: [box, box2]\nhosts:\n  box2: {transport: sim}\n  box:"))
    exp = params.load(fixed)
    manifest = rundir.RunDir(batch.new_run_dir(fixed)).manifest()
    plan = make_plan(exp)
    assert sum(r.warmup for r in plan) == 2
    assert [runview.recorded_run(exp, manifest, r.run_id) for r in plan] == plan
    assert runview.recorded_run(exp, manifest, "") == plan[0]
    with pytest.raises(RunDirError, match="not in the run directory's manifest"):
        runview.recorded_run(exp, manifest, "99_nothing_rep1")

    searched = tmp_path / "search.yaml"
    searched.write_text((ROOT / "params" / "demo-threshold.yaml").read_text())
    exp = params.load(searched)
    directory = rundir.RunDir(batch.new_run_dir(searched))
    probes = make_plan(exp)
    searchbatch.record_probes(directory, probes)
    assert all(r.probe is not None for r in probes)
    assert [runview.recorded_run(exp, directory.manifest(), r.run_id) for r in probes] == probes


def test_a_resumed_run_directory_of_a_kit_that_listed_only_run_ids_gets_its_runs_listed(tmp_path, monkeypatch):
    from launchlab.runner import batch, runview
    from launchlab.store import rundir

    monkeypatch.setenv("LAUNCHLAB_OUTPUTS", str(tmp_path / "outputs"))
    path = ROOT / "params" / "demo.yaml"
    exp = params.load(path)
    directory = rundir.RunDir(batch.new_run_dir(path))
    old = directory.manifest().to_json()
    del old["runs"], old["warmup_runs"]
    rundir.write_json(directory.manifest_file, old)
    assert directory.manifest().runs == []
    batch._open_run_dir(exp, make_plan(exp), path, None, resume=directory.path)
    assert [runview.recorded_run(exp, directory.manifest(), r.run_id) for r in make_plan(exp)] == make_plan(exp)
