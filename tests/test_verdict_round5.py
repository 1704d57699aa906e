"""Issue 63: verdict truth, round 5 — every claim checks its premises. Real batches on the simulated host (TP 2, 70 GiB
of weights on 96 GB cards: SGLang's break-even 1 − avail/total is 0.748 with custom all-reduce off and 0.753 on), one
per class, each beside a safe variant where the premise holds, so the condition tested is real. Each test's
docstring says what the kit before this round said.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, write_params

pytestmark = pytest.mark.slow

BOX = """\
experiment: {name}
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.05, workdir: {work}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"{extra}]
  env: {env}
  ready: {{timeout_s: {timeout}, health_url: "http://127.0.0.1:{{port}}{health}"}}
  stop_grace_s: 5
factors:
{factors}
baseline: {baseline}
repetitions: 2
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


def batch(tmp_path: Path, name: str, factors: str, baseline: str, *, extra: str = "", env: str = "{}",
          health: str = "/health", timeout: int = 60) -> tuple[Path, dict, str]:
    """Run the experiment on the simulated host: (run directory, verdict.json, report.md)."""
    folder = tmp_path / name
    folder.mkdir()
    path = write_params(folder, BOX.format(name=name, work=folder / "work", extra=extra, env=env, health=health,
                                           timeout=timeout, factors=factors, baseline=baseline))
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    return run_dir, json.loads((run_dir / "verdict.json").read_text()), (run_dir / "report.md").read_text()


def statuses(run_dir: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("runs/*/status.json")}


def checks_of(v: dict, factor: str) -> dict[tuple[str, str], dict]:
    return {(c["level"], c["check"]): c for c in v["level_checks"] if c["factor"] == factor}


# ---------------------------------------------------------------------------------------------------------
# 1. A level that never took effect


ENV_ONLY = """\
  custom_ar:
    "off": {env: {SGLANG_DISABLE_CUSTOM_AR: "1"}}
    "on": {}"""
FLAG = """\
  custom_ar:
    "off": {flags: {--disable-custom-all-reduce: true}}
    "on": {}"""


def test_custom_ar_off_set_only_by_a_variable_the_server_does_not_read_is_not_shown_to_vary_never_neutral(
        tmp_path, sim_root):
    """Custom all-reduce off/on at --mem-fraction-static 0.70 (below both break-evens: every launch fails at KV
    sizing), "off" set only by SGLANG_DISABLE_CUSTOM_AR, which SGLang does not read: every run's argument dump says
    disable_custom_all_reduce=False, custom all-reduce takes its buffers at distributed init at both levels (the same
    dist_init_mem_gib), and no run gets far enough to state its custom all-reduce state. Truth: custom_ar was never
    varied — what it does to the launch is not known.

    The kit before: "**Does not change the launch outcome:** custom_ar"; its level checks "not shown" for both
    levels, and nothing about the variable. Beside it, the same design with --disable-custom-all-reduce: the dump and
    the memory at distributed init tell its levels apart, so the same outcomes are "no change" there."""
    run_dir, v, report = batch(tmp_path, "env-only", ENV_ONLY, '{custom_ar: "off"}',
                               extra=', --mem-fraction-static, "0.70"')
    assert all(s["failure_reason"] == "kv_cache_no_memory" for s in statuses(run_dir).values())
    decision = v["factors"]["custom_ar"]
    assert decision["status"] == "not_shown_to_vary" and "custom_ar" not in v["neutral_factors"]
    assert v["not_varied_factors"] == ["custom_ar"] and decision["would_be"] == "neutral"
    assert v["conclusive"] is False and v["inconclusive_reasons"][0].startswith("custom_ar was not shown to vary")
    why = decision["summary"]
    assert "SGLANG_DISABLE_CUSTOM_AR is not known to be read by sglang" in why, why
    assert "what would show it: disable_custom_all_reduce in the server's argument dump" in why, why
    assert "--disable-custom-all-reduce" in why
    env_check = checks_of(v, "custom_ar")[("off", "environment SGLANG_DISABLE_CUSTOM_AR")]
    assert env_check["runs_confirmed"] == [] and len(env_check["runs_unknown"]) == 2
    assert "sglang is not known to read SGLANG_DISABLE_CUSTOM_AR" in env_check["detail"]
    assert "Does not change the launch outcome" not in report and "**Not shown to vary:** `custom_ar`" in report

    run_dir, v, report = batch(tmp_path, "flag", FLAG, '{custom_ar: "off"}', extra=', --mem-fraction-static, "0.70"')
    assert v["factors"]["custom_ar"]["status"] == "neutral" and v["not_varied_factors"] == []


