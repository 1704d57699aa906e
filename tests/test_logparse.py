from conftest import DATA
from launchlab import logparse
from launchlab.logparse import generic, sglang, vllm

LOGS = DATA / "real-logs"


def lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def test_ranks_come_from_the_tp_tag_and_untagged_lines_are_rank_0():
    parsed = sglang.parse(lines(
        "[2025-10-16 10:00:00 TP3] Load weight begin. avail mem=137.29 GB\n"
        "[2025-10-16 10:00:00 DP1 TP1] Load weight begin. avail mem=137.30 GB\n"
        "[2025-10-16 10:00:00] Load weight begin. avail mem=20.00 GB\n"))
    assert parsed.ranks == {"3": {"weights_begin_avail_gib": 137.29}, "1": {"weights_begin_avail_gib": 137.30},
                            "0": {"weights_begin_avail_gib": 20.0}}


def test_dp_tags_key_ranks_by_tp_rank_as_the_interface_says_and_stages_apart():
    # the stable interface keys ranks by TP rank (`DP1 TP1` → "1"): without DP attention two DP groups' TP rank 0
    # (sglang #5034: `DP1 TP0`, `DP0 TP0`) share "0", the last line printed wins; a pipeline stage keys apart
    # (sglang #14495: `DP4 PP0 TP4`); every DP rank seen is in dp_ranks
    parsed = sglang.parse(lines(
        "[2025-04-03 20:06:30 DP1 TP0] Load weight end. avail mem=40.00 GB, mem usage=30.00 GB.\n"
        "[2025-04-03 20:06:30 DP0 TP0] Load weight end. avail mem=41.00 GB, mem usage=29.00 GB.\n"
        "[2025-12-05 09:06:30 DP10 PP0 TP4] Load weight end. avail mem=42.00 GB, mem usage=28.00 GB.\n"
        "[2025-12-05 09:06:30 DP2 PP1 TP4] Load weight end. avail mem=43.00 GB, mem usage=27.00 GB.\n"
        "[2025-12-05 09:06:37 DP2 PP1 TP4] Scheduler hit an exception: Traceback (most recent call last):\n"
        "RuntimeError: boom\n"))
    assert set(parsed.ranks) == {"0", "pp0.4", "pp1.4"}
    assert parsed.ranks["pp0.4"]["weights_mem_gib"] == 28.0 and parsed.ranks["pp1.4"]["weights_mem_gib"] == 27.0
    assert list(parsed.to_json()["ranks"]) == ["0", "pp0.4", "pp1.4"]
    assert parsed.dp_ranks == {"0", "1", "2", "10"}
    assert parsed.failure.message == "RuntimeError: boom"


def test_vllm_workers_are_keyed_by_their_tp_rank_whatever_else_their_tag_names():
    # worker tags of real logs: `Worker_DP1_TP1_EP3` (vllm #53013), `VllmWorker PP1_TP1` (vllm-gfx906 #44)
    parsed = vllm.parse(lines(
        "(Worker_DP1_TP1_EP3 pid=12) INFO 08-19 05:56:57 [gpu_model_runner.py:6936] Estimated CUDA graph memory: "
        "2.50 GiB total\n"
        "(VllmWorker PP1_TP0 pid=13) INFO 09-29 05:48:47 [gpu_model_runner.py:6936] Estimated CUDA graph memory: "
        "3.50 GiB total\n"))
    assert {rank: fields["graph_estimate_gib"] for rank, fields in parsed.ranks.items()} == {"1": 2.5, "0": 3.5}


def test_rank_keys_sort_in_number_order_and_a_key_of_another_form_sorts_last():
    from launchlab.logparse.parsedlog import rank_order

    keys = ["10", "pp10.0", "2", "pp2.1", "worker", "pp2.0"]
    assert sorted(keys, key=rank_order) == ["2", "10", "pp2.0", "pp2.1", "pp10.0", "worker"]


