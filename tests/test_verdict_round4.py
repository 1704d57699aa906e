"""Issue 47: verdict truth, round 4 — scenarios whose truth is known by construction, each a test named as a sentence
of that truth. They fail on the kit before the verdict's redesign (a per-run evidence ledger and claims); each
docstring quotes what that kit said.

Most are imports (`launchlab import` of constructed logs in SGLang 0.5.8's format, tests/fixtures/verdict-round4/,
whose README says what each log is and the truth it was built for; class 2 imports real SGLang 0.5.17 logs of
examples/h200-sglang-kv). Those that need a live server are batches on the simulated host with a fault of the
simulated server (SIM_FAULT_COMPILE_S, SIM_FAULT_REQUEST_OOM_DIES) or a fault planted by a wrapper around it
(SIM_FAULT_P2P_CHECK_FAILS in one run only).

Where the truth needs a status or field the verdict does not have yet, the assertion is written against the natural
design and marked `# NEW:` (the name is a proposal to align with the redesign, not a decision).

Figures by construction (tests/fixtures/verdict-round4/make_logs.py, the simulated server's arithmetic): free memory
before the weights 93.540 GiB (custom all-reduce off) / 92.915 GiB (on: its 640 MiB of buffers), 70 GiB of weights, so
SGLang's break-even 1 − avail/total is 0.7483 off and 0.7534 on (from the printed 92.92 / 22.92 GB).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import LAUNCHLAB, ROOT, write_params
from launchlab import params
from launchlab.reporting import reportmd
from launchlab.runner import importer
from launchlab.store import rundir
from launchlab.store.verdictrecord import Verdict
from launchlab.verdicts import frames

FIXTURES = ROOT / "tests" / "fixtures" / "verdict-round4"
CUSTOM_AR = {"off": {"flags": {"--disable-custom-all-reduce": True}}, "on": {}}
BREAK_EVEN_OFF = 1 - 23.54 / 93.54  # 0.74834: custom all-reduce off (the log's "Load weight begin/end" figures)
BREAK_EVEN_ON = 1 - 22.92 / 92.92  # 0.75334: on, its buffers taken before the weights


def fractions(*values: str) -> dict:
    return {v: {"flags": {"--mem-fraction-static": v}} for v in values}


class Imported:
    """A run directory made by `launchlab import` (frames, verdict.json and report.md, no HTML), read back."""

    def __init__(self, folder: Path, body: dict):
        path = folder / "imports.yaml"
        path.write_text(yaml.safe_dump(body, sort_keys=False))
        self.run_dir = importer.import_runs(path, folder / "out", summarize=False)
        directory = rundir.RunDir(self.run_dir)
        frames.write(self.run_dir, frames.build(self.run_dir, params.load(directory.experiment_file)))
        reportmd.write_verdict(self.run_dir)
        self.verdict = json.loads(directory.verdict_file.read_text())
        self.report = directory.report_md.read_text()
        # each imported log's file name → its run id (the importer numbers runs as listed)
        self.ids = {Path(entry["log"]).name: run_id for entry, run_id in zip(body["runs"], directory.manifest().run_ids,
                                                                           strict=True)}

    def factor(self, name: str) -> dict:
        return self.verdict["factors"][name]

    def stratum(self, factor: str, **held: str) -> dict:
        [found] = [s for s in self.factor(factor)["strata"] if s["held"] == held]
        return found

    def check(self, factor: str, level: str, check: str) -> dict:
        [found] = [c for c in self.verdict["level_checks"]
                   if (c["factor"], c["level"], c["check"]) == (factor, level, check)]
        return found

    def budget(self, variant: str) -> dict:
        [row] = [b for b in self.verdict["budget"] if b["variant"] == variant]
        return row

    def prose(self) -> list[str]:
        """The verdict's paragraphs in report.md: its `## Verdict` section (after the headline and the outcomes)."""
        section = self.report.split("\n## Verdict\n", 1)[1].split("\n## ", 1)[0]
        paragraphs = [p.strip() for p in section.split("\n\n")]
        return [p for p in paragraphs if p and not p.startswith(("Question:", "> "))]


def grid(folder: str, factor_names: tuple[str, ...], parse) -> list[dict]:
    """The imports entries of a fixture folder's logs, repetition by repetition (the order a batch interleaves)."""
    logs = sorted((FIXTURES / folder).glob("*.log"), key=lambda p: (p.stem.rsplit("_rep", 1)[-1], p.stem))
    entries = []
    for log in logs:
        entry = {"levels": dict(zip(factor_names, parse(log.stem), strict=True)), "log": str(log)}
        if (smi := log.with_name(f"{log.stem}-smi.csv")).exists():
            entry["smi"] = str(smi)
        entries.append(entry)
    return entries