# ---------------------------------------------------------------------------------------------------------
# 2. An override the server announces


def test_a_token_cap_the_server_replaces_with_its_profiled_value_is_overridden_never_confirmed(tmp_path, sim_root):
    """--max-total-tokens 500000 / 2000000 at 0.85, where the profiled pool is 137,178 tokens: each server logs
    "max_total_tokens=… is larger than the profiled value 137178. Use the profiled value instead." and both levels
    get the same pool. Truth: neither level took effect.

    The kit before: the level checks said max_total_tokens=500000 and =2000000 were confirmed in every run (the
    argument dump holds the value asked for), and the factor "does not change the launch outcome". Beside it, caps
    below the profiled value (50000 / 100000) are taken: confirmed, and the pools differ."""
    caps = '  cap:\n    "{a}": {{flags: {{--max-total-tokens: "{a}"}}}}\n    "{b}": {{flags: {{--max-total-tokens: "{b}"}}}}'
    run_dir, v, report = batch(tmp_path, "over-cap", caps.format(a="500000", b="2000000"), '{cap: "500000"}',
                               extra=', --mem-fraction-static, "0.85"')
    for level in ("500000", "2000000"):
        check = checks_of(v, "cap")[(level, f"max_total_tokens={level}")]
        assert check["runs_confirmed"] == [] and len(check["runs_contradicted"]) == 2, check
        assert "the server announced it uses max_total_tokens=137178 instead" in check["detail"], check
        assert f"max_total_tokens={level} is larger than the profiled value 137178" in check["detail"]
    decision = v["factors"]["cap"]
    assert decision["status"] == "not_shown_to_vary" and "the server overrode every level of cap" in decision["summary"]
    assert v["controlled"] is False and {c["kind"] for c in v["confounds"]} == {"level"}
    assert "**A level did not take effect:**" in report and "Does not change the launch outcome" not in report

    run_dir, v, report = batch(tmp_path, "under-cap", caps.format(a="50000", b="100000"), '{cap: "50000"}',
                               extra=', --mem-fraction-static, "0.85"')
    for level in ("50000", "100000"):
        check = checks_of(v, "cap")[(level, f"max_total_tokens={level}")]
        assert len(check["runs_confirmed"]) == 2 and check["runs_contradicted"] == [], check
    assert v["factors"]["cap"]["status"] == "neutral"
    [pool] = [e for e in v["effects"] if (e["factor"], e["metric"]) == ("cap", "kv_tokens")]
    assert pool["diff"] == pytest.approx(50000)


# ---------------------------------------------------------------------------------------------------------
# 3. A wrong probe


