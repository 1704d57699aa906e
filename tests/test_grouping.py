"""Per-run sentences said once (verdicts/grouping.py): the same sentence of many runs grouped with the runs counted
and named compactly, in the verdict's prose, the level checks and the confounds."""

import json

import pandas as pd

from conftest import ROOT
from launchlab.store.verdictrecord import Verdict
from launchlab.verdicts import grouping, verdict


def test_runs_are_named_by_their_sequence_numbers_consecutive_ones_as_a_range():
    runs = ["07_b_rep2", "01_a_rep1", "02_b_rep1", "03_a_rep2", "05_a_rep3", "08_a_rep3"]
    assert grouping.runs_named(runs) == "01–03, 05, 07, 08"


def test_runs_without_a_sequence_number_are_named_whole():
    assert grouping.runs_named(["import-a", "01_b"]) == "import-a, 01_b"


def test_the_same_sentence_of_several_runs_is_said_once_with_its_runs_counted_the_others_as_they_were():
    said = [f"x=on: not used: one GPU in run {n:02d}_x-on_rep1" for n in (1, 2, 3, 5)]
    said.insert(2, "x=off: failed in its own code in run 04_x-off_rep1")
    said.append("a note of no run")
    found = grouping.grouped(said)
    assert found == ["4 runs (01–03, 05): x=on: not used: one GPU",
                     "x=off: failed in its own code in run 04_x-off_rep1", "a note of no run"]


def test_the_sglang_kv_examples_level_that_did_not_take_effect_is_one_sentence_with_its_runs_counted():
    path = next((ROOT / "examples" / "h200-sglang-kv").glob("2*/verdict.json"))
    v = Verdict.from_json(json.loads(path.read_text()))
    contradicted = [r for c in v.level_checks for r in c.runs_contradicted]
    assert len(contradicted) > 2, "the example's level checks changed: nothing to group"
    text = verdict.markdown(v, pd.DataFrame(v.budget))
    [line] = [x for x in text.split("\n\n") if x.startswith("**A level did not take effect:**")]
    assert f"{len(contradicted)} runs (" in line
    assert line.count("one GPU") == 1
    assert not any(r in line for r in contradicted)  # named by their numbers, not their whole ids


def test_a_sentence_that_holds_the_separator_stays_whole_and_is_grouped_whole():
    """A server's message quoted in a per-run sentence may hold "; " itself: split there, its first half was said
    as is once per run and its second half grouped apart ("x: failed; x: failed; 2 runs (01, 02): see the log")."""
    text = "custom_ar=on: failed; see the log in run 01_a; custom_ar=on: failed; see the log in run 02_b"
    assert grouping.sentences(text) == ["custom_ar=on: failed; see the log in run 01_a",
                                        "custom_ar=on: failed; see the log in run 02_b"]
    assert grouping.detail(text) == "2 runs (01, 02): custom_ar=on: failed; see the log"
    # a closing piece of no run stays a sentence of its own
    assert grouping.sentences("a in run 01_x; b in run 02_y; the rest") == ["a in run 01_x", "b in run 02_y", "the rest"]
