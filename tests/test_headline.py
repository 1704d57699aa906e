"""The headline atop every report (reporting/headline.py): one sentence that never claims more than the verdict, its
strength from the verdict's own numbers, what would settle it; first in report.md and last on the CLI's terminal."""

import json
import shutil
import subprocess

import pytest

from conftest import LAUNCHLAB, ROOT
from launchlab.reporting import headline
from launchlab.store import rundir
from launchlab.store.verdictrecord import (
    CONFOUNDED,
    DECIDING,
    Decision,
    ExcludedRun,
    Stratum,
    Verdict,
)

EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*/2*") if (p / "verdict.json").exists())


def _verdict(path):
    return Verdict.from_json(json.loads((path / "verdict.json").read_text()))


def _planned(path) -> int:
    return len(rundir.RunDir(path).manifest().run_ids)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.parent.name)
def test_an_examples_headline_leads_with_inconclusive_exactly_when_its_verdict_is_and_states_the_weakest_p(example):
    v = _verdict(example)
    found = headline.of(v, planned=_planned(example), resume="launchlab run P --resume R")
    assert found.lead.startswith("Inconclusive") == (not v.conclusive or any(
        r.get("state") != "converged" for r in (v.thresholds or {}).get("strata", []))), found.lead
    assert "\n" not in found.lead and found.lead.endswith(".") and found.strength
    if v.thresholds is not None:
        return
    deciding = [d for d in v.factors.values() if d.p_value is not None
                and (d.would_be if d.status == CONFOUNDED else d.status) in DECIDING]
    if deciding:
        weakest = max(deciding, key=lambda d: d.p_value)
        assert f"p = {weakest.p_value:.2g}, Fisher's exact test, {weakest.runs_per_side} runs a side" in found.strength
        assert ("not significant" in found.strength) == (not weakest.significant)
        if not weakest.significant and weakest.repetitions_to_settle:
            assert f"{weakest.repetitions_to_settle} " in found.settle and "settle it" in found.settle
    for factor in v.outcome_factors:
        assert factor in found.lead


def _empty_verdict(**changes) -> Verdict:
    fields = {"controlled": False, "conclusive": False, "inconclusive_reasons": [], "baseline": "a",
              "outcome_factors": [], "neutral_factors": [], "undetermined_factors": ["x"],
              "factors": {"x": Decision("undetermined", "x is undetermined: no valid run", [])}, "confounds": [],
              "effects": [], "level_checks": [], "excluded_runs": [], "budget": [], "warnings": []}
    return Verdict(**{**fields, **changes})


def test_without_any_valid_run_the_lead_is_the_verdicts_own_reason_and_the_strength_says_no_observation():
    reason = "nothing can be concluded: none of the 4 planned runs is a valid observation of the server (4 kit errors)"
    v = _empty_verdict(inconclusive_reasons=[reason],
                       excluded_runs=[ExcludedRun(f"0{i}_x-a_rep1", "kit error") for i in range(1, 5)])
    found = headline.of(v, planned=4)
    assert found.lead == "N" + reason[1:] + "."
    assert found.strength == "no valid observation of the server"
    assert found.settle and "--resume" not in found.settle  # kit errors: nothing left to resume


def test_an_unfinished_batch_is_settled_by_the_resume_command_said_as_code():
    stratum = Stratum(held={}, changes=True, levels={"a": {"ready": 1, "valid": 1, "invalid": ""},
                                                     "b": {"ready": 0, "valid": 1, "invalid": ""}})
    decision = Decision("decides", "x decides the launch", [stratum], p_value=1.0, significant=False,
                        repetitions_to_settle=4, runs_per_side=1)
    v = _empty_verdict(conclusive=True, controlled=True, outcome_factors=["x"], undetermined_factors=[],
                       factors={"x": decision}, excluded_runs=[ExcludedRun("03_x-a_rep2", "missing")])
    found = headline.of(v, planned=3, resume="launchlab run params/p.yaml --resume outputs/p/1")
    assert found.lead.startswith("x decides whether the launch starts") and "a starts (1/1 ready)" in found.lead
    assert "1 of 3 runs" in found.settle and "`launchlab run params/p.yaml --resume outputs/p/1`" in found.settle
    assert "`launchlab run params/p.yaml --resume outputs/p/1`" in found.markdown()
    assert "<code>launchlab run params/p.yaml --resume outputs/p/1</code>" in found.html()
    assert "p = 1, Fisher's exact test, 1 run a side" in found.strength


