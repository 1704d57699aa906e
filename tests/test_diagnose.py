"""`launchlab diagnose LOG…`: from a failing launch's log to a params file that validates, on the real logs of every
kind, the seed's own case, and the demo's failing launch run again as the experiment diagnose drafts."""

import json
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB  # the warm CLI (tests/cliserver.py): a fresh one imports scipy.stats for each draft
from launchlab import params, search
from launchlab.logparse.kinds import KINDS
from launchlab.runner import diagnose, draft
from test_sglang_0517_runs import LOGS as SGLANG_0517_RUNS

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SEED = FIXTURES / "constructed-diagnose" / "sglang-seed-tp8-custom-ar-not-enough-memory.log"
# the fixtures' logs and the SGLang 0.5.17 logs kept in the example batches (test_sglang_0517_runs.LOGS)
REAL_LOGS = sorted(p for p in FIXTURES.rglob("*.log")) + [ROOT / run / "server.log" for run in SGLANG_0517_RUNS.values()]


def _diagnose(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHLAB, "diagnose", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd or tmp_path)


def test_the_real_logs_cover_every_kind_the_issue_names():
    kinds = {diagnose.diagnose([log]).kind.name for log in REAL_LOGS}
    assert {"sglang", "vllm", "transformers", "tgi", "trtllm", "llamacpp"} <= kinds, kinds


@pytest.mark.parametrize("log", REAL_LOGS, ids=lambda p: p.parent.name if p.name == "server.log" else p.name)
@pytest.mark.parametrize("host", [None, "gpu-box"])
def test_every_draft_of_a_real_log_validates(log, host, tmp_path):
    found = diagnose.diagnose([log])
    made = draft.make(found, draft.Options(host=host))
    out = tmp_path / "params" / "draft.yaml"
    draft.write(made, out, force=False)
    exp = params.load(out)  # raises ParamsError naming every problem
    assert exp.server.kind == (found.kind.name if found.kind else "generic")
    assert diagnose.text(found)  # and the diagnosis prints, whatever the log lacked