def car_fraction(stem: str) -> tuple[str, str]:
    """`car-on_f0.75_rep1` → (on, 0.75)."""
    car, fraction, _ = stem.split("_")
    return car.removeprefix("car-"), fraction.removeprefix("f")


def fraction_only(stem: str) -> tuple[str]:
    """`f0.85_rep1` → (0.85,)."""
    return (stem.split("_")[0].removeprefix("f"),)


def car_only(stem: str) -> tuple[str]:
    """`car-on_rep1` → (on,)."""
    return (stem.split("_")[0].removeprefix("car-"),)


# ---------------------------------------------------------------------------------------------------------
# 1. Instrumentation contradicts the outcome


def test_a_debug_line_that_says_no_kv_cache_fits_in_runs_that_allocated_one_is_wrong_and_custom_ar_costs_memory(tmp_path):
    """Custom all-reduce off/on × --mem-fraction-static 0.75/0.76 on 8 GPUs, 2 repetitions, each run with a DEBUG
    profile_max_num_token line whose `total` is the card's capacity (95.593 GiB) and whose `avail` (3.498 GiB) is no
    figure SGLang sized with: rest = −20.400 GiB at 0.75 and −19.444 GiB at 0.76, "no KV cache fits" — while the
    same logs' own "Load weight begin/end" figures give rest = +0.155 GiB (off, 0.75), and the server allocated its
    pool ("KV Cache is allocated. #tokens: 2368"). Custom AR on fails at 0.75 (Not enough memory: rest −0.31 GiB):
    its 640 MiB of buffers move the break-even from 0.748 to 0.753. Where both levels allocated a pool (0.76), custom
    AR on peaks 264 MiB above off (its buffers and graph addresses, less the smaller pool); at 0.75 its runs died
    before any pool, 638 MiB below off's runs that allocated one.

    The kit before: "**Controlled comparison.**", no word on the instrumentation; the budget rows carry
    `logged_rest_gib` −20.4 / −19.444 beside `rest_gib` 0.15 / 1.09 for the ready variants (`logged_agrees` false,
    nothing more); the peak-memory effect of custom_ar=on is −187 MiB over both strata (`strata` ['mem_fraction=0.75',
    'mem_fraction=0.76']): the sign wrong, from comparing runs that died before their KV pool with runs that
    allocated one (and mem_fraction's +1409 MiB the same way)."""
    run = Imported(tmp_path, {
        "experiment": "wrong-instrumentation",
        "question": "Does custom all-reduce consume GPU memory, and is it what fails the launch with Not enough memory?",
        "server": {"kind": "sglang"},
        "factors": {"custom_ar": CUSTOM_AR, "mem_fraction": fractions("0.75", "0.76")},
        "baseline": {"custom_ar": "off", "mem_fraction": "0.75"},
        "runs": grid("c1-wrong-instrumentation", ("custom_ar", "mem_fraction"), car_fraction)})
    v = run.verdict
    # what the launches did, and the budget from the logs' own figures (these hold already)
    assert run.stratum("custom_ar", mem_fraction="0.75")["changes"] is True
    assert run.budget("custom_ar=off, mem_fraction=0.75")["rest_gib"] == pytest.approx(0.155, abs=0.01)
    for variant, break_even in (("custom_ar=off", BREAK_EVEN_OFF), ("custom_ar=on", BREAK_EVEN_ON)):
        for fraction in ("0.75", "0.76"):
            assert run.budget(f"{variant}, mem_fraction={fraction}")["break_even_fraction"] == pytest.approx(
                break_even, abs=0.0005)
    # NEW: a debug line that the run's outcome contradicts (it says no KV cache fits; the server allocated one) gives
    # no figure of the budget — the negative rest is not the budget of a ready run
    for row in v["budget"]:
        if row["outcome"] == "ready":
            assert row.get("logged_rest_gib") is None or row["logged_rest_gib"] > 0, row
    # and the verdict's first finding says the instrumentation is contradicted by what the server did, and which of
    # the seed's explanations the data support: the instrumentation is wrong; custom AR's buffers cost memory
    [finding] = [f for f in v["findings"] if f["kind"] == "instrumentation"]
    assert "DEBUG profile_max_num_token" in finding["detail"] and "rest = -20.40" in finding["detail"], finding
    assert finding["hypotheses"]["instrumentation"].startswith("supported"), finding["hypotheses"]
    assert finding["hypotheses"]["code path"].startswith("not supported"), finding["hypotheses"]
    assert "custom_ar=on takes +0.6" in finding["hypotheses"]["memory"], finding["hypotheses"]
    # after the one line that says why nothing here is settled (2 runs a side: issue 63, conclusive means settled)
    assert run.prose()[0].startswith("**Inconclusive** — custom\\_ar decides the launch on 2 runs per side: observed, "
                                     "not settled"), run.prose()
    assert run.prose()[1].startswith("**The server's own instrumentation contradicts the outcome:**"), run.prose()
    # peak memory is compared only where both levels allocated a KV pool: custom AR costs memory (+264 MiB)
    [peak] = [e for e in v["effects"] if (e["factor"], e["metric"]) == ("custom_ar", "peak_mem_used_mib")]
    assert peak["strata"] == ["mem_fraction=0.76"]
    assert peak["diff"] == pytest.approx(264, abs=2)
    [peak] = [e for e in v["effects"] if (e["factor"], e["metric"]) == ("mem_fraction", "peak_mem_used_mib")]
    assert peak["strata"] == ["custom_ar=off"]
    # the question's memory answer for custom AR, with its sign
    answers = [line for line in run.report.splitlines() if line.startswith("- peak GPU memory") and "`custom_ar=on`" in line]
    assert len(answers) == 1 and "+0.3 GiB" in answers[0], answers