def test_a_pipeline_stage_keys_its_ranks_apart_whatever_the_tag_order():
    # tag orders of real logs: `TP2 PP0` (sglang #10046, 2025-09), `PP1 TP0` (#17941), `DP0 PP1 TP0` (2026)
    parsed = sglang.parse(lines(
        "[2025-09-04 18:09:42 TP2 PP0] Load weight end. avail mem=40.00 GB, mem usage=30.00 GB.\n"
        "[2026-01-29 13:12:36 PP1 TP2] Load weight end. avail mem=41.00 GB, mem usage=29.00 GB.\n"
        "[2026-06-28 23:41:27 DP0 PP1 TP0] Load weight end. avail mem=42.00 GB, mem usage=28.00 GB.\n"))
    assert {rank: fields["weights_mem_gib"] for rank, fields in parsed.ranks.items()} == \
        {"pp0.2": 30.0, "pp1.2": 29.0, "pp1.0": 28.0}


def test_a_hard_scheduler_watchdog_timeout_is_a_failure_and_a_soft_one_is_not():
    # wordings of the sglang source: the older one, and the newer with its soft flag (soft only dumps the stacks)
    hard = sglang.parse(lines("[2026-01-29 13:12:36 PP1 TP0] Scheduler watchdog timeout "
                              "(self.watchdog_timeout=300, self.soft=False)\n"))
    soft = sglang.parse(lines("[2026-01-29 13:12:36 PP1 TP0] Scheduler watchdog timeout "
                              "(self.watchdog_timeout=300, self.soft=True)\n"))
    assert hard.failure is not None and hard.failure.reason == "exception" and hard.failure.line == 1
    assert soft.failure is None


def test_a_foreign_prefix_ansi_and_a_progress_bar_do_not_hide_a_line():
    parsed = sglang.parse(lines(
        "sglang-1  | \x1b[32m[2025-10-16 10:00:00 TP0] Memory pool end. avail mem=40.03 GB\x1b[0m\n"
        "Capturing batches (bs=1 avail_mem=38.07 GB): 100%|███| 52/52\r[2025-10-16 10:00:05 TP0] Capture cuda graph end."
        " Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB.\n"))
    assert parsed.ranks["0"] == {"pool_end_avail_gib": 40.03, "graph_s": 5.37, "graph_mem_gib": 1.44,
                                 "graph_end_avail_gib": 38.05}
    assert parsed.phase_reached == "cuda_graph"


def test_a_second_ranks_capture_end_glued_to_the_first_ranks_bar_is_that_ranks():
    """Issue 66, 5 (no public log of this form was found: this is the form the held-out miss names): TP1's end record
    right after TP0's bar, no carriage return between; each rank keeps its own pool memory."""
    parsed = sglang.parse(lines(
        "100%|██████████| 23/23 [00:05<00:00,  4.2it/s][2025-03-08 10:00:05 TP1] Capture cuda graph end. Time "
        "elapsed: 5.6 s. mem usage=0.40 GB. avail mem=1.05 GB.\n[2025-03-08 10:00:05 TP0] Capture cuda graph end. "
        "Time elapsed: 5.5 s. mem usage=0.41 GB. avail mem=1.04 GB.\n"))
    assert parsed.ranks["1"] == {"graph_s": 5.6, "graph_mem_gib": 0.4, "graph_end_avail_gib": 1.05}
    assert parsed.ranks["0"]["graph_mem_gib"] == 0.41


def test_a_log_cut_off_mid_startup_has_no_failure():
    parsed = logparse.parse_file(LOGS / "sglang-pr11716-tp8-init-dist-load-begin.log")
    assert parsed.ready is False and parsed.failure is None
    assert parsed.phase_reached == "weights"
    assert parsed.ranks["1"]["dist_init_mem_gib"] == 2.01
    assert parsed.ranks["0"]["weights_begin_avail_gib"] == 137.34


def test_a_traceback_gives_the_failure_and_its_phase():
    parsed = logparse.parse_file(LOGS / "sglang-issue7227-tp1-capture-begin-exception.log")
    assert parsed.failure is not None
    assert parsed.failure.phase == "cuda_graph"


