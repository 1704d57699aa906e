"""verdict.json is written from a typed record and read back into it — also when an older kit wrote it."""

import ast
import json
from pathlib import Path

from conftest import ROOT
from launchlab.store import verdictrecord
from launchlab.store.verdictrecord import Verdict

LIB = ROOT / "lib" / "launchlab"


def test_a_verdict_json_of_an_older_kit_reads_into_the_record_with_its_headline():
    for path in sorted(ROOT.glob("examples/*/*/verdict.json")):
        data = json.loads(path.read_text())
        v = Verdict.from_json(data)
        assert v.controlled == data.get("controlled", False) and v.outcome_factors == data["outcome_factors"], path
        assert v.flaky_factors == [] and all(d.p_value is None or 0 <= d.p_value <= 1 for d in v.factors.values())
        if data.get("conclusive", True):  # the oldest files have no `conclusive`: the kit read them as conclusive
            assert v.headline().startswith("controlled;" if data.get("controlled") else "NOT controlled;")
        else:
            # then whether it reproduced a diagnosed log, where one was given and compared
            assert v.headline().startswith("INCONCLUSIVE: " + data["inconclusive_reasons"][0])
            assert v.headline().removeprefix("INCONCLUSIVE: " + data["inconclusive_reasons"][0]) in (
                "", f"; reproduced {len((data.get('reproduced') or {}).get('runs', []))}/"
                    f"{len((data.get('reproduced') or {}).get('runs', []))}")


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

    from launchlab import params
    from launchlab.reporting import report, reportmd
    from launchlab.verdicts import frames

    run_dir = tmp_path / "h200"
    shutil.copytree(ROOT / "examples/h200-transformers-kv/20261129-232709", run_dir)
    # an example commits no telemetry.parquet (rebuilt from its raw files): its frames, as `launchlab report` writes
    frames.write(run_dir, frames.build(run_dir, params.load(run_dir / "experiment.yaml")))
    verdict_file = run_dir / "verdict.json"  # as an older kit wrote it (the example is re-rendered by this one)
    verdict_file.write_text(verdict_file.read_text().replace('"kit_version":"', '"kit_version":"0.0.0-older-'))
    assert report.load(run_dir).written_verdict() is None, "an older kit's verdict.json is not reused"
    written = reportmd.write_verdict(run_dir)
    assert report.load(run_dir).written_verdict() == written
    later = (run_dir / "verdict.json").stat().st_mtime + 5
    os.utime(run_dir / "runs.parquet", (later, later))  # frames rebuilt after the verdict: it is stale
    assert report.load(run_dir).written_verdict() is None


def status_spellings(path: Path) -> list[str]:
    """Where a module's code spells a decision status as a string of its own (docstrings, and dict keys and
    subscripts such as a stratum's "flaky" list, are other words)."""
    tree = ast.parse(path.read_text())
    other = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                other.add(id(first.value))
        if isinstance(node, ast.Dict):
            other |= {id(k) for k in node.keys if k is not None}
        if isinstance(node, ast.Subscript):
            other.add(id(node.slice))
    return [f"{path.name}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in verdictrecord.STATUSES and id(n) not in other]


def test_the_decision_statuses_are_spelled_once_and_used_by_name_everywhere_else():
    """verdictrecord.STATUSES is the one vocabulary of a factor's status (issue 26): the analysis and the verdict
    use its names (DECIDES, FLAKY, …), so a status cannot be misspelled or added in one place only."""
    assert verdictrecord.STATUSES == ("decides", "decides_in_some", "changes_how_it_fails", "neutral", "flaky",
                                      "confounded", "undetermined", "not_shown_to_vary", "searched")
    elsewhere = [p for p in sorted(LIB.rglob("*.py")) if p != LIB / "store" / "verdictrecord.py"]
    assert [s for p in elsewhere for s in status_spellings(p)] == []


def test_the_check_finds_a_decision_status_spelled_in_code(tmp_path):
    module = tmp_path / "judge.py"
    module.write_text('"""Says flaky in its docstring."""\ndef status(s):\n    if s["flaky"]:\n'
                      '        return "flaky"\n    return {"status": "neutral"}\n')
    assert status_spellings(module) == ["judge.py:4 'flaky'", "judge.py:5 'neutral'"]


def test_a_factor_that_changes_only_how_the_launch_fails_is_never_read_as_deciding_it():
    """Issue 63: `outcome_factors` is what `ls`, `compare` and scripts read as "decides the launch": a factor that only
    changes how the launch fails has a field of its own — and a verdict.json of a kit before that, which listed it
    among the outcome factors, is read the way this kit writes it."""
    decision = {"status": "changes_how_it_fails", "summary": "f changes how the launch fails", "strata": [],
                "p_value": 0.33, "significant": False, "runs_per_side": 2}
    old = {"controlled": True, "conclusive": True, "inconclusive_reasons": [], "baseline": "f=a",
           "outcome_factors": ["f", "g"], "neutral_factors": [], "undetermined_factors": [],
           "factors": {"f": decision, "g": {**decision, "status": "decides", "summary": "g decides the launch"}},
           "confounds": [], "effects": [], "level_checks": [], "excluded_runs": [], "budget": [], "warnings": []}
    v = Verdict.from_json(old)
    assert v.outcome_factors == ["g"] and v.failure_mode_factors == ["f"]
    line = v.headline()
    assert "decides the launch: g (p = 0.33" in line and "; changes how it fails: f (p = 0.33" in line, line
    assert Verdict.from_json(v.to_json()) == v  # as written now: the same