# ---------------------------------------------------------------------------------------------------------
# 2. Instrumentation missing


KV_EXAMPLE = ROOT / "examples" / "h200-sglang-kv" / "20261203-092613" / "runs"
PATCH = ROOT / "params" / "patches" / "sglang-0.5.17-profile-debug.diff"


def test_a_run_of_the_instrumented_level_whose_log_has_no_debug_line_was_not_instrumented(tmp_path):
    """Real SGLang 0.5.17 logs (examples/h200-sglang-kv, one H200, --mem-fraction-static 0.004, no CUDA graphs): a
    factor `debug: {off: {}, print: {patches: [sglang-0.5.17-profile-debug.diff]}}` (the kind's own instrumentation
    patch, which prints `DEBUG profile_available_bytes: …`), two runs a level. One `print` run has the line (run 05 of
    the example); the other has none (the log of run 13, a run without the patch: as if the patch had not taken).
    Truth: that run is not instrumented — the level did not take effect in it; one run of `print` was.

    The kit before: "**Controlled comparison.**" and "**Does not change the launch outcome:** `debug` (print 2/2 vs
    off 2/2 ready …)"; no level check of `debug` at all, the uninstrumented run counted as a `print` run."""
    def log(run: str) -> str:
        [found] = KV_EXAMPLE.glob(f"{run}_*/server.log")
        return str(found)

    missing = log("13")  # debug off's own log: no DEBUG line
    run = Imported(tmp_path, {
        "experiment": "instrumentation-missing", "server": {"kind": "sglang"},
        "factors": {"debug": {"off": {}, "print": {"patches": [str(PATCH)]}}}, "baseline": {"debug": "off"},
        "runs": [{"levels": {"debug": "off"}, "log": log("01")}, {"levels": {"debug": "print"}, "log": log("05")},
                 {"levels": {"debug": "off"}, "log": log("07")}, {"levels": {"debug": "print"}, "log": missing}]})
    v = run.verdict
    _, instrumented, _, uninstrumented = rundir.RunDir(run.run_dir).manifest().run_ids  # as listed
    # NEW: a level that applies the kind's instrumentation patch is checked against the line the patch prints
    checks = [c for c in v["level_checks"] if (c["factor"], c["level"]) == ("debug", "print")]
    assert [(c["runs_confirmed"], c["runs_contradicted"]) for c in checks if c["runs_contradicted"]] == [
        ([instrumented], [uninstrumented])], checks
    # a level that did not take effect: a confound, and the run leaves debug's comparison
    assert v["controlled"] is False
    assert any(c["kind"] == "level" and c["runs"] == [uninstrumented] for c in v["confounds"]), v["confounds"]
    [stratum] = run.factor("debug")["strata"]
    assert stratum["levels"]["print"]["runs"] == [instrumented]
    assert "**Controlled comparison.**" not in run.report


# ---------------------------------------------------------------------------------------------------------
# 3. Systematic and flaky in one batch