def test_debug_instrumentation_lines_become_records():
    parsed = sglang.parse(lines(
        "[2025-10-16 10:00:00 TP0] DEBUG profile_max_num_token: avail=21.697 GiB, total=93.999 GiB, "
        "fraction=0.55, reserved=42.300 GiB, rest=-20.603 GiB\n"))
    assert parsed.debug[0] == {"name": "profile_max_num_token", "key": "avail", "value": 21.697, "unit": "GiB"}
    assert {d["key"]: d["value"] for d in parsed.debug}["rest"] == -20.603
    assert parsed.debug[2]["unit"] is None


def test_the_ready_line_makes_a_log_ready():
    parsed = sglang.parse(lines("[2025-10-16 10:00:00] The server is fired up and ready to roll!\n"))
    assert parsed.ready and parsed.phase_reached == "ready"


def test_detect_tells_sglang_from_other_logs(tmp_path):
    other = tmp_path / "x.log"
    other.write_text("hello\nworld\n")
    assert logparse.detect(other) == "generic"
    assert logparse.detect(LOGS / "sglang-pr11830-tp1-kv-alloc-capture-end.log") == "sglang"


def test_transformers_serve_logs_are_ready_and_the_failed_first_request_is_a_kv_failure():
    folder = DATA / "h200-transformers-serve"
    for name in ("server-cb50.log", "server-cb90.log", "server-nocb.log"):
        parsed = logparse.parse_file(folder / name)
        assert parsed.server == "transformers"
        assert parsed.ready and parsed.failure is None, name
        assert parsed.ranks["0"]["request_http_status"] == 200
    degraded = logparse.parse_file(folder / "server-oom.log")
    assert degraded.ready  # healthy at startup ...
    assert (degraded.failure.reason, degraded.failure.phase) == ("kv_cache_no_memory", "kv_cache")  # ... but not usable
    assert "No positive solution" in degraded.failure.message
    assert degraded.ranks["0"]["request_http_status"] == 503


def test_debug_lines_are_read_whatever_the_prefix(tmp_path):
    log = tmp_path / "v.log"
    log.write_text("INFO 12-01 10:00:00 [gpu_worker.py:1] Available KV cache memory: 8.11 GiB\n"
                   "(Worker_TP1 pid=7) DEBUG profile_max_num_token: avail=21.697 GiB, rest=-20.603 GiB\n"
                   "journal: python3[12]: DEBUG kv: blocks=12\n")
    parsed = logparse.parse_file(log, "vllm")
    assert [(d["name"], d["key"], d["value"]) for d in parsed.debug] == [
        ("profile_max_num_token", "avail", 21.697), ("profile_max_num_token", "rest", -20.603), ("kv", "blocks", 12.0)]
    assert parsed.ranks["1"]["debug.profile_max_num_token.rest"] == -20.603


def test_a_big_log_streams_through_chunks_and_keeps_late_lines(tmp_path):
    """Thousands of boring progress lines are skipped by chunk, the lines that matter are still all found."""
    path = tmp_path / "big.log"
    decode = "[2025-11-30 12:51:{s:02d} TP{r}] Decode batch. #running-req: 12, #token: {s}45, gen throughput (token/s): 1.5\n"
    with open(path, "w") as fh:
        fh.write("[2025-11-30 12:50:00 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=21.96 GB, "
                 "mem usage=8.81 GB.\n")
        for i in range(40_000):
            fh.write(decode.format(s=i % 60, r=i % 2))
        fh.write("[2025-11-30 13:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):\n")
        fh.write('  File "x.py", line 1, in run\n' * 3000)  # a traceback longer than a chunk
        fh.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    parsed = logparse.parse_file(path)
    assert parsed.ranks["0"]["weights_mem_gib"] == 8.81
    assert (parsed.failure.reason, parsed.failure.phase) == ("cuda_oom", "kv_cache")
    assert "Tried to allocate 2.00 GiB" in parsed.failure.message
    # line numbers count the skipped chunks too: the failure is the exception line, after 1 + 40 000 + 1 + 3 000
    assert parsed.failure.line == 43_003 and parsed.phase_lines == {"weights": 1, "kv_cache": 43_003}