def test_a_probe_path_that_answers_404_is_a_problem_of_the_params_said_first_never_a_slow_server(tmp_path, sim_root):
    """Custom all-reduce off/on at 0.85 with ready.health_url /healthz, which the server answers 404: every server
    logs its ready line within a second; the kit's probe gets 404 until the 4 s deadline. Truth: the servers were
    ready by their own account; the params' probe is wrong — nothing about the servers' speed or outcome is known.

    The kit before: status `timeout`, every run censored ("slow, not failed — raise `ready: timeout_s`"). Beside it,
    /health: the probe agrees with the ready line and every run is ready."""
    run_dir, v, report = batch(tmp_path, "probe-404", FLAG, '{custom_ar: "off"}', health="/healthz", timeout=4,
                               extra=', --mem-fraction-static, "0.85"')
    for status in statuses(run_dir).values():
        assert status["status"] == "timeout" and status["failure_reason"] == "ready_signals_disagree", status
        assert status["ready_line_s"] is not None and status["ready_line_s"] < 4
        assert status["probe_answers"].startswith("404 ×"), status["probe_answers"]
    assert {r["why"] for r in v["excluded_runs"]} == {"ready signals disagree"}
    first = v["inconclusive_reasons"][0]
    assert first.startswith("the server's own ready line and the kit's probe disagree in 4 of 4 runs"), first
    assert "never got 200 (it got 404)" in first and "not of the server" in first
    assert "censored" not in json.dumps(v) and "timeout_s" not in report and "slow, not failed" not in report
    headline = report.split("\n## ", 1)[0]
    assert "**The server's own ready line and the kit's probe disagree" in headline, headline

    run_dir, v, report = batch(tmp_path, "probe-ok", FLAG, '{custom_ar: "off"}', extra=', --mem-fraction-static, "0.85"')
    assert all(s["status"] == "ready" and s["probe_answers"].startswith("200 ×1") for s in statuses(run_dir).values())
    assert v["excluded_runs"] == [] and not any(f["kind"] == "readiness" for f in v["findings"])


# ---------------------------------------------------------------------------------------------------------
# 4. A start that is no use, and instrumentation that agrees


def test_a_start_whose_pool_cannot_hold_one_request_is_degraded_and_agreeing_instrumentation_is_said(tmp_path, sim_root):
    """--mem-fraction-static 0.75 / 0.755 / 0.85 at --context-length 32768 with the seed's DEBUG
    profile_max_num_token print: 0.75 fails (below 0.753), 0.755 starts with a pool of 2,305 tokens — fewer than one
    32k request —, 0.85 starts with 137,178. The debug print's rest is ≤ 0 where the launch failed and > 0 where it
    allocated a pool: it is right in every run. Truth: 0.755 starts and is no use; the instrumentation agrees.

    The kit before: 0.755 "starts" (ready), the pool only a number in the budget table, and nothing said of the
    instrumentation that agrees."""
    fractions = "  mem_fraction:\n" + "\n".join(f'    "{f}": {{flags: {{--mem-fraction-static: "{f}"}}}}'
                                                for f in ("0.75", "0.755", "0.85"))
    run_dir, v, report = batch(tmp_path, "tiny-pool", fractions, '{mem_fraction: "0.85"}',
                               extra=', --context-length, "32768"', env='{SIM_DEBUG_PROFILE: "1"}')
    for name, status in statuses(run_dir).items():  # its record says so when the run ends, with the numbers
        if "0.755" in name:
            assert status["status"] == "degraded" and status["failure_reason"] == "kv_pool_below_context", status
            assert "its KV pool holds 2,305 tokens, fewer than one request" in status["failure_message"]
    stratum = v["factors"]["mem_fraction"]["strata"][0]["levels"]["0.755"]
    assert stratum["ready"] == 0 and stratum["outcomes"] == {
        "starts but its KV pool cannot hold one request at its context length": 2}
    [unusable] = [f for f in v["findings"] if f["kind"] == "unusable"]
    assert "its KV pool holds 2,305 tokens, fewer than one request at its context length (32,768 tokens)" in \
        unusable["detail"]
    [agrees] = [f for f in v["findings"] if f["kind"] == "instrumentation agrees"]
    assert "right in every run that printed it" in agrees["detail"] and "rest ≤ 0 in 2 run(s)" in agrees["detail"]
    assert "**The server's own instrumentation agrees with every outcome:**" in report
    assert "**Some launches start with a KV pool too small for one request:**" in report
    assert "the server's own instrumentation agrees with every outcome" in report.split("\n## ", 1)[0]
    # the same at 0.85 with the simulated model's own short context: a pool that holds a request is ready
    assert all(s["status"] == "ready" for n, s in statuses(run_dir).items() if "0.85" in n)
    assert v["factors"]["mem_fraction"]["strata"][0]["levels"]["0.85"]["ready"] == 2
