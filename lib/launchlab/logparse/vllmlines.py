"""What vLLM prints that its parser reads (logparse/vllm.py), vLLM 0.4–0.26, V0 and V1 (reference/log-formats.md
section 3): the anchor words a chunk must hold to be parsed, the process tags of its workers and engine core, the
statements of each startup phase with the figures they carry, and the lines that say a failure, an argument dump, a
draft model or a worker's death."""

from __future__ import annotations

import re

from launchlab.logparse import custom_ar
from launchlab.logparse.arguments import call_arguments, config_arguments, mapping_arguments

BLOCK_SIZE = 16  # vLLM's default tokens per KV block
ANCHORS = ("Loading model weights", "Model loading took", "Starting to load model", "KV cache", "KV Cache",
           "memory", "blocks:", "Maximum concurrency", "Graph capturing", "Capturing", "init engine",
           "Starting vLLM", "Uvicorn running", "Available routes", "Application startup complete", "torch.compile",
           "Traceback", "Error", "error", "Exception", "exception", "Failed", "died", "DEBUG", "gpu_memory_utilization",
           "max seq len", "world_size", "NCCL", "nccl", "num_gpu_blocks", "profile run", "dummy",
           "args", "config", "Route:", "Started server process", "checkpoint shards", "warmup run",
           "VLLM_CPU_KVCACHE_SPACE", "us error", "Segmentation", 'File "', "drafter", "MTP", "speculative",
           *custom_ar.ANCHORS)

# `(VllmWorker rank=3 pid=N)`, Ray's `(RayWorkerWrapper pid=N, ip=10.0.0.2)`; a paste may lose the opening parenthesis
PROCESS_TAG = re.compile(r"(?:\(|^)(?P<proc>[A-Za-z_][\w ]*?)(?: rank=(?P<rank>\d+))? pid=(?P<pid>\d+)(?:, ip=[\w.:]+)?\)\s?")
# where a record starts inside a flattened paste (records joined by spaces on one line): its process tag and level
RECORDS = re.compile(r"(?=\([A-Za-z_][\w ]*?(?: rank=\d+)? pid=\d+(?:, ip=[\w.:]+)?\) (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )")
REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\].*$")  # Ray's deduplication suffix
WRAPPED = re.compile(r"[\d:]$")  # a statement cut by the terminal ends in its number or its colon
LEVEL_LINE = re.compile(r"(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<md>\d{2}-\d{2}) (?P<hms>\d{2}:\d{2}:\d{2})(?:\.\d+)? "
                   r"\[?(?P<file>[\w./-]+):(?P<line>\d+)\] (?P<msg>.*)")
TP_IN_TAG = re.compile(r"TP(\d+)")
DP_IN_TAG = re.compile(r"DP(\d+)")
WORKERS = ("VllmWorkerProcess", "RayWorker", "VllmWorker", "Worker")  # processes that are one TP rank
ROLES = {"APIServer": "api_server", "EngineCore": "engine_core"}
NUMBER = r"([\d.]+)"
SIGNED = r"(-?[\d.]+)"