def test_custom_ar_decides_at_the_fraction_where_it_fails_every_time_and_only_the_other_stratum_is_flaky(tmp_path):
    """Custom all-reduce off/on × 0.75/0.85 on 2 GPUs, 3 repetitions. At 0.75 custom AR on fails 0/3 ("Not enough
    memory": rest −0.31 GiB, its buffers) against off's 3/3 ready (rest +0.155 GiB): systematic. At 0.85 every run
    has room (rest ≈ 9 GiB), and one run of custom AR on died of an NCCL watchdog timeout during CUDA-graph capture
    (an all-reduce that never completed, 600 s: a random infrastructure failure) — 2/3 vs 3/3. Truth: custom_ar
    decides the launch at 0.75; only the stratum at 0.85 is flaky.

    The kit before: status `flaky`, `flaky_factors` ['custom_ar', 'mem_fraction'], `outcome_factors` []; the headline
    "INCONCLUSIVE: custom_ar is flaky: its repetitions disagree at mem_fraction=0.85: custom_ar=on: 2/3 ready, the odd
    run(s): 08_custom_ar-on.mem_fraction-0.85_imported2 failed (cuda_graph_failed: torch.distributed.DistBackendError:
    [Rank 1] Watchdog caught collective operation timeout: …)", and "**Flaky:** `custom_ar`" in report.md. (The NCCL
    failure is read as `cuda_graph_failed`, the phase it happened in; this test asks nothing of that.)"""
    run = Imported(tmp_path, {
        "experiment": "systematic-and-flaky", "server": {"kind": "sglang"},
        "factors": {"custom_ar": CUSTOM_AR, "mem_fraction": fractions("0.75", "0.85")},
        "baseline": {"custom_ar": "off", "mem_fraction": "0.85"},
        "runs": grid("c3-systematic-and-flaky", ("custom_ar", "mem_fraction"), car_fraction)})
    v = run.verdict
    systematic = run.stratum("custom_ar", mem_fraction="0.75")
    assert systematic["changes"] is True and systematic["flaky"] == []
    assert run.stratum("custom_ar", mem_fraction="0.85")["flaky"] == ["on"]
    decision = run.factor("custom_ar")
    assert "custom_ar" in v["outcome_factors"] and "custom_ar" not in v["flaky_factors"], decision["summary"]
    assert decision["status"] in ("decides", "decides_in_some")
    # the flaky stratum was compared and could not tell: neither "not at 0.85" nor "only at 0.75"
    assert "not at" not in decision["summary"] and "only at" not in decision["summary"]
    assert "custom_ar is flaky" not in Verdict.from_json(v).headline()
    assert "**Flaky:** `custom_ar`" not in run.report
    assert "custom\\_ar is flaky" not in run.prose()[0]


# ---------------------------------------------------------------------------------------------------------
# 5. Claims past the data


def test_a_stratum_where_the_baseline_level_was_never_observed_is_not_compared_so_no_only_at(tmp_path):
    """Custom all-reduce off/on × 0.55/0.85 on 2 GPUs, 2 repetitions. At custom_ar=on, 0.55 fails (Not enough memory)
    and 0.85 starts: mem_fraction decides there. At custom_ar=off the baseline level 0.55 was never observed: both its
    logs end while the weights load (no ready line, no failure: outcome unknown, left out). Truth: mem_fraction
    decides at custom_ar=on; at custom_ar=off it was never compared — "only at custom_ar=on" claims past the data.

    The kit before: `decides_in_some`, "mem_fraction decides the launch only at custom_ar=on", and in report.md
    "**Decides the launch:** mem\\_fraction only at custom\\_ar=on (0.85 2/2 vs 0.55 0/2 ready at custom\\_ar=on; …)"."""
    run = Imported(tmp_path, {
        "experiment": "never-compared", "server": {"kind": "sglang"},
        "factors": {"custom_ar": CUSTOM_AR, "mem_fraction": fractions("0.55", "0.85")},
        "baseline": {"custom_ar": "off", "mem_fraction": "0.55"},
        "runs": grid("c5-never-compared", ("custom_ar", "mem_fraction"), car_fraction)})
    v = run.verdict
    assert sorted(r["why"] for r in v["excluded_runs"]) == ["outcome unknown", "outcome unknown"]
    decision = run.factor("mem_fraction")
    assert "mem_fraction" in v["outcome_factors"] and run.stratum("mem_fraction", custom_ar="on")["changes"] is True
    assert "only at" not in decision["summary"], decision["summary"]
    # NEW: each stratum says what it showed; one without a valid run of a level was not compared
    assert run.stratum("mem_fraction", custom_ar="off").get("state") == "not compared"
    assert "only at" not in run.report


# ---------------------------------------------------------------------------------------------------------
# 6. A flag that caps the pool