def test_cuda_oom_message_numbers_become_fields_of_the_failing_rank():
    parsed = logparse.parse_file(LOGS / "vllm-issue27508-enginecore-dp0-cuda-oom-sampler-warmup.log")
    fields = parsed.ranks["0"]
    assert fields["oom_request_gib"] == 786 / 1024 and fields["oom_total_gib"] == 79.11
    assert fields["oom_free_gib"] == 140.75 / 1024 and fields["oom_gpu_index"] == 0
    assert fields["oom_torch_allocated_gib"] == 68.83 and fields["oom_process_used_gib"] == 78.96


def test_vllm_process_ids_routes_url_and_dead_workers_are_kept():
    parsed = vllm.parse(lines(
        "(APIServer pid=1) INFO 08-03 09:00:10 [api_server.py:680] Starting vLLM server on http://0.0.0.0:8000\n"
        "(APIServer pid=1) INFO 08-03 09:00:10 [launcher.py:46] Route: /health, Methods: GET\n"
        "(APIServer pid=1) INFO:     Started server process [1]\n"
        "(EngineCore pid=123) ERROR 09-10 09:37:41 [multiproc_executor.py:314] Worker proc VllmWorker-1 died "
        "unexpectedly (exit code: -9), shutting down executor.\n"
        "(Worker_TP1 pid=124) INFO 09-10 09:37:40 [custom_all_reduce.py:203] Registering 42 cuda graph addresses\n"))
    assert parsed.pids == {"api_server": 1, "http_server": 1, "engine_core": 123}
    assert parsed.rank_pids == {"1": 124}
    assert parsed.http_url == "http://0.0.0.0:8000" and parsed.routes == ["/health"]
    assert [(d.name, d.pid, d.exit_code) for d in parsed.worker_deaths] == [("VllmWorker-1", None, -9)]
    assert parsed.facts.get("engine") == "v1"


def test_nccl_version_is_read_from_the_server_line_or_from_nccl_itself():
    assert vllm.parse(lines("INFO 04-30 10:20:00 [pynccl.py:69] vLLM is using nccl==2.21.5\n")).nccl_version == "2.21.5"
    nccl = "host:4242:4242 [0] NCCL INFO NCCL version 2.26.2+cuda12.2\n"
    assert vllm.parse(lines(nccl)).nccl_version == "2.26.2"
    assert sglang.parse(lines(nccl)).nccl_version == "2.26.2"


