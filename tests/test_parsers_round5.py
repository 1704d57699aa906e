"""Issue 66: the last misses of the held-out sets — a regression (a max seq len the KV cache cannot hold, read as "no
memory"), phases only frames show, versions where they are, and LMDeploy as a server kind.

Every log here is a real excerpt (tests/fixtures/real-logs-5; SOURCES.md names each thread), its INDEX.md oracle
written before the parser ran; tests/test_real_logs.py checks every key of those oracles. These tests say what each
class means for a user: the reason and the fix diagnose prints, the kind detected, the draft, the level checks."""

from __future__ import annotations

import subprocess

import pytest

from conftest import DATA, LAUNCHLAB
from launchlab import logparse, params
from launchlab.logparse import logfacts
from launchlab.runner import diagnose, draft
from launchlab.verdicts.levelchecks import CONFIRMED, CONTRADICTED, run_checks

ROUND5 = DATA / "real-logs-5"
MAX_LEN = sorted(ROUND5.glob("vllm-*max-seq-len*.log"))
LMDEPLOY = sorted(ROUND5.glob("lmdeploy-*.log"))


@pytest.mark.parametrize("log", MAX_LEN, ids=lambda p: p.name.split("-check")[0])
def test_a_max_seq_len_the_kv_cache_cannot_hold_is_its_own_reason_under_the_frames_that_name_the_check(log):
    """The regression: `_check_enough_kv_cache_memory(` above the ValueError made it `kv_cache_no_memory` (more
    memory), where the fix is a shorter --max-model-len. The ValueError's own line is the message."""
    parsed = logparse.parse_file(log)
    assert parsed.failure.reason == "max_len_exceeds_kv", parsed.failure
    assert parsed.failure.message.startswith("ValueError: To serve at least one request")
    assert parsed.ranks["0"]["max_model_len"] in (100000, 131072)
    assert parsed.ranks["0"]["kv_needed_gib"] > parsed.ranks["0"]["kv_avail_gib"]


def test_diagnose_says_the_fix_of_a_max_length_failure_with_the_servers_own_figures(tmp_path):
    [log] = [p for p in MAX_LEN if "tpu" in p.name]
    said = diagnose.text(diagnose.diagnose([log]))
    assert "failed: max_len_exceeds_kv in kv_cache" in said
    assert "the fix: lower --max-model-len" in said
    assert "needs 16 GiB of KV cache, 0.71 GiB are there" in said and "the server estimates 5,632 fit" in said


@pytest.mark.parametrize("name", ["trtllm-backend-issue366-maxtokensinpagedkvcache.log",
                                  "trtllm-issue494-triton-maxtokensinpagedkvcache.log"])
def test_tensorrt_llms_cache_too_small_for_one_sequence_is_the_same_reason_and_fix(name):
    """TensorRT-LLM's `maxTokensInPagedKvCache … must be large enough to process at least 1 sequence to completion`
    (real-logs-round3, filed as "no memory" there until this issue): the cache cannot hold one longest sequence."""
    found = diagnose.diagnose([DATA / "real-logs-round3" / name])
    assert found.failure.reason == "max_len_exceeds_kv"
    assert "the fix: lower the engine's max_seq_len" in diagnose.text(found)


def test_a_wrapped_max_length_message_is_read_whole():
    """The Intel Arc paste broke the ValueError at 120 columns ("… (4.26 GiB KV cach" / "e is needed, … (4.25 GiB)"):
    the available memory is on the second line."""
    [log] = [p for p in MAX_LEN if "intel-arc" in p.name]
    fields = logparse.parse_file(log).ranks["0"]
    assert (fields["kv_needed_gib"], fields["kv_avail_gib"]) == (4.26, 4.25)


@pytest.mark.parametrize(("name", "phase"), [
    ("vllm-issue6732-v0.5.3-workerprocess-init-device-init-worker-distributed-environment.log", "dist_init"),
    ("vllm-issue16707-v0-ray-init-device-nccl-error-repeated-across-cluster.log", "dist_init"),
    ("trtllm-issue2708-kvcachemanager-assert-forwardasync.log", "kv_cache"),
    ("lmdeploy-issue3154-turbomind-api-server-create-weight-traceback.log", "weights"),
])
def test_the_frames_place_the_failure(name, phase):
    parsed = logparse.parse_file(ROUND5 / name)
    assert parsed.failure is not None and parsed.failure.phase == phase, parsed.failure