def test_a_pool_capped_by_max_total_tokens_says_nothing_of_the_memory_and_the_break_even_is_the_cards_own(tmp_path):
    """--max-total-tokens 60000 on one card (2 GPUs, 93.54 GiB free before 70 GiB of weights), --mem-fraction-static
    0.74 / 0.76 / 0.80 / 0.85 / 0.90, 2 repetitions. 0.74 fails (rest −0.78 GiB); 0.76 starts with its profiled pool
    (16,661 tokens); at 0.80, 0.85 and 0.90 the profiled pool (73,833 / 145,296 / 216,760 tokens) is capped at 60,000
    (3.93 GiB). Truth: one machine; the break-even is 1 − 23.54/93.54 = 0.748 in every run; a capped pool is not what
    SGLang's fraction left, so it says nothing of the memory before the weights.

    The kit before: `controlled` false, mem_fraction `confounded` by a `host` confound "GPU memory before the weights
    (as each server's log measured it) differs by more than 5%: 95.0 GiB: 01_mem_fraction-0.74_imported1, …,
    08_mem_fraction-0.80_imported2; 196.1 GiB: 05_mem_fraction-0.90_imported1, 10_mem_fraction-0.90_imported2; 130.7
    GiB: 04_mem_fraction-0.85_imported1, 09_mem_fraction-0.85_imported2 — other cards, or a card something else held;
    the budget's break-even per variant: mem_fraction=0.74: 0.748; mem_fraction=0.76: 0.748; mem_fraction=0.80: 0.76;
    mem_fraction=0.85: 0.82; mem_fraction=0.90: 0.88" — break-evens of 0.82 and 0.88 that the launches at 0.80 and
    0.85, which started, contradict."""
    run = Imported(tmp_path, {
        "experiment": "capped-pool", "server": {"kind": "sglang"},
        "factors": {"mem_fraction": fractions("0.74", "0.76", "0.80", "0.85", "0.90")},
        "baseline": {"mem_fraction": "0.85"},
        "runs": grid("c6-capped-pool", ("mem_fraction",), fraction_only)})
    v = run.verdict
    assert not [c for c in v["confounds"] if "before the weights" in c["detail"]], v["confounds"]
    assert v["controlled"] is True and v["outcome_factors"] == ["mem_fraction"]
    rows = [b for b in v["budget"] if b.get("break_even_fraction") is not None]
    assert rows
    for row in rows:
        # never contradicted by what launched: 0.74 failed, 0.76 started
        assert 0.74 <= row["break_even_fraction"] <= 0.76, row
        assert row["break_even_fraction"] == pytest.approx(BREAK_EVEN_OFF, abs=0.0005), row
        assert row["total_gib"] == pytest.approx(93.54, abs=0.05), row


# ---------------------------------------------------------------------------------------------------------
# 7. The same log twice


def test_the_same_log_imported_twice_is_one_observation(tmp_path):
    """mem_fraction 0.55 / 0.85 on 2 GPUs: one log of 0.55 (Not enough memory) imported twice under 0.55 — once as
    itself, once as a byte-identical copy under another name, as a folder of logs gathered by hand has it — and two
    distinct logs of 0.85 (ready). Truth: 0.55 was observed once: 0/1 vs 2/2, on one run for 0.55.

    The kit before: two runs of 0.55, "mem_fraction decides the launch" on 0/2 vs 2/2 (Fisher's p = 0.33), `excluded_runs`
    [], `runs_per_side` 2."""
    shutil.copy(FIXTURES / "c7-same-log-twice" / "f0.55.log", tmp_path / "f0.55-again.log")
    c7 = FIXTURES / "c7-same-log-twice"
    run = Imported(tmp_path, {
        "experiment": "same-log-twice", "server": {"kind": "sglang"}, "factors": {"mem_fraction": fractions("0.55", "0.85")},
        "baseline": {"mem_fraction": "0.55"},
        "runs": [{"levels": {"mem_fraction": "0.55"}, "log": str(c7 / "f0.55.log")},
                 {"levels": {"mem_fraction": "0.85"}, "log": str(c7 / "f0.85_rep1.log")},
                 {"levels": {"mem_fraction": "0.55"}, "log": "f0.55-again.log"},
                 {"levels": {"mem_fraction": "0.85"}, "log": str(c7 / "f0.85_rep2.log")}]})
    v = run.verdict
    # NEW: an excluded run's `why` is "duplicate" (its log is byte for byte another run's)
    assert [(r["run_id"], r["why"]) for r in v["excluded_runs"]] == [(run.ids["f0.55-again.log"], "duplicate")]
    [stratum] = run.factor("mem_fraction")["strata"]
    assert stratum["levels"]["0.55"]["valid"] == 1 and stratum["levels"]["0.55"]["runs"] == [run.ids["f0.55.log"]]
    assert run.factor("mem_fraction")["runs_per_side"] == 1