def test_generic_server_dying_of_cuda_oom_is_a_cuda_oom_failure(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("Loading checkpoint shards: 100%|██████████| 4/4 [00:03<00:00,  1.10it/s]\n"
                   "Warming up the model with 8 requests\n"
                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                   "of 79.11 GiB of which 1.02 GiB is free.\n")
    parsed = logparse.parse_file(log, "generic")
    assert (parsed.failure.reason, parsed.failure.phase) == ("cuda_oom", "startup")
    assert parsed.failure.message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")


def test_generic_server_traceback_fails_with_its_last_line_not_the_traceback_header():
    parsed = generic.parse(lines(
        "INFO: loading model /models/llama\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/serve.py", line 88, in <module>\n'
        "    engine = Engine(cfg)\n"
        '  File "/srv/engine.py", line 12, in __init__\n'
        "    raise ValueError(f'No available memory for the cache blocks: {free}')\n"
        "ValueError: No available memory for the cache blocks: -1.2 GiB\n"))
    assert parsed.failure.reason == "kv_cache_no_memory"
    assert parsed.failure.message == "ValueError: No available memory for the cache blocks: -1.2 GiB"


def test_generic_server_traceback_of_an_unknown_error_is_an_exception_with_that_line():
    parsed = generic.parse(lines(
        "Traceback (most recent call last):\n"
        '  File "/srv/serve.py", line 3, in <module>\n'
        "ModuleNotFoundError: No module named 'flash_attn'\n"))
    assert (parsed.failure.reason, parsed.failure.message) == ("exception", "ModuleNotFoundError: No module named 'flash_attn'")


def test_generic_server_killed_by_the_oom_killer_is_an_exception_failure():
    parsed = generic.parse(lines("Loading weights 12/40\nKilled\n"))
    assert (parsed.failure.reason, parsed.failure.message) == ("exception", "Killed")


def test_a_line_merely_mentioning_killed_is_not_a_failure():
    parsed = generic.parse(lines("INFO worker 3 killed the idle connection\nKilled processes: 0\n"))
    assert parsed.failure is None


def test_generic_server_segmentation_faults_are_exception_failures():
    for line in ("Segmentation fault (core dumped)", "Fatal Python error: Segmentation fault",
                 "*** SIGSEGV received at time=1718000000 on cpu 3 ***", "bash: line 1: 4242 Segmentation fault  ./server"):
        parsed = generic.parse(lines(f"server starting\n{line}\n"))
        assert (parsed.failure.reason, parsed.failure.message) == ("exception", line), line


def test_generic_server_params_fatal_pattern_still_fails_the_run():
    parsed = generic.parse(lines("engine state: WEDGED\n"), fatal_patterns=[r"state: WEDGED"])
    assert (parsed.failure.reason, parsed.failure.message) == ("exception", "engine state: WEDGED")


def test_generic_server_params_pattern_on_a_traceback_header_gives_way_to_the_error_line():
    parsed = generic.parse(lines(
        "Traceback (most recent call last):\n"
        '  File "/srv/serve.py", line 3, in <module>\n'
        "RuntimeError: NCCL error: unhandled system error\n"), fatal_patterns=[r"Traceback"])
    assert (parsed.failure.reason, parsed.failure.message) == ("nccl_error", "RuntimeError: NCCL error: unhandled system error")


def test_generic_server_ready_pattern_and_a_clean_log_have_no_failure():
    parsed = generic.parse(lines("booting\nlistening on :9000\n"), ready_pattern=r"listening on")
    assert parsed.ready and parsed.failure is None


def test_old_torch_cuda_oom_message_gives_the_same_fields():
    parsed = generic.parse(lines(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total "
        "capacity; 14.56 GiB already allocated; 3.12 MiB free; 14.66 GiB reserved in total by PyTorch)\n"))
    assert parsed.failure.reason == "cuda_oom"
    assert parsed.ranks["0"] == {"oom_request_gib": 20 / 1024, "oom_gpu_index": 0, "oom_total_gib": 15.78,
                                 "oom_torch_allocated_gib": 14.56, "oom_free_gib": 3.12 / 1024, "oom_reserved_gib": 14.66}


def test_a_wrapped_statement_is_rejoined_but_a_line_ending_in_a_number_does_not_swallow_the_next():
    """vLLM statements cut by the terminal are read whole at their first line; a complete line that happens to end in
    a number leaves the next line to be read on its own (here the weights bar, at its own line)."""
    parsed = vllm.parse(["INFO 04-18 08:26:18 [kv_cache_utils.py:634] GPU KV cache size: 532,032\n", "tokens\n",
                         "INFO 04-21 21:28:20 [config.py:1] Using max model len 32768\n",
                         "Loading safetensors checkpoint shards:   0% Completed | 0/3 [00:00<?, ?it/s]\n"])
    assert parsed.ranks["0"]["kv_tokens"] == 532032
    assert parsed.phase_lines == {"kv_cache": 1, "weights": 4}


def test_init_engine_time_with_its_compilation_part():
    """The statement as vllm-project/vllm PR #39240 quotes it (no excerpt with it was found for the real-log corpus)."""
    parsed = vllm.parse(["(EngineCore pid=7) INFO 04-21 21:29:40 [core.py:260] init engine (profile, create kv cache, "
                         "warmup model) took 76.40 s (compilation: 9.18 s)\n"])
    assert parsed.ranks["0"]["init_engine_s"] == 76.40 and parsed.ranks["0"]["init_engine_compile_s"] == 9.18
    assert parsed.phase_reached == "warmup" and parsed.phase_lines == {"warmup": 1}