def test_the_headline_escapes_what_came_from_a_params_file():
    bad = "<img src=x onerror=alert(1)>*x*"
    stratum = Stratum(held={}, changes=True, levels={bad: {"ready": 2, "valid": 2, "invalid": ""},
                                                     "b": {"ready": 0, "valid": 2, "invalid": ""}})
    decision = Decision("decides", f"{bad} decides the launch", [stratum], p_value=0.33, significant=False,
                        repetitions_to_settle=4, runs_per_side=2)
    v = _empty_verdict(conclusive=True, controlled=True, outcome_factors=[bad], undetermined_factors=[],
                       factors={bad: decision})
    found = headline.of(v, planned=4)
    assert bad in found.lead
    assert "<img" not in found.html() and "&lt;img" in found.html()
    assert "<img" not in found.markdown() and r"\*x\*" in found.markdown()


@pytest.mark.parametrize("name", ["h200-sglang-kv", "h200-vllm-threshold"])
def test_report_md_opens_with_the_headline_and_the_cli_ends_with_it(name, tmp_path):
    [example] = [p for p in EXAMPLES if p.parent.name == name]
    copy = tmp_path / example.name
    shutil.copytree(example, copy)
    proc = subprocess.run([*LAUNCHLAB, "report", "--no-html", str(copy)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = headline.of_run_dir(copy)
    assert found is not None
    lines = (copy / "report.md").read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == ""
    assert "\n".join(lines[2:2 + len(found.markdown().splitlines())]) == found.markdown()
    assert lines[2].startswith("**") and found.lead[:40].replace("_", "\\_")[:20] in lines[2]
    said = proc.stderr.rstrip("\n").splitlines()
    assert said[-len(found.lines()):] == found.text().splitlines()
    assert proc.stdout.strip().splitlines()[-1].endswith("report.md")  # stdout's last line: still the path


def test_launchlab_run_ends_with_the_headline_of_the_batch_it_ran(demo_run):
    run_dir, stderr = demo_run
    found = headline.of_run_dir(run_dir)
    assert found is not None and found.lead
    assert stderr.rstrip("\n").splitlines()[-len(found.lines()):] == found.text().splitlines()
    v = _verdict(run_dir)
    assert found.lead.startswith("Inconclusive") == (not v.conclusive)


def test_the_headline_names_the_confounds_the_verdict_found_touching_a_factor_in_its_order():
    """h200-sglang-kv: fraction is touched by the host and environment confounds of runs 16–18. The headline had
    recomputed the kinds from every confound and named "level" too (custom_ar=on not in effect on one GPU, in every
    run of both sides: no confound of fraction), unlike the `## Verdict` section under it."""
    run_dir = ROOT / "examples" / "h200-sglang-kv" / "20261203-092613"
    verdict = Verdict.from_json(json.loads((run_dir / "verdict.json").read_text()))
    fraction = verdict.factors["fraction"]
    assert fraction.confounded_by == ["host", "environment"]
    assert fraction.summary.startswith("fraction is confounded: host, environment confound(s) touch 1 run(s)")
    lead = headline.of_run_dir(run_dir).lead
    assert "but confounds (host, environment) touch 1 run it rests on" in lead and "level)" not in lead, lead
    assert "confounds (host, environment) touch" in (run_dir / "report.md").read_text().splitlines()[2]


def test_a_level_whose_runs_end_as_often_one_way_as_another_is_not_said_to_end_mostly_one_way():
    """'mostly fails (cuda_oom …)' where half the runs failed one way and half another picked one at random."""
    from launchlab.store.verdictrecord import Stratum

    levels = {"0.9": {"valid": 3, "ready": 3, "outcomes": {"starts": 3}},
              "0.5": {"valid": 4, "ready": 0, "outcomes": {"fails: cuda_oom in cuda_graph": 2,
                                                           "fails: kv_cache_no_memory in kv_cache": 2}}}
    d = Decision("decides", "f decides the launch", [Stratum({}, True, levels)], p_value=0.03, significant=True)
    said = headline._levels(d)
    assert "mostly" not in said
    assert said == ("0.9 starts (3/3 ready), 0.5 ends as often one way as another (fails: cuda_oom in cuda_graph ×2, "
                    "fails: kv_cache_no_memory in kv_cache ×2; 0/4 ready)")
    levels["0.5"]["outcomes"]["fails: cuda_oom in cuda_graph"] = 3
    levels["0.5"]["valid"] = 5
    assert "0.5 mostly fails (cuda_oom in cuda_graph; 0/5 ready)" in headline._levels(d)


def test_a_flaky_factor_is_not_said_to_have_no_comparison_and_more_repetitions_are_what_settles_it():
    """custom_ar on 2/3 ready against off 3/3: both levels were compared on valid runs; the strength line said "no
    factor was compared on valid runs of both its levels" and asked for "valid runs of every level"."""
    from launchlab.store.verdictrecord import Stratum

    levels = {"on": {"valid": 3, "ready": 2, "outcomes": {"starts": 2, "fails: cuda_graph_failed in cuda_graph": 1}},
              "off": {"valid": 3, "ready": 3, "outcomes": {"starts": 3}}}
    flaky = Decision("flaky", "custom_ar's repetitions disagree at mem_fraction=0.85",
                     [Stratum({"mem_fraction": "0.85"}, None, levels, flaky=["on"])])
    said = headline.of(_empty_verdict(controlled=True, inconclusive_reasons=["custom_ar is flaky"],
                                      undetermined_factors=[], flaky_factors=["custom_ar"],
                                      factors={"custom_ar": flaky}), planned=6)
    assert said.lead.startswith("Inconclusive: custom_ar is flaky")
    assert "no factor was compared" not in said.strength
    assert said.strength == ("no exact test decides: repetitions of the same variant of custom_ar disagree, so such "
                             "a variant has no one outcome to compare")
    assert said.settle == "more repetitions of the variants whose runs disagree would settle whether custom_ar changes " \
                          "the outcome"


def test_where_a_factor_decides_comes_from_its_claim_records_not_from_the_words_of_its_summary():
    from launchlab.store.verdictrecord import Stratum
    from launchlab.verdicts import claims

    levels = {"0.9": {"valid": 3, "ready": 3, "outcomes": {"starts": 3}},
              "0.5": {"valid": 3, "ready": 0, "outcomes": {"fails: kv_cache_no_memory in kv_cache": 3}}}
    strata = [Stratum({"graphs": "off"}, True, levels), Stratum({"graphs": "cuda"}, None, levels)]
    # a summary whose words the headline must not parse (a server's message may hold "decides the launch")
    odd = "f: the log said 'decides the launch at nowhere' — whatever"
    some = Decision("decides_in_some", odd, strata,
                    claims=[{"kind": claims.DECIDES, "strata": ["graphs=off"]}])
    assert headline._says("f", some, "decides_in_some").startswith("f decides whether the launch starts at graphs=off: ")
    every = Decision("decides", odd, strata, claims=[{"kind": claims.DECIDES, "strata": ["graphs=off", "graphs=cuda"]}])
    assert headline._says("f", every, "decides").startswith("f decides whether the launch starts at every level of graphs: ")
    # a verdict of a kit that wrote no claims: read from its summary as before
    old = Decision("decides", "f decides the launch at graphs=off — 0.5 fails", strata)
    assert headline._says("f", old, "decides").startswith("f decides whether the launch starts at graphs=off: ")


def test_a_levels_counts_are_said_per_stratum_as_the_exact_test_compares_them_not_summed():
    """h200-sglang-kv said "0.004 starts (6/6 ready), 0.002 fails (0/6 ready)" over a strength of "p = 0.1, 3 runs a
    side": summed over the two strata where it decides, the counts read as stronger evidence than the test is of."""
    from launchlab.store.verdictrecord import Stratum

    def stratum(held, ready_hi, valid_hi):
        return Stratum(held, True, {"0.9": {"valid": valid_hi, "ready": ready_hi, "outcomes": {"starts": ready_hi}},
                                    "0.5": {"valid": 3, "ready": 0, "outcomes": {"fails: oom in load": 3}}})

    same = Decision("decides", "f decides the launch", [stratum({"g": "a"}, 3, 3), stratum({"g": "b"}, 3, 3)])
    assert headline._levels(same) == "0.9 starts (3/3 ready at each), 0.5 fails (oom in load; 0/3 ready at each)"
    apart = Decision("decides", "f decides the launch", [stratum({"g": "a"}, 3, 3), stratum({"g": "b"}, 2, 2)])
    assert headline._levels(apart) == "0.9 starts (3/3, 2/2 ready), 0.5 fails (oom in load; 0/3 ready at each)"
    run_dir = ROOT / "examples" / "h200-sglang-kv" / "20261203-092613"
    said = headline.of_run_dir(run_dir)
    assert "0.004 starts (3/3 ready at each), 0.002 fails (kv_cache_no_memory in kv_cache; 0/3 ready at each)" in \
        said.lead and "3 runs a side" in said.strength


def test_a_levels_counts_come_from_the_strata_its_claim_names_not_from_one_where_it_only_fails_differently():
    """Decides at y=a (on 3/3 against off 0/3); at y=b both fail, differently. The headline named only y=a but
    counted y=b's failures too: "on ends as often one way as another (…; 3/3, 0/3 ready)"."""
    from launchlab.store.verdictrecord import Stratum
    from launchlab.verdicts import claims

    a = Stratum({"y": "a"}, True, {"on": {"valid": 3, "ready": 3, "outcomes": {"starts": 3}},
                                   "off": {"valid": 3, "ready": 0, "outcomes": {"fails: oom in load": 3}}})
    b = Stratum({"y": "b"}, True, {"on": {"valid": 3, "ready": 0, "outcomes": {"fails: kv in kv_cache": 3}},
                                   "off": {"valid": 3, "ready": 0, "outcomes": {"fails: oom in load": 3}}},
                fails_differently=True)
    d = Decision("decides_in_some", "x decides the launch at y=a", [a, b],
                 claims=[{"kind": claims.DECIDES, "strata": ["y=a"]}, {"kind": claims.CHANGES_HOW, "strata": ["y=b"]}])
    assert headline._says("x", d, "decides_in_some") == (
        "x decides whether the launch starts at y=a: on starts (3/3 ready), off fails (oom in load; 0/3 ready)")


@pytest.mark.slow
def test_a_summary_that_fails_to_render_still_leaves_the_verdict_on_the_terminal(tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(ROOT / "examples" / "h200-vllm-kv" / "20261202-015320", run_dir)
    (run_dir / "summary.html").unlink()
    (run_dir / "summary.html").mkdir()  # the export cannot write it
    proc = subprocess.run([*LAUNCHLAB, "report", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "summary.html was not rendered; the verdict (report.md):\nInconclusive: utilization decides the launch on 3 " \
           "runs per side: observed, not settled" in proc.stderr, proc.stderr[-2000:]
    assert "; utilization decides whether the launch starts at every level of graphs" in proc.stderr
    assert "Strength: not significant at 0.05 (utilization): p = 0.1" in proc.stderr