# ---------------------------------------------------------------------------------------------------------
# 9. A level that fails in its own code


def test_custom_all_reduce_whose_kernel_fails_in_graph_capture_took_effect_and_is_what_kills_the_launch(tmp_path):
    """Custom all-reduce off/on at 0.85 on 2 GPUs, 2 repetitions. With it on, every rank allocates its KV pool and
    then, in CUDA-graph capture, custom all-reduce's kernel fails: "Capture cuda graph failed: Runtime check failed at
    …/custom_all_reduce.cuh:37: CUDA error: invalid argument" (SGLang's format, tests/fixtures/constructed-round3). Off,
    every run is ready. Truth: the level took effect — the kernel that failed is custom all-reduce's own — and it is
    what kills the launch: custom_ar decides it (0/2 vs 2/2).

    The kit before: both on runs `misfiled` and excluded; the level check "custom all-reduce active" contradicted;
    "**A level did not take effect:** custom\\_ar=on: custom all-reduce was failed to initialise on ranks 0, 1
    (cuda\\_error: …)"; a `level` confound, `controlled` false, and "custom_ar is undetermined: no valid runs of
    custom_ar=on"."""
    run = Imported(tmp_path, {
        "experiment": "level-fails-in-its-own-code", "server": {"kind": "sglang"}, "factors": {"custom_ar": CUSTOM_AR},
        "baseline": {"custom_ar": "off"},
        "runs": grid("c9-level-fails-in-its-own-code", ("custom_ar",), car_only)})
    v = run.verdict
    on_runs = sorted(run.ids[f"car-on_rep{n}.log"] for n in (1, 2))
    check = run.check("custom_ar", "on", "custom all-reduce active")
    assert check["runs_contradicted"] == [] and sorted(check["runs_confirmed"]) == on_runs, check
    assert v["excluded_runs"] == [] and not [c for c in v["confounds"] if c["kind"] == "level"]
    assert v["outcome_factors"] == ["custom_ar"] and run.factor("custom_ar")["status"] == "decides"
    [stratum] = run.factor("custom_ar")["strata"]
    assert stratum["levels"]["on"]["outcomes"] == {"fails: custom_allreduce_failed in cuda_graph": 2}
    assert "was failed to initialise" not in run.report and "did not take effect" not in run.report


# ---------------------------------------------------------------------------------------------------------
# 10. Both levels fail, differently (round 3)


def test_two_levels_that_both_fail_differently_change_how_it_fails_not_whether_it_starts(tmp_path):
    """mem_fraction 0.55 / 0.99 on 2 GPUs, 2 repetitions: 0.55 fails sizing its KV cache (Not enough memory), 0.99
    allocates a pool that leaves the CUDA graphs no room (Capture cuda graph failed: CUDA out of memory). Neither level
    starts. Truth: mem_fraction changes how the launch fails, not whether it starts; it is neither "decides the launch"
    nor "does not change the launch outcome".

    The kit before (round 3's answer): `decides`, `outcome_factors` ['mem_fraction'], the headline "controlled;
    decides the launch: mem_fraction (…)" and in report.md "**Decides the launch:** mem\\_fraction changes how the
    launch fails — both fail, differently: mem\\_fraction=0.55: fails: kv\\_cache\\_no\\_memory in kv\\_cache;
    mem\\_fraction=0.99: fails: cuda\\_graph\\_failed in cuda\\_graph.". (tests/test_verdict_round3.py's
    test_two_levels_that_both_fail_but_differently… asserts that old answer for its live batch.)"""
    run = Imported(tmp_path, {
        "experiment": "both-fail-differently", "server": {"kind": "sglang"},
        "factors": {"mem_fraction": fractions("0.55", "0.99")}, "baseline": {"mem_fraction": "0.55"},
        "runs": grid("c10-both-fail-differently", ("mem_fraction",), fraction_only)})
    v = run.verdict
    decision = run.factor("mem_fraction")
    assert "both fail, differently" in decision["summary"]  # said, as round 3 made it
    # NEW: a status of its own (e.g. "changes_how_it_fails"): neither deciding whether it starts nor neutral
    assert decision["status"] != "decides" and "mem_fraction" not in v["neutral_factors"]
    assert "decides the launch: mem_fraction" not in Verdict.from_json(v).headline()
    assert not [p for p in run.prose() if p.startswith("**Decides the launch") and "mem\\_fraction" in p], run.prose()


