"""The server's own account of its arguments → ParsedLog.args, every value exactly as printed."""

import re

from launchlab.logparse import sglang, transformers, vllm
from launchlab.logparse.arguments import call_arguments, config_arguments, mapping_arguments

# an SGLang 0.5.x server_args line (one line in the log; wrapped here), with nested brackets and quotes in values
SERVER_ARGS = (
    "[2025-11-30 11:17:31] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tokenizer_path='Qwen/Qwen3-8B', "
    "tokenizer_mode='auto', tokenizer_worker_num=1, skip_tokenizer_init=False, load_format='auto', "
    "model_loader_extra_config='{}', trust_remote_code=False, context_length=None, is_embedding=False, "
    "enable_multimodal=None, revision=None, model_impl='auto', host='127.0.0.1', port=30000, "
    "skip_server_warmup=False, warmups=None, nccl_port=None, dtype='auto', quantization=None, "
    "quantization_param_path=None, kv_cache_dtype='auto', mem_fraction_static=0.55, max_running_requests=None, "
    "max_queued_requests=9223372036854775807, max_total_tokens=None, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, schedule_policy='fcfs', schedule_conservativeness=1.0, page_size=1, "
    "hybrid_kvcache_ratio=None, swa_full_tokens_ratio=0.8, disable_hybrid_swa_memory=False, device='cuda', "
    "tp_size=4, pp_size=1, pp_max_micro_batch_size=None, stream_interval=1, stream_output=False, random_seed=42, "
    "constrained_json_whitespace_pattern=None, watchdog_timeout=300, dist_timeout=None, download_dir=None, "
    "base_gpu_id=0, gpu_id_step=1, sleep_on_idle=False, log_level='info', log_level_http=None, log_requests=False, "
    "log_requests_level=2, crash_dump_folder=None, show_time_cost=False, enable_metrics=False, "
    "bucket_time_to_first_token=None, bucket_inter_token_latency=None, bucket_e2e_request_latency=None, "
    "collect_tokens_histogram=False, prompt_tokens_buckets=None, generation_tokens_buckets=None, "
    "decode_log_interval=40, enable_request_time_stats_logging=False, kv_events_config=None, "
    "json_model_override_args='{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}', "
    "preferred_sampling_params=None, enable_lora=None, max_lora_rank=None, lora_target_modules=None, "
    "lora_paths=None, attention_backend=None, sampling_backend='flashinfer', grammar_backend='xgrammar', "
    "speculative_algorithm=None, ep_size=1, moe_a2a_backend='none', enable_flashinfer_allreduce_fusion=False, "
    "deepep_mode='auto', init_expert_location='trivial', hicache_ratio=2.0, hicache_storage_backend=None, "
    "cuda_graph_max_bs=512, cuda_graph_bs=[1, 2, 4, 8, 16, 24, 32], disable_cuda_graph=False, "
    "disable_cuda_graph_padding=False, enable_profile_cuda_graph=False, enable_nccl_nvls=False, "
    "enable_symm_mem=False, disable_custom_all_reduce=True, enable_mscclpp=False, disable_overlap_schedule=False, "
    "enable_dp_attention=False, enable_torch_compile=False, torch_compile_max_bs=32, "
    "allow_auto_truncate=False, enable_custom_logit_processor=False, tool_call_parser=None, "
    "reasoning_parser=None, chat_template=None, completion_template=None, file_storage_path='sglang_storage', "
    "api_key=None, served_model_name='Qwen/Qwen3-8B', weight_loader_disable_mmap=False, "
    "decrypted_config_file=None, decrypted_draft_config_file=None, enable_deterministic_inference=False)\n"
)


def lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def test_every_top_level_argument_of_a_long_server_args_line_is_kept_as_text():
    parsed = sglang.parse(lines(SERVER_ARGS))
    args = parsed.args
    assert list(args) == re.findall(r"(?:\(|, )(\w+)=", SERVER_ARGS)  # every name, in order
    assert args["mem_fraction_static"] == "0.55" and args["tp_size"] == "4"
    assert args["disable_custom_all_reduce"] == "True" and args["context_length"] == "None"
    assert args["model_path"] == "Qwen/Qwen3-8B" and args["host"] == "127.0.0.1"  # strings without their quotes
    assert args["cuda_graph_bs"] == "[1, 2, 4, 8, 16, 24, 32]"
    assert args["json_model_override_args"] == '{"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}'
    assert args["schedule_conservativeness"] == "1.0" and args["enable_deterministic_inference"] == "False"
    assert parsed.to_json()["args"] == args
    assert [(e.field, e.value) for e in parsed.events] == [("mem_fraction_static", 0.55), ("tp_size", 4.0)]


def test_a_server_args_line_cut_short_keeps_the_arguments_before_the_cut():
    parsed = sglang.parse(lines(SERVER_ARGS[:SERVER_ARGS.index("schedule_policy") + 20] + "\n"))
    assert parsed.args["mem_fraction_static"] == "0.55"
    assert "tp_size" not in parsed.args


def test_sglang_automatic_reduction_is_an_adjusted_argument_not_an_argument():
    parsed = sglang.parse(lines(
        "[2025-07-14 14:05:12] server_args=ServerArgs(model_path='moonshotai/Kimi-VL-A3B-Thinking', "
        "mem_fraction_static=0.6, tp_size=1)\n"
        "[2025-07-14 14:05:13] Automatically reduce --mem-fraction-static to 0.540 because this is a multimodal model.\n"))
    assert parsed.args["mem_fraction_static"] == "0.6"
    assert parsed.adjusted_args == {"mem_fraction_static": "0.540"}
    assert [e.value for e in parsed.events if e.field == "mem_fraction_static"] == [0.6, 0.54]


def test_what_sglang_announces_it_did_not_take_is_an_override_with_its_line():
    """Issue 63: a value the server replaced (the profiled pool for a cap above it; the multimodal reduction of the
    fraction) or a flag it takes and ignores (SGLang's DeprecatedAction, in its yellow ANSI) — each kept with the
    line that says so, so the level checks call that level overridden, never confirmed by the argument dump."""
    parsed = sglang.parse(lines(
        "[2026-01-01 00:00:00] \x1b[1;33mThe command line argument '--enable-old-thing' is deprecated and will be "
        "removed in future versions.\x1b[0m\n"
        "[2026-01-01 00:00:01] server_args=ServerArgs(model_path='m', mem_fraction_static=0.6, max_total_tokens=2000000, "
        "tp_size=2)\n"
        "[2026-01-01 00:00:02] Automatically reduce --mem-fraction-static to 0.540 because this is a multimodal model.\n"
        "[2026-01-01 00:00:09 TP0] max_total_tokens=2000000 is larger than the profiled value 137178. Use the profiled "
        "value instead.\n"))
    assert parsed.overrides["max_total_tokens"] == {
        "asked": "2000000", "used": "137178",
        "line": "max_total_tokens=2000000 is larger than the profiled value 137178. Use the profiled value instead."}
    assert parsed.overrides["mem_fraction_static"]["asked"] == "0.6"
    assert parsed.overrides["mem_fraction_static"]["used"] == "0.540"
    assert parsed.overrides["enable_old_thing"]["used"] is None
    assert parsed.to_json()["overrides"] == parsed.overrides
    # a profiled value of zero or less is no override: it is SGLang's failure to size a pool at all
    failed = sglang.parse(lines("[2026-01-01 00:00:09 TP0] max_total_tokens=2000000 is larger than the profiled value "
                                "-561981. Use the profiled value instead.\n"))
    assert failed.overrides == {} and failed.failure is not None and failed.failure.reason == "kv_cache_no_memory"


