"""verdict.json is written from a typed record and read back into it — also when an older kit wrote it."""

import json

from conftest import ROOT
from launchlab.store.verdictrecord import Verdict


def test_a_verdict_json_of_an_older_kit_reads_into_the_record_with_its_headline():
    for path in sorted(ROOT.glob("examples/*/*/verdict.json")):
        data = json.loads(path.read_text())
        v = Verdict.from_json(data)
        assert v.controlled == data.get("controlled", False) and v.outcome_factors == data["outcome_factors"], path
        assert v.flaky_factors == [] and all(d.p_value is None or 0 <= d.p_value <= 1 for d in v.factors.values())
        if data.get("conclusive", True):  # the oldest files have no `conclusive`: the kit read them as conclusive
            assert v.headline().startswith("controlled;" if data.get("controlled") else "NOT controlled;")
        else:
            assert v.headline() == "INCONCLUSIVE: " + data["inconclusive_reasons"][0]


def test_the_record_survives_its_own_json_and_a_long_headline_is_cut_at_a_word():
    path = next(iter(sorted(ROOT.glob("examples/*/*/verdict.json"))))
    v = Verdict.from_json(json.loads(path.read_text()))
    again = Verdict.from_json(json.loads(json.dumps(v.to_json())))
    assert again == v
    v.conclusive, v.inconclusive_reasons = False, ["word " * 60]
    cut = v.headline(width=40)
    assert len(cut) <= 40 and cut.endswith(" …") and cut.split()[-2] == "word"


def test_the_summary_reads_the_verdict_this_kit_wrote_after_the_frames_and_recomputes_a_stale_one(tmp_path):
    import os
    import shutil

    from launchlab.reporting import report, reportmd

    run_dir = tmp_path / "h200"
    shutil.copytree(next(iter(sorted(ROOT.glob("examples/*/*/verdict.json")))).parent, run_dir)
    assert report.load(run_dir).written_verdict() is None, "an older kit's verdict.json is not reused"
    written = reportmd.write_verdict(run_dir)
    assert report.load(run_dir).written_verdict() == written
    later = (run_dir / "verdict.json").stat().st_mtime + 5
    os.utime(run_dir / "runs.parquet", (later, later))  # frames rebuilt after the verdict: it is stale
    assert report.load(run_dir).written_verdict() is None