# ---------------------------------------------------------------------------------------------------------
# Live batches on the simulated host


def run_batch(path: Path) -> Path:
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def statuses(run_dir: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("runs/*/status.json")}


# 4. Slow is not failed

STILL_COMPILING = """\
experiment: still-compiling
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.05, workdir: {work}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}",
            --mem-fraction-static, "0.85"]
  ready: {{timeout_s: 5, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  torch_compile:
    "off": {{}}
    "on": {{flags: {{--enable-torch-compile: true}}, env: {{SIM_FAULT_COMPILE_S: "600"}}}}
baseline: {{torch_compile: "off"}}
repetitions: 2
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


@pytest.mark.slow
def test_a_launch_still_compiling_without_error_at_the_deadline_is_censored_not_failed(tmp_path, sim_root):
    """torch_compile off/on on the simulated host (2 GPUs, 0.85: room for a pool either way), 2 repetitions, a ready
    deadline of 5 s. With it on (SIM_FAULT_COMPILE_S=600), CUDA-graph capture compiles for ten minutes, printing its
    progress every second and no error: at the deadline the launch is still compiling. Truth: those runs are censored —
    whether they would start is not known (they were slower than the deadline, not failed); torch_compile does not
    decide the launch on this data.

    The kit before: status `timeout` ("is not ready in time"), and "**Decides the launch:** torch\\_compile (on 0/2 vs
    off 2/2 ready; Fisher's exact p = 0.33 …)", `outcome_factors` ['torch_compile']."""
    run_dir = run_batch(write_params(tmp_path, STILL_COMPILING.format(work=tmp_path / "work")))
    slow = {name: s for name, s in statuses(run_dir).items() if "torch_compile-on" in name}
    assert len(slow) == 2 and all(s["status"] == "timeout" and s["failure_reason"] is None for s in slow.values())
    assert all((run_dir / "runs" / name / "server.log").read_text().count("Capturing batches") >= 2 for name in slow)
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert "torch_compile" not in verdict["outcome_factors"], verdict["factors"]["torch_compile"]["summary"]
    # a run that reached its deadline still making progress, without an error, is a censored outcome — no
    # observation of whether the launch starts — and a factor whose comparison rests on censored runs is undetermined
    assert verdict["factors"]["torch_compile"]["status"] == "undetermined"
    [stratum] = verdict["factors"]["torch_compile"]["strata"]
    assert stratum["state"] == "not compared" and "censored" in stratum["levels"]["on"]["invalid"], stratum
    assert "slow, not failed" in verdict["factors"]["torch_compile"]["summary"]
    assert sorted(r["why"] for r in verdict["excluded_runs"]) == ["censored", "censored"]
    report = (run_dir / "report.md").read_text()
    assert not [line for line in report.splitlines() if line.startswith("**Decides the launch") and "torch" in line]


# 8. The server overrode a level

P2P_WRAPPER = '''\
"""Planted by tests/test_verdict_round4.py: the simulated SGLang server, with custom all-reduce's P2P check failing
in the second launch that asks for custom all-reduce (SIM_FAULT_P2P_CHECK_FAILS), as a box whose P2P test fails now and
then does."""
import os
import sys
from pathlib import Path

args = sys.argv[1:]
if "--disable-custom-all-reduce" not in args:
    counter = Path(__file__).with_name("custom-ar-starts")
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    if n == 2:
        os.environ["SIM_FAULT_P2P_CHECK_FAILS"] = "1"
os.execv(sys.executable, [sys.executable, "-m", "launchlab.sim.sglang_server", *args])
'''