# (regex on the message, phase, [(group, field, converter)])
STATEMENTS = [
    (re.compile(r"world_size=\d+ rank=\d+|Custom allreduce is disabled|NCCL version|nccl==|Found nccl from library"),
     "dist_init", []),  # each rank's NCCL init: the library found, then its version
    (re.compile(r"Starting to load model|Loading weights took|Loading (?:fast)?(?:safetensors|pt) checkpoint shards:"),
     "weights",
     []),  # the bar is untagged, and the first sign of the weights on a worker that tags nothing else
    (re.compile(rf"(?:Loading model weights|Model loading) took {NUMBER} Gi?B(?: memory)?(?: and {NUMBER} seconds)?"), "weights",
     [(1, "weights_mem_gib"), (2, "weights_s")]),
    (re.compile(rf"Memory profiling takes {NUMBER} seconds"), "kv_cache", [(1, "profile_s")]),
    (re.compile(rf"total_gpu_memory \({NUMBER}GiB\) x gpu_memory_utilization \({NUMBER}\) = {NUMBER}GiB"), "kv_cache",
     [(1, "total_gpu_gib"), (2, "gpu_memory_utilization"), (3, "usable_gib"), (3, "requested_gib")]),
    (re.compile(rf"model weights take {NUMBER}GiB; non_torch_memory takes {NUMBER}GiB; PyTorch activation peak memory takes "
                rf"{NUMBER}GiB; the rest of the memory reserved for KV Cache is {SIGNED}GiB"), "kv_cache",
     [(1, "profile_weights_gib"), (2, "non_torch_gib"), (3, "activation_peak_gib"), (4, "kv_avail_gib")]),
    (re.compile(rf"Free memory on device \({NUMBER}/{NUMBER} GiB\) on startup\. Desired GPU memory utilization is "
                rf"\({NUMBER}, {NUMBER} GiB\)(?:\. Actual usage is {NUMBER} GiB for weight, {NUMBER} GiB for peak activation, "
                rf"{NUMBER} GiB for non-torch memory, and {NUMBER} GiB for CUDAGraph memory)?(?:\. Replace "
                r"gpu_memory_utilization config with `--kv-cache-memory=(\d+)` .*?to fit into requested memory, or "
                r"`--kv-cache-memory=(\d+)`)?(?:.*?Current kv cache memory in use is ([\d.]+) GiB)?"), "kv_cache",
     [(1, "startup_free_gib"), (2, "total_gpu_gib"), (3, "gpu_memory_utilization"), (4, "requested_gib"),
      (5, "profile_weights_gib"), (6, "activation_peak_gib"), (7, "non_torch_gib"), (8, "cuda_graph_gib"),
      (9, "suggested_kv_cache_memory_bytes"), (10, "max_kv_cache_memory_bytes"), (11, "kv_gib")]),
    # V0 0.6.4 – 0.6.5's one-line account
    (re.compile(rf"Memory profiling results: total_gpu_memory={NUMBER}GiB .*?non_torch_memory={NUMBER}GiB "
                rf"kv_cache_size={SIGNED}GiB gpu_memory_utilization={NUMBER}"), "kv_cache",
     [(1, "total_gpu_gib"), (2, "non_torch_gib"), (3, "kv_avail_gib"), (4, "gpu_memory_utilization")]),
    # negative when the weights and activations take more than the requested share (vLLM 0.26 at 0.004: -0.17)
    (re.compile(rf"Available KV cache memory: {SIGNED} GiB"), "kv_cache", [(1, "kv_avail_gib")]),
    (re.compile(r"torch\.compile (?:takes|took) ([\d.]+) s in total"), "kv_cache", [(1, "torch_compile_s")]),
    (re.compile(rf"Initial profiling/warmup run took {NUMBER} s"), "kv_cache", [(1, "warmup_run_s")]),
    (re.compile(rf"Profiling CUDA graph memory:|Estimated CUDA graph memory: {NUMBER} GiB total"), "kv_cache",
     [(1, "graph_estimate_gib")]),  # ≥ 0.21: the graphs are estimated while sizing the KV cache
    (re.compile(rf"Initial free memory {NUMBER} GiB, reserved {NUMBER} GiB memory for KV Cache"), "kv_cache",
     [(1, "startup_free_gib"), (2, "kv_avail_gib")]),  # --kv-cache-memory given (and XPU): no profiling
    (re.compile(rf"CUDA graph pool memory: {SIGNED} GiB \(actual\), {SIGNED} GiB \(estimated\)"), "cuda_graph",
     [(1, "graph_pool_actual_gib"), (2, "graph_pool_estimated_gib")]),
    (re.compile(r"(?:GPU|GPU \+ host) KV cache size: ([\d,]+) tokens"), "kv_cache", [(1, "kv_tokens")]),
    (re.compile(r"# (?:GPU|cuda|\w+) blocks: (\d+)(?:, # CPU blocks: (\d+))?|num_gpu_blocks is: (\d+)"), "kv_cache",
     [(1, "kv_blocks"), (2, "kv_cpu_blocks"), (3, "kv_blocks")]),
    (re.compile(r"Starting profile run|Memory profiling"), "kv_cache", []),
    (re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"), "kv_cache",
     [(1, "max_model_len"), (2, "max_concurrency")]),
    (re.compile(r"Capturing (?:cudagraphs|the model for CUDA graphs|CUDA graphs)"), "cuda_graph", []),
    (re.compile(rf"Graph capturing finished in {NUMBER} secs(?:, took {NUMBER} GiB)?"), "cuda_graph",
     [(1, "graph_s"), (2, "graph_mem_gib")]),
    (re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {NUMBER} s(?:econds)?"
                rf"(?: \(compilation: {NUMBER} s\))?"),
     "warmup", [(1, "init_engine_s"), (2, "init_engine_compile_s")]),
    (re.compile(r"Starting vLLM (?:API )?server|Uvicorn running on|Available routes are"), "http", []),
]
# Error lines that decide the failure without a traceback: (regex, reason, phase or None for "where it got to")
FAILURES = [
    (re.compile(r"No available memory for the cache blocks"), "kv_cache_no_memory", "kv_cache"),
    (re.compile(r"is larger than the maximum number of tokens that can be stored in KV cache"
                r"|To serve at least one request with the models?'s max seq len"), "max_len_exceeds_kv", "kv_cache"),
    (re.compile(r"Free memory on device \([\d./ ]+GiB\) on startup is less than desired"), "kv_cache_no_memory", "startup"),
    (re.compile(r"custom_all_reduce\.cuh:\d+(?: '[^']+'|: CUDA error)"), "custom_allreduce_failed", None),
    (re.compile(r"CUDA out of memory"), "cuda_oom", None),
    (re.compile(r"NCCL error|ncclInternalError|ncclSystemError"), "nccl_error", None),
    (re.compile(r"\b[Bb]us error\b|Segmentation fault"), "exception", None),  # the shell's word for a crashed process
]
WRAPPERS = re.compile(r"EngineCore failed to start|EngineCore hit an exception|Error executing method|Exception ignored in"
                       r"|WorkerProc hit an exception|WorkerProc failed to start|Worker proc \S+ died unexpectedly"
                       r"|Worker VllmWorkerProcess pid \d+ died"
                       r"|Engine core initialization failed|Traceback \(most recent call last\)")
