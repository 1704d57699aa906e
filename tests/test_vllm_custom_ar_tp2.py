"""Issue 31's experiment, before it runs on two H200s: its params files validate and dry-run with the commands the
run path would launch, and the level check reads each rank's custom all-reduce state from real TP=2 logs.

Nothing is launched here (no GPU): `launchlab validate` and `launchlab run --dry-run` as a user calls them, the
launch the run path renders (params.render), and the level checks over real vLLM tensor-parallel-size 2 excerpts
(fixtures/real-logs-tp2, whose INDEX.md gives each rank's state as the log states it).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import DATA, LAUNCHLAB, ROOT
from launchlab import logparse
from launchlab.params import expand, load, render
from launchlab.verdicts import levelchecks

FACTORIAL = ROOT / "params/vllm-custom-ar-tp2.yaml"
SEARCH = ROOT / "params/vllm-custom-ar-tp2-threshold.yaml"
TP2 = DATA / "real-logs-tp2"
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
OFF = "--disable-custom-all-reduce"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHLAB, *args], capture_output=True, text=True, timeout=120)


def dry_run_variants(stdout: str) -> dict[str, dict]:
    """The dry run's per-variant blocks: `custom_ar=off, utilization=0.02:` → {argv: [...], env: {...}}."""
    variants, current = {}, None
    for line in stdout.splitlines():
        if re.fullmatch(r"\S+=\S+(, \S+=\S+)*:", line):
            current = variants.setdefault(line[:-1], {"argv": None, "env": {}})
        elif current is not None and line.startswith("  argv: "):
            current["argv"] = line.removeprefix("  argv: ").split()
        elif current is not None and line.startswith("  env:  "):
            name, _, value = line.removeprefix("  env:  ").partition("=")
            current["env"][name] = value
    return variants


def assert_tp2_launch(levels: str, argv: list[str], env: dict[str, str]) -> None:
    """TP 2, the off flag only for custom_ar=off, NVLS multicast off in every server's environment."""
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2", argv
    assert (OFF in argv) == ("custom_ar=off" in levels), (levels, argv)
    assert {k: env.get(k) for k in NO_MULTICAST} == NO_MULTICAST, (levels, env)


@pytest.mark.parametrize("params", [FACTORIAL, SEARCH], ids=lambda p: p.name)
def test_the_tp2_params_files_validate(params):
    proc = cli("validate", str(params))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "valid" in proc.stdout


def test_the_factorial_dry_run_plans_custom_ar_on_and_off_at_two_shares_three_times_after_a_warm_up(tmp_path):
    proc = cli("run", str(FACTORIAL), "--dry-run", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "12 runs" in proc.stdout and "1 warm-up run(s)" in proc.stdout and "nothing is launched" in proc.stdout
    variants = dry_run_variants(proc.stdout)
    assert set(variants) == {f"custom_ar={ar}, utilization={u}" for ar in ("on", "off") for u in ("0.003", "0.02")}
    for levels, launch in variants.items():
        assert_tp2_launch(levels, launch["argv"], launch["env"])
        share = levels.rsplit("=", 1)[1]
        assert launch["argv"][launch["argv"].index("--gpu-memory-utilization") + 1] == share
    assert not (tmp_path / "out").exists()


def test_the_threshold_dry_run_searches_the_utilization_per_custom_ar_level(tmp_path):
    proc = cli("run", str(SEARCH), "--dry-run", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "threshold search over --gpu-memory-utilization" in proc.stdout and "at most 18 runs" in proc.stdout
    variants = dry_run_variants(proc.stdout)
    assert set(variants) == {f"custom_ar={ar}, gpu_memory_utilization={u}" for ar in ("on", "off")
                             for u in ("0.004", "0.010")}
    for levels, launch in variants.items():
        assert_tp2_launch(levels, launch["argv"], launch["env"])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("params", [FACTORIAL, SEARCH], ids=lambda p: p.name)
def test_the_run_path_renders_the_same_tp2_launch_for_every_variant(params):
    """What the lifecycle starts (params.render), not only what the dry run prints."""
    exp = load(params)
    assert exp.hosts["gpu"].gpus == 2
    for variant in expand(exp):
        spec = render(exp, variant, port=8123, run_id="r1", host="gpu")
        levels = ", ".join(f"{k}={v}" for k, v in variant.levels.items())
        assert_tp2_launch(levels, list(spec.argv), spec.env)
        assert "CUDA_VISIBLE_DEVICES" not in spec.env  # both GPUs of the host go to the one server


def parsed(name: str) -> dict:
    return logparse.parse_file(TP2 / name).to_json()


def checks_of(levels: dict[str, str], name: str) -> dict[str, dict]:
    exp = load(FACTORIAL)
    rows = levelchecks.level_checks(exp, [{"run_id": "r1", "levels": levels}], {"r1": parsed(name)})
    return {row["check"]: row for row in rows if row["factor"] == "custom_ar"}


def verdict(row: dict) -> str:
    return next(k.removeprefix("runs_") for k in ("runs_confirmed", "runs_contradicted", "runs_unknown") if row[k])


@pytest.mark.parametrize(("level", "name", "check", "want", "detail"), [
    ("on", "club3090-issue552-worker-tp2-registering-graph-pool.log", "custom all-reduce active", "confirmed",
     "confirms it in 1 of 1"),
    ("on", "vllm-pr37296-worker-tp2-registering-kv-graph-estimate.log", "custom all-reduce active", "confirmed",
     "confirms it in 1 of 1"),
    ("off", "club3090-issue922-tp2-disable-custom-all-reduce-args.log", "custom all-reduce inactive", "confirmed",
     "confirms it in 1 of 1"),
    ("on", "vllm-issue22303-v1-tp2-vllmworker-rank-p2p-disabled.log", "custom all-reduce active", "contradicted",
     "disabled on ranks 0 (no_p2p)"),
    ("on", "vllm-issue42609-tp2-dp1-custom-allreduce-cuh-455-worker1-died.log", "custom all-reduce active",
     "confirmed", "took effect and failed in its own code in 1 of 1 runs (r1): custom all-reduce failed in its own "
     "code on ranks 0 (cuda_error"),
    ("on", "vllm-pr37296-apiserver-tp2-banner-non-default-args.log", "custom all-reduce active", "unknown",
     "does not show it"),
])
def test_each_ranks_custom_ar_state_in_a_real_tp2_log_is_a_level_check(level, name, check, want, detail):
    """The level a run asked for against the state its ranks' lines give: Registering on each rank confirms "on",
    the arguments' disable flag confirms "off", vLLM disabling it by itself (no P2P) contradicts "on", its kernel
    failing and ending the launch confirms it (it took effect: its own code failed — issue 47), and a log that says
    nothing leaves it unknown."""
    rows = checks_of({"custom_ar": level, "utilization": "0.02"}, name)
    assert verdict(rows[check]) == want, rows
    assert detail in rows[check]["detail"], rows[check]


def test_the_off_level_is_also_confirmed_by_the_flag_in_the_servers_own_arguments():
    rows = checks_of({"custom_ar": "off", "utilization": "0.02"}, "club3090-issue922-tp2-disable-custom-all-reduce-args.log")
    assert verdict(rows["disable_custom_all_reduce=True"]) == "confirmed", rows