SERVER_OVERRODE = """\
experiment: server-overrode
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.05, workdir: {work}}}
server:
  kind: sglang
  command: [python3, {wrapper}, --tp, "2", --host, 127.0.0.1, --port, "{{port}}", --mem-fraction-static, "0.85"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  custom_ar:
    "off": {{flags: {{--disable-custom-all-reduce: true}}}}
    "on": {{}}
baseline: {{custom_ar: "off"}}
repetitions: 3
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


@pytest.mark.slow
def test_a_run_whose_server_disabled_custom_ar_leaves_the_comparison_and_its_levels_break_even(tmp_path, sim_root):
    """Custom all-reduce off/on at 0.85 on the simulated host (2 GPUs, 70 GiB of weights), 3 repetitions. A wrapper
    around the simulated server makes custom all-reduce's P2P check fail in the second launch of `on`: SGLang's
    "Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed" on both ranks, no
    buffers taken, the server ready on NCCL. Truth: that run is no observation of custom_ar=on — it leaves custom_ar's
    comparison and the break-even of custom_ar=on, which is 1 − 22.92/92.92 = 0.753 over its other two runs (the
    overridden run's own is custom AR off's 0.748).

    The kit before: the run left custom_ar's comparison (its level check contradicted), but the budget's row of
    custom_ar=on averaged all three runs: n 3, break-even 0.752 (0.7517), where the truth is 0.753 (0.7534) on 2."""
    wrapper = tmp_path / "p2p_wrapper.py"
    wrapper.write_text(P2P_WRAPPER)
    run_dir = run_batch(write_params(tmp_path, SERVER_OVERRODE.format(work=tmp_path / "work", wrapper=wrapper)))
    overridden = [name for name in statuses(run_dir)
                  if "P2P test failed" in (run_dir / "runs" / name / "server.log").read_text()]
    assert len(overridden) == 1 and "custom_ar-on" in overridden[0]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    [check] = [c for c in verdict["level_checks"] if (c["factor"], c["level"], c["check"]) ==
               ("custom_ar", "on", "custom all-reduce active")]
    assert check["runs_contradicted"] == overridden and len(check["runs_confirmed"]) == 2
    compared = {r for s in verdict["factors"]["custom_ar"]["strata"] for per in s["levels"].values() for r in per["runs"]}
    assert overridden[0] not in compared and len(compared) == 5  # out of the comparison (it is already)
    [row] = [b for b in verdict["budget"] if b["variant"] == "custom_ar=on"]
    assert row["n"] == 2, row
    assert row["break_even_fraction"] == pytest.approx(BREAK_EVEN_ON, abs=0.0005), row
    [row] = [b for b in verdict["budget"] if b["variant"] == "custom_ar=off"]
    assert row["n"] == 3 and row["break_even_fraction"] == pytest.approx(BREAK_EVEN_OFF, abs=0.0005), row


# 11. A server whose first request dies of OOM (round 3)

FIRST_REQUEST_KILLS = """\
experiment: first-request-kills
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.05, workdir: {work}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}",
            --mem-fraction-static, "0.85"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  smoke: {{url: "http://127.0.0.1:{{port}}/generate", body: {{text: hi}}, timeout_s: 10}}
  stop_grace_s: 5
factors:
  kernel:
    "ok": {{}}
    "request-oom": {{env: {{SIM_FAULT_REQUEST_OOM_DIES: "1"}}}}
baseline: {{kernel: "ok"}}
repetitions: 2
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


@pytest.mark.slow
def test_a_server_killed_by_its_first_requests_oom_starts_but_its_first_request_fails(tmp_path, sim_root):
    """kernel ok / request-oom on the simulated host (2 GPUs, 0.85), 2 repetitions, a smoke request. With
    SIM_FAULT_REQUEST_OOM_DIES the server is ready, and the smoke request — its first — runs out of GPU memory in the
    scheduler, which dies of it ("Scheduler hit an exception … torch.OutOfMemoryError: CUDA out of memory. Tried to
    allocate 2.00 GiB", "Received sigquit from a child process"); the request gets no answer. Truth: the server
    starts but its first request fails (cuda_oom) — it did not exit by itself, its first request killed it.

    The kit before: status `degraded`, failure_reason `exited_after_ready`, "ready at … s, then exited by itself before
    the kit stopped it: …", and the summary "kernel decides the launch — kernel=ok: starts; kernel=request-oom:
    starts, then exits by itself"."""
    run_dir = run_batch(write_params(tmp_path, FIRST_REQUEST_KILLS.format(work=tmp_path / "work")))
    killed = {name: s for name, s in statuses(run_dir).items() if "request-oom" in name}
    assert len(killed) == 2 and all(s["status"] == "degraded" for s in killed.values())
    assert all("torch.OutOfMemoryError" in (run_dir / "runs" / name / "server.log").read_text() for name in killed)
    assert [s["failure_reason"] for s in killed.values()] == ["cuda_oom", "cuda_oom"], killed
    summary = json.loads((run_dir / "verdict.json").read_text())["factors"]["kernel"]["summary"]
    assert "kernel=request-oom: starts but its first request fails (cuda_oom)" in summary, summary
    assert "exits by itself" not in summary
    assert re.search(r"starts but its first request fails \(cuda\\?_oom\)", (run_dir / "report.md").read_text())
