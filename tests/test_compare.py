"""`launchlab compare RUN_A RUN_B`: two run directories before and after, from real batches on the simulated host
(the demo twice, the second with another SGLang version in its log and more weights per rank; a threshold search
twice), from real imports of the demo's logs, and through the summary notebook's `compare_with` (real papermill).
The batches are kept small (`--only`, `--repetitions`, `--no-html`, a fast pace)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import LAUNCHLAB, ROOT, processes_using
from launchlab import params
from launchlab.reporting import export, reportmd
from launchlab.runner import importer
from launchlab.store import rundir
from launchlab.verdicts import compare, comparesentences, frames

DEMO = ROOT / "params" / "demo.yaml"
LOGS = ROOT / "params" / "demo-import" / "logs"
VERSION_LINE = "server version (from the server log)"


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHLAB, *args], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)


def demo_copy(folder: Path, weights: str) -> Path:
    """params/demo.yaml at a fast pace, with `weights` GiB of weights per rank."""
    text = DEMO.read_text()
    old, pace = "weights_gib_per_rank: 70.0", "pace: 0.5 "
    assert old in text and pace in text
    path = folder / f"demo-{weights}.yaml"
    path.write_text(text.replace(old, f"weights_gib_per_rank: {weights}").replace(pace, "pace: 0.05 "))
    return path


def run_batch(path: Path, env: dict, *extra: str) -> Path:
    proc = cli("run", str(path), "--no-html", *extra, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def compared_demo(tmp_path_factory):
    """The demo (custom_ar off, both fractions, 2 repetitions) with 66 GiB of weights per rank before; after, the
    same with SGLang 0.5.9 in its log (the simulated server's SIM_SGLANG_VERSION) and the demo's 70 GiB (its
    break-even, 0.748, still below both fractions: every run starts on both sides); then
    `launchlab compare` of the two."""
    base = tmp_path_factory.mktemp("compare-demo")
    env = {**os.environ, "LAUNCHLAB_SIM_ROOT": str(base / "sim"), "LAUNCHLAB_OUTPUTS": str(base / "outputs")}
    subset = ("--repetitions", "2", "--only", "custom_ar=off")
    before = run_batch(demo_copy(base, "66.0"), env, *subset)
    after = run_batch(demo_copy(base, "70.0"), {**env, "SIM_SGLANG_VERSION": "0.5.9"}, *subset)
    proc = cli("compare", str(before), str(after))
    assert processes_using(str(base / "sim")) == []
    return before, after, proc


def folder_of(before: Path, after: Path) -> Path:
    """Where `launchlab compare BEFORE AFTER` writes without --out (its last line of output names it, shown as a
    terminal shows it: an escape in a folder's name as `\\x1b`)."""
    return after / "compare" / f"{before.parent.name}-{before.name}"


def record_of(before: Path, after: Path) -> dict:
    return json.loads((folder_of(before, after) / "compare.json").read_text())


@pytest.mark.slow
def test_the_demo_against_a_new_version_with_heavier_weights_names_the_versions_and_says_outcomes_are_unchanged(
        compared_demo):
    before, after, proc = compared_demo
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Same question: the same factors and levels (custom_ar: off, on; mem_fraction: 0.75, 0.85)." in out
    assert f"{VERSION_LINE} differs: 0.5.8: all 4 runs before; 0.5.9: all 4 runs after" in out
    assert "Outcomes unchanged: every variant (2) has the same share of ready runs before and after." in out
    assert "params hosts.box.weights_gib_per_rank differs: 66.0 before, 70.0 after" in out
    record = record_of(before, after)
    assert record["comparable"] is True and record["outcomes_unchanged"] is True
    assert [(o["variant"], o["changed"], o["p_value"]) for o in record["outcomes"]] == [
        ("custom_ar=off, mem_fraction=0.75", False, 1.0), ("custom_ar=off, mem_fraction=0.85", False, 1.0)]
    [version] = [d for d in record["differences"] if d["what"] == VERSION_LINE]
    assert version["kind"] == "log" and version["within"] == [] and version["before_runs"] == []
    assert sorted(version["after_runs"]) == sorted(rundir.RunDir(after).manifest().run_ids)


@pytest.mark.slow
def test_the_break_even_moves_up_with_heavier_weights_as_each_side_s_own_verdict_has_it(compared_demo):
    before, after, proc = compared_demo
    record = record_of(before, after)
    assert record["break_even"]["arg"] == "mem_fraction_static"
    own = [{b["variant"]: b["break_even_fraction"] for b in json.loads((d / "verdict.json").read_text())["budget"]}
           for d in (before, after)]
    shifts = [s for s in record["shifts"] if s["metric"] == "break_even_fraction"]
    assert len(shifts) == 2
    for s in shifts:
        assert s["before_mean"] == pytest.approx(own[0][s["variant"]]) and s["after_mean"] == pytest.approx(own[1][s["variant"]])
        assert s["diff"] > 0.03 and s["before_n"] == s["after_n"] == 2
    assert "Break-even mem_fraction_static (1 − avail/total) moved up in every variant" in proc.stdout
    # every run stood ready on both sides: their sampled peaks are compared (test_sampled_peak has the rule)
    peaks = [s for s in record["shifts"] if s["metric"] == "peak_mem_used_mib"]
    assert peaks and all(s["diff"] is not None and s["not_compared"] == "" and s["left_out"] == [] for s in peaks)
    kv = [s for s in record["shifts"] if s["metric"] == "kv_tokens"]  # both variants start, each with a KV cache
    assert {s["variant"] for s in kv} == {"custom_ar=off, mem_fraction=0.75", "custom_ar=off, mem_fraction=0.85"}
    assert all(s["diff"] < 0 for s in kv)
    assert "KV capacity (tokens) moved down in every variant" in proc.stdout


@pytest.mark.slow
def test_compare_html_is_the_report_s_offline_page_next_to_compare_json_in_the_after_run_directory(compared_demo):
    before, after, proc = compared_demo
    folder = Path(proc.stdout.strip().splitlines()[-1])
    assert folder == folder_of(before, after)
    html = (folder / "compare.html").read_text()
    assert export.remote_references(html) == []
    assert "Outcomes unchanged:" in html and "What differs outside the factors" in html and "<table" in html
    assert "jp-RenderedHTMLCommon" in html  # the summary's template and style


@pytest.mark.slow
def test_the_summary_notebook_shows_the_comparison_when_given_a_second_run_directory(compared_demo, tmp_path):
    from launchlab.runner import notebooks

    before, after, _ = compared_demo
    notebooks.execute("summary.ipynb", tmp_path / "summary.ipynb", {"run_dir": str(after), "compare_with": str(before)})
    shown = json.dumps(json.loads((tmp_path / "summary.ipynb").read_text())["cells"])
    assert "Before and after" in shown and "Outcomes unchanged" in shown and "0.5.9: all 4 runs after" in shown
    notebooks.execute("summary.ipynb", tmp_path / "alone.ipynb", {"run_dir": str(after)})
    assert "Before and after" not in json.dumps(json.loads((tmp_path / "alone.ipynb").read_text())["cells"])


# --- imported run directories --------------------------------------------------------------------------------------

IMPORTS = {"experiment": "by-hand", "server": {"kind": "sglang"},
           "factors": {"custom_ar": {"off": {"flags": {"--disable-custom-all-reduce": True}}, "on": {}},
                       "mem_fraction": {"0.55": {"flags": {"--mem-fraction-static": "0.55"}},
                                        "0.85": {"flags": {"--mem-fraction-static": "0.85"}}}},
           "baseline": {"custom_ar": "off", "mem_fraction": "0.55"}}
LEVELS = {"baseline_debug_nocar.log": {"custom_ar": "off", "mem_fraction": "0.55"},
          "custom_ar_debug.log": {"custom_ar": "on", "mem_fraction": "0.55"},
          "nocar_085.log": {"custom_ar": "off", "mem_fraction": "0.85"},
          "car_085.log": {"custom_ar": "on", "mem_fraction": "0.85"}}
ESCAPED_ROOT = "out\x1b]0;owned\x07"  # a folder name a terminal would obey


def imported(folder: Path, logs: dict[str, dict], out: Path, **changes) -> Path:
    """An imports file of the demo's logs, imported, with its frames and verdict written (as `launchlab import`
    does before the summary)."""
    path = folder / f"{len(list(folder.glob('*.yaml')))}.yaml"
    runs = [{"levels": levels, "log": str(LOGS / name)} for name, levels in logs.items()]
    path.write_text(yaml.safe_dump({**IMPORTS, **changes, "runs": runs}, sort_keys=False))
    run_dir = importer.import_runs(path, out, summarize=False)
    frames.write(run_dir, frames.build(run_dir, params.load(rundir.RunDir(run_dir).experiment_file)))
    reportmd.write_verdict(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def imported_pair(tmp_path_factory):
    """Before: the demo's four consistent logs. After: the same, but the off/0.85 run is the old install's log (SGLang
    0.5.6, NCCL 2.21.5, cuda_graph_max_bs 256), under a folder whose name holds a terminal escape, and a question
    that holds markup. Other: one factor only (another question)."""
    base = tmp_path_factory.mktemp("compare-import")
    before = imported(base, LEVELS, base / "out")
    newer = {("old_baseline_that_worked.log" if n == "nocar_085.log" else n): lv for n, lv in LEVELS.items()}
    after = imported(base, newer, base / ESCAPED_ROOT, question="<script>alert(1)</script> what changed?")
    other = imported(base, {"nocar_085.log": {"mem_fraction": "0.85"}, "baseline_debug_nocar.log": {"mem_fraction": "0.55"}},
                     base / "out", experiment="fraction-only",
                     factors={"mem_fraction": IMPORTS["factors"]["mem_fraction"]}, baseline={"mem_fraction": "0.55"})
    return before, after, other


@pytest.mark.slow
def test_two_imported_run_directories_name_the_old_install_of_one_run_and_unchanged_outcomes(imported_pair):
    before, after, _ = imported_pair
    proc = cli("compare", str(before), str(after))
    assert proc.returncode == 0, proc.stderr
    record = record_of(before, after)
    assert record["comparable"] is True and record["outcomes_unchanged"] is True
    assert record["before"]["imported"] and record["after"]["imported"]
    by_what = {d["what"]: d for d in record["differences"]}
    old = "03_custom_ar-off.mem_fraction-0.85_imported1"
    version = by_what[VERSION_LINE]
    assert version["detail"].startswith(f"{VERSION_LINE} differs: 0.5.8: all 4 runs before, after:01_")
    assert version["detail"].endswith(f"; 0.5.6: after:{old}") and version["after_runs"] == [old]
    assert version["within"] == ["after"]  # the after batch is not controlled by itself either
    assert by_what["NCCL version (from the server log)"]["after_runs"] == [old]
    # one run per level in the after batch alone: cuda_graph_max_bs follows its levels there; over both batches the
    # same level ran with 128 and with 256, so it is a difference, not derived
    graph = by_what["undeclared server argument cuda_graph_max_bs"]
    assert "128: all 4 runs before" in graph["detail"] and f"256: after:{old}" in graph["detail"]
    assert "Outcomes unchanged" in proc.stdout
    assert any("after is not a controlled comparison by itself" in w for w in record["warnings"])


@pytest.mark.slow
def test_what_the_logs_and_the_params_hold_is_escaped_in_the_terminal_and_in_compare_html(imported_pair):
    before, after, _ = imported_pair
    proc = cli("compare", str(before), str(after))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "\\x1b]0;owned\\x07" in proc.stdout  # the folder's name, shown
    assert "the question's text differs" in proc.stdout
    html = (folder_of(before, after) / "compare.html").read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "\x1b" not in html


@pytest.mark.slow
def test_two_run_directories_of_another_question_are_not_compared_and_it_says_why(imported_pair):
    before, _, other = imported_pair
    proc = cli("compare", str(before), str(other))
    assert proc.returncode == 1, proc.stderr
    # the refusal is the last thing said: no "the question is the same" after it, no differences, no folder
    assert proc.stdout.rstrip().endswith("Not the same question — the comparison cannot be made: factor custom_ar "
                                         "only before. Nothing is compared; run both with the same factors and levels.")
    assert "the question is the same" not in proc.stdout and "Differs outside" not in proc.stdout
    assert "comparable: false" in proc.stderr and "Traceback" not in proc.stderr
    record = record_of(before, other)
    assert record["comparable"] is False and record["question"]["differences"] == ["factor custom_ar only before"]
    assert record["outcomes"] == [] and record["shifts"] == [] and record["outcomes_unchanged"] is None
    assert "Outcomes" not in proc.stdout


@pytest.mark.slow
def test_a_missing_a_foreign_and_an_unfinished_run_directory_are_kit_errors_that_say_what_to_do(imported_pair, tmp_path):
    before, after, _ = imported_pair
    missing = cli("compare", str(tmp_path / "nowhere"), str(after))
    assert missing.returncode == 1 and "before" in missing.stderr and "no such folder" in missing.stderr
    foreign = cli("compare", str(before), str(tmp_path))
    assert foreign.returncode == 1 and "after: " in foreign.stderr and "not a launchlab run directory" in foreign.stderr
    unfinished = tmp_path / "unfinished"
    shutil.copytree(before, unfinished)
    first = rundir.RunDir(unfinished).manifest().run_ids[0]
    rundir.RunDir(unfinished).run(first).status.unlink()
    proc = cli("compare", str(unfinished), str(after))
    assert proc.returncode == 1 and "is incomplete: 1 of 4 planned runs have not finished" in proc.stderr
    assert "--resume" in proc.stderr and "Traceback" not in proc.stderr + missing.stderr + foreign.stderr
    for run_dir in (unfinished, tmp_path):
        assert not (Path(run_dir) / "compare").exists()


# --- threshold searches -------------------------------------------------------------------------------------------

SEARCH = """\
experiment: compare-search
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: {weights}, pace: 0.05}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  custom_ar:
    "off": {{flags: {{--disable-custom-all-reduce: true}}}}
baseline: {{custom_ar: "off"}}
search: {{flag: --mem-fraction-static, low: "0.70", high: "0.90", resolution: "0.05", outcome: ready, repetitions: 1}}
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


@pytest.fixture(scope="module")
def compared_search(tmp_path_factory):
    """A short search of --mem-fraction-static (break-even 0.748 with 70 GiB of weights), then the same with 74
    GiB (0.791): at most four probes each."""
    base = tmp_path_factory.mktemp("compare-search")
    env = {**os.environ, "LAUNCHLAB_SIM_ROOT": str(base / "sim"), "LAUNCHLAB_OUTPUTS": str(base / "outputs")}
    dirs = []
    for weights in ("70.0", "74.0"):
        path = base / f"search-{weights}.yaml"
        path.write_text(SEARCH.format(weights=weights))
        dirs.append(run_batch(path, env))
    assert processes_using(str(base / "sim")) == []
    return dirs


@pytest.mark.slow
def test_the_thresholds_of_two_searches_are_compared_and_the_heavier_weights_move_it_up(compared_search):
    before, after = compared_search
    proc = cli("compare", str(before), str(after))
    assert proc.returncode == 0, proc.stderr
    record = record_of(before, after)
    [stratum] = record["thresholds"]
    own = [json.loads((d / "verdict.json").read_text())["thresholds"]["strata"][0] for d in (before, after)]
    assert stratum["before_interval"] == [own[0]["interval_low"], own[0]["interval_high"]]
    assert stratum["after_interval"] == [own[1]["interval_low"], own[1]["interval_high"]]
    assert stratum["after_interval"][0] >= stratum["before_interval"][1]  # the two intervals are apart
    assert "the minimum --mem-fraction-static that starts moved up" in stratum["summary"]
    assert stratum["summary"] in proc.stdout
    assert stratum["after_predicted"] > stratum["before_predicted"]


# --- the interval ------------------------------------------------------------------------------------------------

def test_the_interval_of_a_change_is_welch_s_for_after_minus_before():
    from scipy.stats import t

    before, after = [10.0, 12.0, 11.0], [14.0, 19.0, 15.0, 16.0]
    mean_a, mean_b = sum(before) / 3, sum(after) / 4
    var_a = sum((x - mean_a) ** 2 for x in before) / 2 / 3
    var_b = sum((x - mean_b) ** 2 for x in after) / 3 / 4
    dof = (var_a + var_b) ** 2 / (var_a ** 2 / 2 + var_b ** 2 / 3)  # Welch–Satterthwaite
    half = t.ppf(0.975, dof) * (var_a + var_b) ** 0.5
    low, high, how = compare.welch(before, after)
    assert how == "welch"
    assert low == pytest.approx(mean_b - mean_a - half) and high == pytest.approx(mean_b - mean_a + half)
    assert compare.welch([5.0, 5.0], [7.0, 7.0]) == (2.0, 2.0, "no spread")
    assert compare.welch([5.0], [7.0, 8.0]) == (None, None, "none")


# --- what is not a difference ------------------------------------------------------------------------------------

def test_make_s_variables_and_the_environment_s_own_bin_folder_on_path_are_no_difference_and_unset_reads_unset():
    """`make demo` (make's MAKEFLAGS, MAKELEVEL, MFLAGS; .venv/bin/launchlab) against `launchlab run` from a shell
    with the environment's bin/ on PATH: the rule confounds.env_differences has for one run directory's verdict is
    the one a comparison of two runs uses (confounds.PROVENANCE_CHECKS), and finds nothing; a variable a server
    reads, set in one run only, is shown as written, and "unset" where it is not set."""
    from launchlab.verdicts import confounds

    venv = "/home/u/launchlab/.venv"
    interpreter = {"python": "3.11.9", "prefix": venv, "executable": f"{venv}/bin/python3"}
    by_make = {"host_env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "MAKEFLAGS": "", "MAKELEVEL": "1", "MFLAGS": "",
                            "HOME": "/home/u"}, "interpreter": interpreter}
    by_shell = {"host_env": {"PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": "/home/u"},
                "interpreter": interpreter}
    activated = {"host_env": {"PATH": f"/usr/local/bin:{venv}/bin/:/usr/bin:/bin", "VIRTUAL_ENV": venv,
                              "VIRTUAL_ENV_PROMPT": "(.venv) ", "HOME": "/home/u"}}
    facts = {"before:r1": by_make, "after:r1": by_shell, "after:r2": activated}
    assert confounds.env_differences(list(facts), facts) == []
    assert confounds.env_differences in confounds.PROVENANCE_CHECKS
    other_bin = {**by_shell, "host_env": {**by_shell["host_env"], "PATH": "/opt/other/bin:/usr/local/bin:/usr/bin:/bin"}}
    [path] = confounds.env_differences(["before:r1", "after:r1"], {"before:r1": by_make, "after:r1": other_bin})
    assert "PATH" in path["detail"], "another folder in front of PATH is still a difference"
    nccl = {**by_shell, "host_env": {**by_shell["host_env"], "NCCL_P2P_DISABLE": "1"}}
    [found] = confounds.env_differences(["before:r1", "after:r1"], {"before:r1": by_make, "after:r1": nccl})
    assert found["detail"] == ("undeclared environment variable NCCL_P2P_DISABLE differs between runs: unset: "
                               "before:r1; 1: after:r1")
    assert "None" not in found["detail"] and "'" not in found["detail"]


def test_a_search_list_that_differs_only_in_repeated_entries_is_no_difference():
    """The H100 diagnose example (2026-12-05): the call that started the batch ran through a script that put its
    `patch` folder on PATH twice, the call that resumed it once — every command resolves the same, and the verdict
    called the fraction confounded. A repeat after an entry's first occurrence is never reached; an entry moved to
    the front, or another one, still is a difference."""
    from launchlab.verdicts import confounds

    base = "/usr/local/bin:/usr/bin:/tmp/t/debroot/usr/bin"
    first = {"host_env": {"PATH": base + ":/tmp/t/debroot/usr/bin", "PYTHONPATH": "/tmp/t/site:/w/lib:/tmp/t/site"}}
    resumed = {"host_env": {"PATH": base, "PYTHONPATH": "/tmp/t/site:/w/lib"}}
    assert confounds.env_differences(["a", "b"], {"a": first, "b": resumed}) == []
    moved = {"host_env": {"PATH": "/tmp/t/debroot/usr/bin:/usr/local/bin:/usr/bin", "PYTHONPATH": "/tmp/t/site:/w/lib"}}
    [found] = confounds.env_differences(["a", "b"], {"a": first, "b": moved})
    assert "PATH" in found["detail"], "the same folders searched in another order can find other files"
    assert confounds.without_repeats("a::b:a:") == "a::b"


def test_a_change_of_what_decides_is_said_in_words_not_verdict_json_s_values():
    """Issue 49: the prose said `decides_in_some before, decides after`."""
    from types import SimpleNamespace

    from launchlab.store.comparerecord import DecisionChange
    from launchlab.store.verdictrecord import STATUSES

    record = SimpleNamespace(decisions=[DecisionChange("mem_fraction", "decides_in_some", "decides", True),
                                        DecisionChange("custom_ar", "neutral", None, True)])
    [line] = comparesentences._decisions_sentence(record)
    assert line == ("What decides the launch changed: mem_fraction decides it at some levels of the other factors, "
                    "not all before and decides it after; custom_ar changes nothing before and was no factor after.")
    said = [comparesentences._decisions_sentence(SimpleNamespace(decisions=[DecisionChange("f", s, None, True)]))[0]
            for s in STATUSES]
    assert len(set(said)) == len(STATUSES) and not [s for s in said if "_" in s], said  # none raw, each its own


def test_peak_memory_of_a_launch_that_failed_is_never_compared_with_one_that_stood_ready(tmp_path):
    """The shipped before/after pair (the same SGLang search on an H200, then on an H100): at
    --mem-fraction-static 0.004 the H200's probe started (peak 1.34 GiB) and the H100's failed at KV sizing (1.01 GiB
    when the sampler looked). The kit before said "-0.3281" GiB after − before: a failed launch's sampled peak is a
    lower bound, no measure of what the level costs (records.STOOD_READY, as effects and the manipulation check)."""
    from launchlab.reporting import compare as loading
    from launchlab.reporting import comparetext

    pair = [shutil.copytree(ROOT / "examples" / name, tmp_path / name.split("/")[0]) for name in
            ("h200-sglang-threshold/20261203-093428", "h100-sglang-threshold/20261207-101000")]
    before, after = loading.load_side(pair[0], "before"), loading.load_side(pair[1], "after")
    shifts = {(s.variant, s.metric): s for s in compare.metric_shifts(before, after)}
    peak = shifts[("graphs=off, mem_fraction_static=0.004", "peak_mem_used_mib")]
    assert (peak.before_n, peak.after_n) == (1, 0) and peak.diff is None and peak.ci_low is None
    assert peak.not_compared.startswith("no run after stood ready (after:01_graphs-off.mem_fraction_static-0.004_rep1 "
                                        "(failed)): a failed launch's sampled peak"), peak.not_compared
    assert peak.left_out == ["after:01_graphs-off.mem_fraction_static-0.004_rep1 (failed)"]
    rows = comparetext.shift_rows(compare.compare(before, after))
    said = rows.loc[rows["metric"] == "peak_mem_used_gib", "interval"].tolist()
    assert said == ["not compared: " + peak.not_compared], said
    assert not [s for s in shifts.values() if s.metric == "peak_mem_used_mib" and s.diff is not None], \
        "a peak of one phase compared with another's"


def test_a_shift_over_the_runs_that_stood_ready_names_the_runs_it_left_out():
    from types import SimpleNamespace

    from launchlab.reporting import comparetext

    s = compare.shift("v", "peak_mem_used_mib", "MiB", before=[71_680.0, 71_680.0], after=[61_440.0] * 3,
                      left_out=["before:03_v_rep3 (failed)"])
    assert s.diff == -10_240.0 and s.not_compared == ""
    [said] = comparetext.shift_rows(SimpleNamespace(shifts=[s]))["interval"]
    assert said.endswith("; runs not ready left out: before:03_v_rep3 (failed)"), said