DUMMY = re.compile(r"\b_?dummy_")  # vLLM's memory profiling runs the model on dummy inputs
MAX_LEN = re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache "
                      r"\((\d+)\)")
# V1's "To serve at least one request with the model's max seq len (131072), (4.54 GiB KV cache is needed, which is
# larger than the available KV cache memory (1.71 GiB). Based on the available memory, the estimated maximum model
# length is 5632." — its figures, each optional: a terminal may cut the message anywhere (read whole once rejoined)
MAX_LEN_V1 = re.compile(r"max seq len \((\d+)\)(?:, \(([\d.]+) GiB KV cache is needed(?:, which is larger than the "
                         r"available KV cache memory \(([\d.]+) GiB\)(?:\. Based on the available memory, the "
                         r"estimated maximum model length is (\d+))?)?)?")
MAX_LEN_V1_FIELDS = ("max_model_len", "kv_needed_gib", "kv_avail_gib", "estimated_max_model_len")
FRAME_EVIDENCE = re.compile(r"raise_if_cache_size_invalid|check_enough_kv_cache_memory")
# zero KV blocks (V0 "# GPU blocks: 0", 0.7 – 0.10 "# cuda blocks: 0"): the traceback that follows is the KV failure
ZERO_BLOCKS = re.compile(r"# \w+ blocks: 0\b")
# the drafter's own lines (V1): its weights load after the target's ("Model loading took" counts both)
DRAFT_WEIGHTS = re.compile(r"Loading drafter model|Detected MTP model\. Sharing target model|Loading EAGLE LM head")
# The server's arguments: (regex, how the text after it is split, what the line is called)
ARGUMENTS = [
    (re.compile(r"^non-default args: \{"), mapping_arguments, "non-default args"),
    (re.compile(r"^args: Namespace\("), call_arguments, "args"),
    (re.compile(r"^Initializing an? (?:V1 )?LLM engine (?:\(v[^)]*\) )?with config: "), config_arguments, "engine config"),
]
# The CPU backend profiles nothing: its KV cache is VLLM_CPU_KVCACHE_SPACE GiB, said only when the default is used
CPU_KV_SPACE = re.compile(r"VLLM_CPU_KVCACHE_SPACE \(Gi?B\) for CPU backend is not set, using (\d+) by default")
HTTP_URL = re.compile(r"Starting vLLM (?:API )?server(?: \d+)? on (\S+)|Uvicorn running on (\S+)")
ROUTE = re.compile(r"Route: ([^,\s]+)")
SERVER_PID = re.compile(r"Started server process \[(\d+)\]")
DEATH = re.compile(r"Worker proc (?P<name>\S+) died unexpectedly(?: \(exit code: (?P<code>-?\d+|None)\))?"
                    r"|Worker (?P<v0name>VllmWorkerProcess) pid (?P<pid>\d+) died, exit code: (?P<v0code>-?\d+)")
# Which engine wrote a line: V1-only statements settle it; V0 hints count only while nothing says V1.
V1 = re.compile(r"EngineCore|Initializing a V1 LLM engine|/vllm/v1/|GPU KV cache size|Available KV cache memory")
V0 = re.compile(r"Initializing an LLM engine|# CPU blocks|the current vLLM instance can use|Worker VllmWorkerProcess pid"
                 r"|/vllm/(?:engine/(?:llm_engine|multiprocessing)|worker/(?:worker|model_runner|cache_engine))\b")
