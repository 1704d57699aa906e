"""What round 3's parsers must do on inputs an adversarial review built from real formats (fixtures/constructed-round3,
whose README says what each is built from): no false failure on a ready server, no secret kept, the deepest frame's
phase, failures read after ready, and no traceback mode left open by a warning's stack."""

from __future__ import annotations

import pytest

from conftest import DATA
from launchlab import logparse
from launchlab.logparse.common import CHUNK_BYTES

CASES = DATA / "constructed-round3"


def parse(name: str, server: str = "auto"):
    return logparse.parse_file(CASES / name, server=server)


# name → (server, ready, (reason, phase) of the failure or None)
EXPECTED = {
    "vllm_graphbreak_ready.log": ("vllm", True, None),  # a warning's stack is not a traceback's
    "tgi_graph_oom_ready.log": ("tgi", True, None),  # TGI caught it and became ready
    "sglang_tb_capture_car.log": ("sglang", False, ("custom_allreduce_failed", "cuda_graph")),
    "trtllm_tb_frames.log": ("trtllm", False, ("cuda_oom", "weights")),  # load_model, below it torch's frames
    "trtllm_unwrapped_cudamalloc.log": ("trtllm", False, ("cuda_oom", "weights")),
    "trtllm_ready_then_error.log": ("trtllm", True, ("exception", "ready")),  # read after ready: degraded
    "trtllm_triton_ready.log": ("trtllm", True, None),
    "vllm_bash_bus_error.log": ("vllm", False, ("exception", "startup")),
    "tgi_ready_shard_crash.log": ("tgi", True, ("exception", "ready")),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_constructed_log_parses_to_what_its_format_means(name):
    server, ready, failure = EXPECTED[name]
    parsed = parse(name)
    assert (parsed.server, parsed.ready) == (server, ready)
    got = None if parsed.failure is None else (parsed.failure.reason, parsed.failure.phase)
    assert got == failure, parsed.failure


def test_llama_cpps_retry_line_alone_is_no_failure():
    parsed = parse("llama_retry_only.log", server="llamacpp")
    assert parsed.failure is None


def test_tgi_args_keep_no_secret_and_read_through_a_collectors_prefix():
    secret = parse("tgi_args_secret.log")
    text = repr(secret.args)
    for word in ("SECRET", "hf_", "api_key", "ngrok_authtoken", "ngrok_edge", "otlp_endpoint"):
        assert word not in text, secret.args
    assert secret.args["num_shard"] == "1"
    prefixed = parse("tgi_compose_args2.log")
    assert prefixed.args["num_shard"] == "2" and prefixed.args["model_id"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert "hf_hub" not in prefixed.args  # the line after the block's closing `}` is not an argument


def test_a_ready_vllm_log_with_a_warnings_stack_is_not_read_line_by_line_after_it(tmp_path):
    # the stack left the parser waiting for an exception line that never came: every later chunk was read (42 s
    # for 100 MB instead of 0.4 s); the whole log must now be skipped chunk by chunk after it
    from launchlab.logparse.common import scan_file

    log = tmp_path / "long.log"
    access = b'INFO:     127.0.0.1:50000 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    log.write_bytes((CASES / "vllm_graphbreak_ready.log").read_bytes() + access * (4 * CHUNK_BYTES // len(access)))
    parser = logparse.parser_for("vllm")
    parsed = scan_file(parser, log)
    assert parsed.ready and parsed.failure is None and not parser.wants_every_line