def test_a_version_only_an_eggs_install_path_states_is_read():
    log = ROUND5 / "vllm-ray-issue44533-v0.3.3-egg-path-init-device-all-reduce.log"
    assert logfacts.read(log, logparse.parse_file(log))["server_version"] == "0.3.3+cu122"


@pytest.mark.parametrize("log", LMDEPLOY, ids=lambda p: p.name.split("-")[1])
def test_every_lmdeploy_excerpt_is_detected_as_lmdeploy(log):
    assert logparse.detect(log) == "lmdeploy"


def test_lmdeploys_engine_configuration_gives_its_args_its_tp_and_its_backend():
    parsed = logparse.parse_file(ROUND5 / "lmdeploy-issue2229-turbomind-model-config-tensor-para-size-2-weights.log")
    assert parsed.args["tensor_para_size"] == "2" and parsed.args["cache_max_entry_count"] == "0.8"
    assert parsed.parallel["tp"] == 2 and not parsed.parallel["tp_at_least"]
    assert parsed.facts["backend"] == "turbomind" and parsed.phase_reached == "weights"


def test_diagnose_drafts_an_lmdeploy_launch_whose_model_is_left_to_fill_in(tmp_path):
    log = ROUND5 / "lmdeploy-issue3971-turbomind-engine-config-tp1-cuda-oom.log"
    found = diagnose.diagnose([log])
    assert found.kind.name == "lmdeploy" and found.failure.reason == "cuda_oom"
    out = tmp_path / "params" / "d.yaml"
    draft.write(draft.make(found, draft.Options(host="gpu-box")), out, force=False)
    exp = params.load(out)
    assert exp.server.kind == "lmdeploy"
    assert exp.server.command[:4] == ["lmdeploy", "serve", "api_server", "TODO-model"]
    command = " ".join(exp.server.command)
    assert "--tp 1" in command and "--server-port {port}" in command
    # out of memory with no free-memory figure in the log: the cache's share is a factor by rule, not prediction
    assert "--cache-max-entry-count" not in command
    assert {level: v.flags for level, v in exp.factors["cache_max_entry_count"].items()} == \
        {"0.8": {"--cache-max-entry-count": "0.8"}, "0.4": {"--cache-max-entry-count": "0.4"}}
    assert exp.baseline == {"cache_max_entry_count": "0.8"} and "half, by rule" in out.read_text()
    refused = subprocess.run([*LAUNCHLAB, "validate", str(out)], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "`TODO-model` is a placeholder the kit wrote" in refused.stderr


def test_an_lmdeploy_launch_that_failed_but_not_for_memory_gets_no_memory_factor(tmp_path):
    log = ROUND5 / "lmdeploy-issue3154-turbomind-api-server-create-weight-traceback.log"
    found = diagnose.diagnose([log])
    assert found.kind.name == "lmdeploy" and found.failure.reason not in ("cuda_oom", "kv_cache_no_memory")
    parts = draft._Parts()
    draft._memory(found, draft.Options(host="gpu-box"), parts)
    assert parts.factors == {}


def test_the_verdict_reads_an_lmdeploy_level_from_its_engine_configuration():
    """--cache-max-entry-count is checked against the `cache_max_entry_count=` the engine printed: the level the
    log shows is confirmed, another contradicted."""
    exp = params.loads("""
experiment: lmdeploy-cache
hosts: {gpu: {transport: local}}
server:
  kind: lmdeploy
  command: [lmdeploy, serve, api_server, /models/m, --server-port, "{port}"]
factors:
  cache: {"0.8": {flags: {--cache-max-entry-count: "0.8"}}, "0.5": {flags: {--cache-max-entry-count: "0.5"}}}
baseline: {cache: "0.8"}
""", "lmdeploy-cache.yaml")
    log = logparse.parse_file(ROUND5 / "lmdeploy-issue3971-turbomind-engine-config-tp1-cuda-oom.log").to_json()
    for variant in params.expand(exp):
        level = variant.levels["cache"]
        [(check, state, _)] = [row for row in run_checks(exp, variant, "cache", level, log=log)]
        assert check == f"cache_max_entry_count={level}"
        assert state == (CONFIRMED if level == "0.8" else CONTRADICTED)