def test_vllm_non_default_args_dict_is_read_with_values_as_printed():
    parsed = vllm.parse(lines(
        "(APIServer pid=3413524) INFO 12-01 19:48:40 [entrypoints/utils.py:253] non-default args: "
        "{'model_tag': 'Qwen/Qwen3-8B', 'api_server_count': 1, 'model': 'Qwen/Qwen3-8B', 'max_model_len': 4096, "
        "'enforce_eager': True, 'gpu_memory_utilization': 0.9, 'tensor_parallel_size': 2, "
        "'disable_custom_all_reduce': True, 'compilation_config': {\"level\": 0, \"cudagraph_capture_sizes\": [1, 2]}, "
        "'served_model_name': ['qwen, the small one'], 'kv_cache_memory_bytes': None}\n"))
    assert parsed.args == {
        "model_tag": "Qwen/Qwen3-8B", "api_server_count": "1", "model": "Qwen/Qwen3-8B", "max_model_len": "4096",
        "enforce_eager": "True", "gpu_memory_utilization": "0.9", "tensor_parallel_size": "2",
        "disable_custom_all_reduce": "True", "compilation_config": '{"level": 0, "cudagraph_capture_sizes": [1, 2]}',
        "served_model_name": "['qwen, the small one']", "kv_cache_memory_bytes": "None"}
    assert parsed.facts.get("engine") == "v1" and parsed.pids == {"api_server": 3413524}


def test_vllm_namespace_and_engine_config_lines_are_read_and_the_config_wins():
    parsed = vllm.parse(lines(
        "INFO 02-22 22:08:41 api_server.py:913] args: Namespace(host=None, port=8000, uvicorn_log_level='info', "
        "allowed_origins=['*'], model='Qwen/Qwen2.5-7B', tensor_parallel_size=2, gpu_memory_utilization=0.85, "
        "disable_custom_all_reduce=False, enforce_eager=False, max_model_len=None)\n"
        "INFO 02-22 22:08:50 llm_engine.py:234] Initializing an LLM engine (v0.7.3) with config: "
        "model='Qwen/Qwen2.5-7B', speculative_config=None, tokenizer='Qwen/Qwen2.5-7B', tokenizer_mode=auto, "
        "dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=2, pipeline_parallel_size=1, "
        "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto,  "
        "device_config=cuda, decoding_config=DecodingConfig(guided_decoding_backend='xgrammar'), seed=0, "
        "served_model_name=Qwen/Qwen2.5-7B, use_cached_outputs=True, "
        "compilation_config={\"splitting_ops\":[],\"compile_sizes\":[],\"max_capture_size\":256}, "
        "use_cached_outputs=True\n"))
    args = parsed.args
    assert args["gpu_memory_utilization"] == "0.85" and args["allowed_origins"] == "['*']"
    assert args["max_model_len"] == "None" and args["max_seq_len"] == "32768"
    assert args["tokenizer_mode"] == "auto" and args["device_config"] == "cuda"
    assert args["decoding_config"] == "DecodingConfig(guided_decoding_backend='xgrammar')"
    assert args["compilation_config"] == '{"splitting_ops":[],"compile_sizes":[],"max_capture_size":256}'
    assert parsed.facts.get("engine") == "v0"
    assert parsed.custom_ar == {}


def test_argument_splitters_keep_nesting_and_drop_only_the_quotes_of_whole_strings():
    assert call_arguments("a=1, b='x, y', c=[1, (2, 3)], d={'k': ')'}) tail=9") == {
        "a": "1", "b": "x, y", "c": "[1, (2, 3)]", "d": "{'k': ')'}"}
    assert mapping_arguments("'a': 'it\\'s', 'b': 0.10}") == {"a": "it's", "b": "0.10"}
    assert config_arguments("name=it's fine, n=2") == {"name": "it's fine", "n": "2"}


def test_transformers_continuous_batching_flag_is_an_argument():
    parsed = transformers.parse(lines(
        "[transformers] [Request received] Model: /tmp/tinyllama@main, CB: True\n"))
    assert parsed.args == {"continuous_batching": "True"}