def test_the_seed_case_gives_the_break_even_0_769_and_crosses_custom_all_reduce_with_the_fraction_around_it(tmp_path):
    out = tmp_path / "seed.yaml"
    proc = _diagnose(tmp_path, str(SEED), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "kv_cache_no_memory in kv_cache (ranks 0, 1, 2, 3, 4, 5, 6, 7" in proc.stdout
    assert "avail 21.697 GiB" in proc.stdout and "total 93.999 GiB" in proc.stdout
    assert "mem_fraction_static: asked 0.55; break-even 0.769 (1 − avail/total)" in proc.stdout
    exp = params.load(out)
    fraction = exp.factors["mem_fraction_static"]
    assert set(fraction) == {"0.55", "0.78"}, "the failing value, and one past the break-even by the kind's margin"
    assert fraction["0.78"].flags == {"--mem-fraction-static": "0.78"}
    custom_ar = exp.factors["custom_ar"]
    assert custom_ar["on"].flags == {} and custom_ar["off"].flags == {"--disable-custom-all-reduce": True}
    assert custom_ar["off"].env == {"SGLANG_FORCE_CUSTOM_AR_PCIE": "0"}
    assert exp.baseline == {"mem_fraction_static": "0.55", "custom_ar": "on"}, "the failing launch"
    # CUDA graphs are captured after the KV cache is sized, where this launch failed: they cannot have caused it
    assert "cuda_graphs" not in exp.factors
    assert "CUDA graphs takes its memory in cuda_graph, after kv_cache where the launch failed" in proc.stdout
    # the kit's own rule: 4 a side is the fewest at which a clean split is significant (Fisher's exact)
    assert exp.repetitions == 4 and exp.warmup == 1
    assert "4 variant(s) × 4 = 16 launches" in proc.stdout
    assert exp.reproduce.reason == "kv_cache_no_memory" and exp.reproduce.phase == "kv_cache"
    assert exp.reproduce.break_even == "0.769" and exp.reproduce.log == SEED.name
    host = exp.hosts["box"]
    assert host.transport == "sim" and host.gpus == 8 and host.weights_gib_per_rank == pytest.approx(72.302)
    text = out.read_text()
    assert "# line 96: failed at 0.55" in text, "each factor's comment names the log line behind it"
    assert "custom all-reduce, on in the log: line 1: disable_custom_all_reduce=False" in text
    assert "python3\", \"-m\", \"launchlab.sim.sglang_server\", \"--model-path\", \"/models/kimi-k2-instruct\"" in text
    assert "--mem-fraction-static\", \"0.55" not in text.split("factors:")[0], "the memory flag is the factor's alone"


def test_with_search_the_draft_bisects_the_memory_flag_around_the_break_even(tmp_path):
    out = tmp_path / "seed.yaml"
    assert _diagnose(tmp_path, str(SEED), "--search", "-o", str(out)).returncode == 0
    exp = params.load(out)
    assert exp.search.flag == "--mem-fraction-static"
    # around the predicted break-even, inside (0, 1], probed just below and above it first (two launches)
    assert 0 < float(exp.search.low) < 0.769 < float(exp.search.high) <= 0.80
    assert exp.search.predicted == "0.769" and exp.search.resolution == "0.02"
    [first] = search.step(exp.search.bounds, ["s"], [], guides={"s": exp.search.prior})
    below, above = (float(p.value) for p in first.next)
    assert below < 0.769 < above and above - below == pytest.approx(0.02) and 0.55 < below
    assert "mem_fraction_static" not in exp.factors and set(exp.factors) == {"custom_ar"}
    assert exp.warmup == 1, "its first start compiles: a warm-up before the probes"


def test_custom_all_reduce_on_at_tensor_parallel_1_is_left_out_and_said_so(tmp_path):
    log = ROOT / "examples/h200-sglang-diagnose/failing-launch.log"  # SGLang 0.5.17's KV error
    out = tmp_path / "d.yaml"
    proc = _diagnose(tmp_path, str(log), "--host", "gpu-box", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "custom all-reduce" in proc.stdout and "cannot take effect at tensor parallel 1" in proc.stdout
    exp = params.load(out)
    assert "custom_ar" not in exp.factors and "cuda_graphs" not in exp.factors  # after kv_cache: left out too
    assert "cannot have caused the failure" in proc.stdout
    assert exp.hosts["gpu"].transport == "ssh" and exp.hosts["gpu"].address == "gpu-box"
    assert "break-even 0.0029" in proc.stdout, "SGLang's own minimum viable share, from its error"
    assert set(exp.factors["mem_fraction_static"]) == {"0.002", "0.02"}


def test_the_instrumentation_patch_is_a_factor_on_a_real_host_for_its_version(tmp_path):
    log = tmp_path / "v.log"
    log.write_text("SGLang version 0.5.17\n" + SEED.read_text())
    out = tmp_path / "params" / "d.yaml"
    proc = _diagnose(tmp_path, str(log), "--host", "local", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    exp = params.load(out)
    # the kit's instrumentation for the version the host has (read there before any launch), as the seed's factor
    assert exp.factors["debug"]["print"].instrument is True and exp.factors["debug"]["print"].patches == []
    assert exp.baseline["debug"] == "off" and "instrument: true" in out.read_text()
    assert not (out.parent / "patches").exists(), "no patch copied: the host's version picks it at launch"
    # a log that does not state its version gets the factor too: the host knows the version
    unversioned = tmp_path / "params" / "u.yaml"
    assert _diagnose(tmp_path, str(SEED), "--host", "local", "-o", str(unversioned)).returncode == 0
    assert params.load(unversioned).factors["debug"]["print"].instrument is True


def test_a_log_the_kit_cannot_read_enough_from_gets_a_skeleton_with_todo_comments(tmp_path):
    log = tmp_path / "odd.log"  # a logger's lines of a server the kit does not know (issue 65: a non-log is refused)
    log.write_text("2026-01-01 10:00:00 INFO starting my own server\n2026-01-01 10:00:01 ERROR something happened\n")
    proc = _diagnose(tmp_path, str(log))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "not read: the server kind" in proc.stdout and "not read: a failure" in proc.stdout
    [out] = tmp_path.glob("*.yaml")  # no params/ here: beside the current folder
    text = out.read_text()
    assert "# not read: the server kind" in text and "TODO-the-server-command" in text
    assert params.load(out).server.kind == "generic"
    line = next(n for n, t in enumerate(text.splitlines(), start=1) if "TODO-the-server-command" in t)
    for command in (["validate"], ["run", "--dry-run"]):  # a draft is not an experiment until its TODOs are filled
        refused = subprocess.run([*LAUNCHLAB, *command, str(out)], capture_output=True, text=True, cwd=tmp_path)
        assert refused.returncode == 2, refused.stdout
        assert f"line {line}: `TODO-the-server-command` is a placeholder the kit wrote" in refused.stderr


def test_an_existing_file_is_kept_unless_force_and_an_unreadable_log_is_a_message(tmp_path):
    out = tmp_path / "d.yaml"
    out.write_text("mine\n")
    proc = _diagnose(tmp_path, str(SEED), "-o", str(out))
    assert proc.returncode == 1 and "exists: nothing written (--force replaces it" in proc.stderr
    assert out.read_text() == "mine\n"
    assert _diagnose(tmp_path, str(SEED), "-o", str(out), "--force").returncode == 0
    assert out.read_text() != "mine\n"
    missing = _diagnose(tmp_path, str(tmp_path / "nope.log"))
    assert missing.returncode == 1 and "no such log file" in missing.stderr and "Traceback" not in missing.stderr


def test_a_patches_folder_that_is_a_link_is_never_written_through(tmp_path):
    log = tmp_path / "v.log"
    log.write_text("SGLang version 0.5.17\n" + SEED.read_text())
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "patches").symlink_to(tmp_path / "elsewhere")
    proc = _diagnose(tmp_path, str(log), "--host", "local", "-o", str(tmp_path / "params" / "d.yaml"), "--force")
    # the draft names the kit's instrumentation (`instrument: true`) and writes no patch: none goes through the link
    assert proc.returncode == 0, proc.stderr
    assert list((tmp_path / "elsewhere").iterdir()) == []
    with pytest.raises(Exception, match="is a symbolic link: nothing written"):  # a draft that carries a patch
        draft.write(draft.Draft("x: 1\n", {"p.diff": SEED}), tmp_path / "params" / "e.yaml", force=True)
    assert list((tmp_path / "elsewhere").iterdir()) == [] and not (tmp_path / "params" / "e.yaml").exists()


def test_a_log_cannot_write_yaml_through_its_values(tmp_path):
    log = tmp_path / "evil.log"
    log.write_text(SEED.read_text().replace("model_path='/models/kimi-k2-instruct'",
                                            "model_path='/m\"]\\nrepetitions: 999 # {port}'"))
    out = tmp_path / "d.yaml"
    assert _diagnose(tmp_path, str(log), "-o", str(out)).returncode == 0
    exp = params.load(out)
    assert exp.repetitions == 4  # the kit's, not the log's 999
    assert "/m\"]\nrepetitions: 999 # {{port}}" in exp.server.command, "braces doubled: no placeholder from a log"


def test_diagnose_names_no_server_itself():
    for module in ("diagnose.py", "draft.py"):
        code = (ROOT / "lib" / "launchlab" / "runner" / module).read_text().lower()
        named = [kind for kind in KINDS if kind != "generic" and kind in code]
        assert named == [], f"{module} names {named}: that knowledge belongs to the kind (ServerKind)"


@pytest.mark.slow
def test_the_draft_of_the_demos_failing_launch_reaches_the_demos_verdict_on_the_simulated_host(demo_run, tmp_path):
    run_dir, _ = demo_run
    [failing] = [f for f in (run_dir / "runs").iterdir() if f.name.endswith("custom_ar-on.mem_fraction-0.75_rep1")]
    out = tmp_path / "draft.yaml"
    proc = _diagnose(tmp_path, str(failing / "server.log"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert set(params.load(out).factors) == {"mem_fraction_static", "custom_ar"}
    run = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(out), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    verdict = json.loads((Path(run.stdout.strip().splitlines()[-1]) / "verdict.json").read_text())
    demo = json.loads((run_dir / "verdict.json").read_text())
    assert demo["outcome_factors"] == ["custom_ar", "mem_fraction"] and demo["neutral_factors"] == [], (
        "the demo's own verdict", demo["inconclusive_reasons"], demo["warnings"][:6])
    assert verdict["controlled"] and verdict["conclusive"], verdict["inconclusive_reasons"]
    # as in the demo: at the failing fraction custom all-reduce decides, and the fraction decides with it on
    assert {f: d["status"] for f, d in verdict["factors"].items()} == {"mem_fraction_static": "decides_in_some",
                                                                       "custom_ar": "decides_in_some"}
    # issue 48: the baseline (the failing launch, as drafted) failed as the log did, in every run
    reproduced = verdict["reproduced"]
    assert reproduced["reproduced"] is True and len(reproduced["matched"]) == len(reproduced["runs"]) == 4
    report = (Path(run.stdout.strip().splitlines()[-1]) / "report.md").read_text()
    assert "**Reproduced:** the baseline failed as `server.log` did (kv\\_cache\\_no\\_memory in kv\\_cache" in report


def test_one_log_per_rank_is_read_as_one_launch(tmp_path):
    lines = SEED.read_text().splitlines(keepends=True)
    head = [line for line in lines if " TP" not in line and not line.startswith((" ", "RuntimeError", "\n"))]
    for rank in (0, 1):
        tag = f" TP{rank}]"
        own = [line for line in lines if tag in line]
        (tmp_path / f"tp{rank}.log").write_text("".join(head[:1] + own + [
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"]))
    found = diagnose.diagnose([tmp_path / "tp0.log", tmp_path / "tp1.log"])
    assert found.failed_ranks == ["0"] and found.tp == 8, "the failure is the first log's, its ranks tagged there"
    assert round(found.break_even, 3) == 0.769 and found.memory["avail_gib"] == 21.697
    assert [f.suspect.name for f in found.findings] == ["custom_ar", "cuda_graphs"]


HOSTILE = {  # Issue 50: each made a draft that did not validate, said as a kit error
    "emoji-model": ("model_path='/models/kimi-k2-instruct'", "model_path='/models/kimi-\U0001f680-k2\u2028\x85\x07'"),
    "negative-fraction": ("mem_fraction_static=0.55", "mem_fraction_static=-0.5"),
    "huge-tp": ("tp_size=8", "tp_size=99999999"),
    "free-above-total": ("Load weight begin. avail mem=93.999 GB", "Load weight begin. avail mem=9.999 GB"),
}


@pytest.mark.parametrize("edits", [[name] for name in HOSTILE] + [list(HOSTILE)], ids=lambda e: "+".join(e))
def test_hostile_log_values_give_a_draft_that_validates_and_say_what_was_left_out(tmp_path, edits):
    text = SEED.read_text()
    for name in edits:
        text = text.replace(*HOSTILE[name])
    log = tmp_path / "hostile.log"
    log.write_text(text)
    out = tmp_path / "d.yaml"
    proc = _diagnose(tmp_path, str(log), "-o", str(out))
    assert proc.returncode == 0 and "kit error" not in proc.stderr, proc.stdout + proc.stderr
    exp = params.load(out)
    if "emoji-model" in edits:
        assert "/models/kimi-\U0001f680-k2\u2028\x85\x07" in exp.server.command  # the log's value, as it was
    if {"negative-fraction", "free-above-total"} & set(edits):
        assert "mem_fraction_static" not in exp.factors and "no share of the memory" in proc.stdout
    if {"huge-tp", "free-above-total"} & set(edits):
        assert exp.hosts["gpu"].transport == "local" and "host: not simulated" in proc.stdout
    if "huge-tp" in edits:
        assert exp.hosts["gpu"].gpus is None and "more than the 1024 a host may have" in proc.stdout


def test_a_draft_scalar_holds_any_text_as_it_was():
    import yaml

    for text in ["plain", 'quote " and \\ back', "emoji \U0001f680", "nel \x85 ls \u2028 ps \u2029", "bell \x07 nul \x00",
                 "bom \ufeff", "tab\tnew\nline", "{port}"]:
        assert yaml.safe_load(f"v: {draft._q(text)}")["v"] == text, text


def test_the_draft_of_a_private_log_is_private_too(tmp_path):
    """Issue 50: the mode of what the kit writes follows the most private of its inputs — the draft quotes the log's
    lines in its comments; a 0600 log's draft was 0644."""
    log = tmp_path / "mine.log"
    log.write_text(SEED.read_text())
    log.chmod(0o600)
    out = tmp_path / "d.yaml"
    assert _diagnose(tmp_path, str(log), "-o", str(out)).returncode == 0
    assert out.stat().st_mode & 0o777 == 0o600
    shared = tmp_path / "shared.log"
    shared.write_text(SEED.read_text())
    shared.chmod(0o644)
    assert _diagnose(tmp_path, str(shared), "-o", str(tmp_path / "s.yaml")).returncode == 0
    assert (tmp_path / "s.yaml").stat().st_mode & 0o777 == 0o644


def test_a_failed_vllm_launchs_break_even_comes_from_the_cards_total_or_is_a_formula_to_finish(tmp_path):
    """Issue 48: vLLM 0.26 raises before its profile line ("Available KV cache memory: -0.17 GiB", no total): with
    the card's total (--gpu-memory, or nvidia-smi with --host local) the break-even is util − kv / total — the
    0.0052 the threshold search found on the H200 (examples/h200-vllm-threshold); without it, a formula to finish."""
    log = FIXTURES / "vllm-0.26-h200" / "vllm-0.26-util0.004-enforce-eager.log"
    proc = _diagnose(tmp_path, str(log), "-o", str(tmp_path / "a.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "it is 0.004 − (-0.17 GiB) / T — or give --gpu-memory T" in proc.stdout
    proc = _diagnose(tmp_path, str(log), "--gpu-memory", "139.8", "-o", str(tmp_path / "b.yaml"))
    assert "gpu_memory_utilization: asked 0.004; break-even 0.00522" in proc.stdout, proc.stdout
    exp = params.load(tmp_path / "b.yaml")
    assert set(exp.factors["gpu_memory_utilization"]) == {"0.004", "0.02"} and exp.reproduce.break_even == "0.00522"


def test_the_budget_takes_the_servers_own_minimum_whatever_the_fraction_asked(tmp_path):
    """Issue 48: a launch at a negative fraction (a search's range once went below 0) states SGLang's minimum viable
    share all the same: its break-even is that, never one from "Load weight begin"."""
    log = tmp_path / "negative.log"
    source = ROOT / "examples/h200-sglang-diagnose/failing-launch.log"  # SGLang 0.5.17's KV error
    log.write_text(source.read_text().replace("mem-fraction-static=0.002", "mem-fraction-static=-0.0071")
                   .replace("mem_fraction_static=0.002", "mem_fraction_static=-0.0071"))
    found = diagnose.diagnose([log])
    assert found.requested == pytest.approx(-0.0071) and found.break_even == pytest.approx(0.0029)
    line = diagnose.text(found).splitlines()[1]
    assert line.endswith("(minimum viable = 1 - available/pre = 0.0029). If using speculative decoding, draft weights "
                         "are now counted."), "the whole message: its number is never cut off"


def test_the_report_says_whether_the_baseline_reproduced_the_diagnosed_failure():
    """Issue 48: `reproduce:` (what the diagnosed log showed) against the baseline's runs: n of n, and how each
    other ended."""
    import pandas as pd

    from launchlab.params.schema import ReproduceSpec
    from launchlab.verdicts import consistency, ledger

    runs = pd.DataFrame([{"run_id": f"0{i}_b", "variant": "base", "status": status, "failure_reason": reason,
                          "failure_phase": phase, "f": "a"} for i, (status, reason, phase) in enumerate(
        [("failed", "kv_cache_no_memory", "kv_cache"), ("failed", "kv_cache_no_memory", "kv_cache"),
         ("failed", "cuda_oom", "cuda_graph")], 1)])
    budget = pd.DataFrame({"run_id": ["01_b", "02_b", "03_b"], "break_even_fraction": [0.0029, 0.0031, None]})
    spec = ReproduceSpec(log="x.log", reason="kv_cache_no_memory", phase="kv_cache", break_even="0.0029")
    said = consistency.reproduction(ledger.build(runs, ["f"]), budget, expected=spec, baseline="base", kind="sglang")
    assert said["matched"] == ["01_b"] and said["reproduced"] is False
    assert said["differs"] == ["02_b: break-even 0.00310", "03_b: fails: cuda_oom in cuda_graph"]
    assert consistency.reproduction(ledger.build(runs, ["f"]), budget, expected=None, baseline="base",
                                    kind="sglang") is None


def test_a_search_checks_the_diagnosed_failure_on_its_probes_below_the_predicted_break_even():
    """A search has no baseline run at the log's value: its probes below the prediction should fail as the log did
    (seen on the H100: 0.0051 failed with SGLang's own 0.00520, 0.0053 was interrupted); none compared is said as
    not checked, never as "not reproduced"."""
    import pandas as pd

    from launchlab.params.schema import ReproduceSpec
    from launchlab.verdicts import consistency, ledger
    from launchlab.verdicts.verdict import _reproduced

    runs = pd.DataFrame([{"run_id": f"0{i}_p", "variant": f"mem_fraction_static={v}", "status": status,
                          "failure_reason": reason, "failure_phase": phase, "mem_fraction_static": v}
                         for i, (v, status, reason, phase) in enumerate(
        [("0.0051", "failed", "kv_cache_no_memory", "kv_cache"), ("0.0053", "ready", None, None)], 1)])
    budget = pd.DataFrame({"run_id": ["01_p"], "break_even_fraction": [0.0052]})
    spec = ReproduceSpec(log="failing-launch.log", reason="kv_cache_no_memory", phase="kv_cache", break_even="0.0052")
    led = ledger.build(runs, ["mem_fraction_static"])
    below = consistency.Expecting.probes_below("mem_fraction_static", "0.00520")
    said = consistency.reproduction(led, budget, expected=spec, baseline="mem_fraction_static=0.0055", kind="sglang",
                                    expecting=below)
    assert said["runs"] == said["matched"] == ["01_p"] and said["reproduced"] is True
    assert _reproduced(said).startswith("**Reproduced:** the probes below the predicted break-even 0.00520 failed as "
                                        "`failing-launch.log` did")
    nothing = consistency.reproduction(led, budget, expected=spec, baseline="mem_fraction_static=0.0055",
                                       kind="sglang")
    assert nothing["runs"] == [] and _reproduced(nothing).startswith("**Reproduction not checked:** no valid run of "
                                                                     "the baseline")


def test_a_draft_of_one_factor_asks_whether_it_decides_not_which_of_one_does():
    """Issue 49: "Which of mem_fraction_static decides …" with one factor."""
    from types import SimpleNamespace

    found = SimpleNamespace(failure=SimpleNamespace(reason="kv_cache_no_memory", phase="kv_cache"))
    assert draft._question(found, {"mem_fraction_static": {}}) == \
        "Does mem_fraction_static decide whether the launch fails with kv_cache_no_memory in kv_cache?"
    assert draft._question(found, {"mem_fraction_static": {}, "debug": {}}) == \
        "Which of mem_fraction_static, debug decides whether the launch fails with kv_cache_no_memory in kv_cache?"
