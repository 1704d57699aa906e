"""The `search:` block of a params file: what it accepts, what it refuses (with the field, its line and what to
do), and the most runs a search can take, which `launchlab validate` prints before anything runs."""

import subprocess

import pytest

from conftest import LAUNCHLAB, ROOT
from launchlab import params
from launchlab.errors import ParamsError
from launchlab.runner.plan import make_plan

DEMO = (ROOT / "params" / "demo-threshold.yaml").read_text()


def problems_of(text: str) -> list[str]:
    with pytest.raises(ParamsError) as info:
        params.loads(text, "exp.yaml")
    return info.value.problems


def with_search(**fields: str) -> str:
    block = "search:\n" + "".join(f"  {k}: {v}\n" for k, v in fields.items())
    return DEMO[: DEMO.index("search:\n")] + block + "drain: {timeout_s: 30, tolerance_mib: 64}\n"


BASE = {"flag": "--mem-fraction-static", "low": '"0.50"', "high": '"0.95"', "resolution": '"0.005"'}


def test_the_demo_search_validates_and_its_size_is_strata_times_probes_times_repetitions():
    exp = params.loads(DEMO, "demo-threshold.yaml")
    assert exp.search.flag == "--mem-fraction-static" and exp.search.factor == "mem_fraction_static"
    size = params.plan_size(exp)
    # guided: bisection's 9, and the guided pair off its path where the prediction fails (tests/test_search_bound.py)
    assert (size.variants, size.probes, size.repetitions, size.runs) == (2, 11, 1, 22)


def test_the_first_round_of_the_plan_probes_both_ends_of_every_stratum_with_the_flag_set():
    exp = params.loads(with_search(**BASE, repetitions="2"), "exp.yaml")
    plan = make_plan(exp)
    assert [r.run_id for r in plan] == [
        "01_custom_ar-off.mem_fraction_static-0.50_rep1", "02_custom_ar-off.mem_fraction_static-0.95_rep1",
        "03_custom_ar-on.mem_fraction_static-0.50_rep1", "04_custom_ar-on.mem_fraction_static-0.95_rep1",
        "05_custom_ar-off.mem_fraction_static-0.50_rep2", "06_custom_ar-off.mem_fraction_static-0.95_rep2",
        "07_custom_ar-on.mem_fraction_static-0.50_rep2", "08_custom_ar-on.mem_fraction_static-0.95_rep2"]
    argv = params.render(exp, plan[3].variant, port=1, run_id="x", host="box").argv
    assert argv[-2:] == ("--mem-fraction-static", "0.95") and "--disable-custom-all-reduce" not in argv
    assert plan[0].probe.why.startswith("the low end of the range")


@pytest.mark.parametrize("change,line,expected", [
    ({"low": '"abc"'}, "search.low", "is not a plain decimal number; the searched flag must be numeric"),
    ({"high": '"1e3"'}, "search.high", "is not a plain decimal number"),
    ({"low": '"0.95"', "high": '"0.50"'}, "search", "low (0.95) must be below high (0.50)"),
    ({"low": '"0.50"', "high": '"0.50"'}, "search", "low (0.50) must be below high (0.50)"),
    ({"resolution": '"0"'}, "search", "resolution (0) must be above 0"),
    ({"resolution": '"-0.1"'}, "search", "resolution (-0.1) must be above 0"),
    ({"resolution": '"0.5"'}, "search", "must be smaller than high − low"),
    ({"flag": "mem"}, "search.flag", "must be a long flag of the server command"),
    ({"outcome": "failed"}, "search.outcome", "ready"),
    ({"low": "0.5"}, "search.low", "must be a quoted string"),
])
def test_a_search_block_that_cannot_be_searched_is_refused_with_its_line(change, line, expected):
    problems = problems_of(with_search(**{**BASE, **change}))
    assert len(problems) == 1, problems
    assert line in problems[0] and expected in problems[0]
    assert problems[0].startswith("line ")


def test_the_searched_flag_set_by_a_factor_level_is_refused_there():
    text = with_search(**BASE).replace('"on": {}', '"on": {flags: {--mem-fraction-static: "0.80"}}')
    [problem] = problems_of(text)
    assert "factors.custom_ar.on.flags.--mem-fraction-static" in problem and "remove it from this level" in problem


def test_a_searched_flag_the_command_sets_to_a_non_number_is_refused():
    text = with_search(**BASE).replace('"128"]', '"128", --mem-fraction-static, auto]')
    [problem] = problems_of(text)
    assert "server.command" in problem and "'auto', which is not a number" in problem


def test_top_level_repetitions_with_a_search_point_to_search_repetitions():
    [problem] = problems_of(with_search(**BASE).replace("baseline:", "repetitions: 3\nbaseline:"))
    assert "repetitions" in problem and "search.repetitions" in problem


def test_a_search_larger_than_the_run_limit_is_refused_before_it_starts():
    [problem] = problems_of(with_search(**{**BASE, "resolution": '"0.0000000000000000001"'}, repetitions="100"))
    assert "search" in problem and "more than the limit of 10,000" in problem


@pytest.mark.slow
def test_validate_prints_the_most_runs_the_search_can_take():
    res = subprocess.run([*LAUNCHLAB, "validate", str(ROOT / "params/demo-threshold.yaml")], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "threshold search over --mem-fraction-static from 0.50 to 0.95 (resolution 0.005) in 2 strata" in res.stdout
    assert "at most 11 probes × 1 repetition(s) per stratum = at most 22 runs" in res.stdout


@pytest.mark.slow
def test_only_and_repetitions_are_refused_for_a_search_with_why(tmp_path):
    res = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(ROOT / "params/demo-threshold.yaml"), "--dry-run", "--only", "on"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "do not apply to a threshold search" in res.stderr


@pytest.mark.slow
def test_a_dry_run_shows_the_first_round_and_the_most_runs():
    res = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(ROOT / "params/demo-threshold.yaml"), "--dry-run"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "threshold search over --mem-fraction-static, its first round of 4 runs" in res.stdout
    assert "at most 22 runs in all" in res.stdout
    assert "--disable-custom-all-reduce --mem-fraction-static 0.50" in res.stdout
