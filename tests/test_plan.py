from conftest import ROOT
from launchlab import params
from launchlab.runner.plan import find_run, make_plan


def test_runs_are_interleaved_variant_by_variant_not_blocked():
    exp = params.load(ROOT / "params" / "demo.yaml")
    runs = make_plan(exp)
    assert len(runs) == 8
    assert [r.variant.name for r in runs[:4]] == [r.variant.name for r in runs[4:]]
    assert [r.repetition for r in runs] == [1, 1, 1, 1, 2, 2, 2, 2]


def test_run_ids_are_stable_and_unique():
    exp = params.load(ROOT / "params" / "demo.yaml")
    ids = [r.run_id for r in make_plan(exp)]
    assert ids == [r.run_id for r in make_plan(params.load(ROOT / "params" / "demo.yaml"))]
    assert len(set(ids)) == len(ids)
    assert ids[0] == "01_custom_ar-off.mem_fraction-0.55_rep1"
    assert find_run(make_plan(exp), ids[5]).seq == 6


def test_with_several_hosts_each_runs_whole_replicates():
    two_hosts = "host: [box, box2]\nhosts:\n  box2: {transport: sim}\n  box:"
    text = (ROOT / "params" / "demo.yaml").read_text().replace("hosts:\n  box:", two_hosts)
    exp = params.loads(text.replace("repetitions: 2", "repetitions: 4"))
    runs = make_plan(exp)
    assert [r.host for r in runs] == ["box"] * 4 + ["box2"] * 4 + ["box"] * 4 + ["box2"] * 4
    for variant in {r.variant.name for r in runs}:
        assert sorted(r.host for r in runs if r.variant.name == variant) == ["box", "box", "box2", "box2"]
