"""The TensorRT-LLM kind (`trtllm-serve`, and the C++ executor under Triton or another front end): its lines →
phases, engine and KV-cache figures, readiness and launch failures.

Two loggers write: the C++ runtime (`[TensorRT-LLM][INFO] …`, no time stamp) and the Python side (`[MM/DD/YYYY-
HH:MM:SS] [TRT-LLM] [I] …`, `[RANK n]` under MPI). The engine loads ("Loaded engine size: N MiB", `[MemUsageChange]
… now: CPU …, GPU N (MiB)`), the KV cache is sized from the free memory ("Memory usage when calculating max tokens
in paged kv cache: total: T GiB, available: A GiB") into blocks and tokens (several formats across versions), and
uvicorn serves. Launch failures: "maxTokensInPagedKvCache (N) must be large enough to process at least 1 sequence"
(the cache holds less than one sequence), the PyTorch executor's "Executor creation failed due to insufficient GPU
memory" whose next lines name the component (KV cache, or another), and CUDA out-of-memory at engine load.
Formats: the excerpts in tests/fixtures/real-logs-round3 (0.5 – 1.2). `KIND`, at the end, is the kind's record.
"""

from __future__ import annotations

import re

from launchlab.logparse.serverkind import LogFacts, ServerKind
from launchlab.logparse.tableparser import CUDA_OOM, FailureLine, Statement, TableParser, Tables

_GIB, _MIB, _BYTES = 1, 1 / 1024, 2**-30
_READY = re.compile(r"Uvicorn running on http|Started HTTPService at ")  # trtllm-serve's uvicorn, or Triton

TABLES = Tables(
    server="trtllm",
    anchors=("maxTokensInPagedKvCache", "Executor creation failed", "could not be created", "Cuda Runtime",
             "CUDA runtime error", "Requested amount", "Failed to create instance", "GPU memory (GiB)",
             "component creation", "[E]", "[ERROR]", "AllReduce", "IpcMemory"),
    startup_anchors=("TensorRT", "TRT-LLM", "MemUsageChange", "engine", "checkpoint", "KV cache", "kv cache",
                     "k/v cache", "tokens per block", "Started server process", "Uvicorn running",
                     "Started HTTPService"),
    ready=_READY,
    statements=(
        Statement(re.compile(r"\[TensorRT-LLM\] TensorRT[- ]LLM version: "), "startup"),
        Statement(re.compile(r"Loaded engine size: (\d+) MiB"), "weights", ((1, "engine_gib", _MIB),)),
        Statement(re.compile(r"\[MemUsageChange\] .*now: CPU \d+, GPU (\d+) \(MiB\)"), "weights",
                  ((1, "gpu_in_use_gib", _MIB),)),
        Statement(re.compile(r"Pre-fetching checkpoint directory|Loading weights|Loading checkpoint"), "weights"),
        Statement(re.compile(r"Memory usage when calculating max tokens in paged kv cache: total: ([\d.]+) GiB, "
                             r"available: ([\d.]+) GiB"), "kv_cache",
                  ((1, "total_gpu_gib", _GIB), (2, "kv_sizing_free_gib", _GIB))),
        Statement(re.compile(r"Total GPU memory \(GiB\): ([\d.]+)"), None, ((1, "total_gpu_gib", _GIB),)),
        Statement(re.compile(r"Free GPU memory before component creation attempt \(GiB\): ([\d.]+)"), None,
                  ((1, "kv_sizing_free_gib", _GIB),)),
        Statement(re.compile(r"Number of blocks in KV cache primary pool: (\d+)"), "kv_cache", ((1, "kv_blocks", 1),)),
        Statement(re.compile(r"Number of blocks in KV cache secondary pool: (\d+)"), "kv_cache",
                  ((1, "kv_cpu_blocks", 1),)),
        Statement(re.compile(r"Max KV cache (?:pages|blocks) per sequence: (\d+)(?:.*?tokens per block=(\d+), "
                             r"primary blocks=(\d+), secondary blocks=(\d+), max sequence length=(\d+))?"), "kv_cache",
                  ((1, "kv_blocks_per_seq", 1), (2, "kv_block_tokens", 1), (3, "kv_blocks", 1),
                   (4, "kv_cpu_blocks", 1), (5, "max_model_len", 1))),
        Statement(re.compile(r"Number of tokens per block: (\d+)"), "kv_cache", ((1, "kv_block_tokens", 1),)),
        Statement(re.compile(r"Allocated ([\d.]+) GiB for max tokens in paged KV cache \((\d+)\)"), "kv_cache",
                  ((1, "kv_gib", _GIB), (2, "kv_tokens", 1))),
        Statement(re.compile(r"Using (\d+) (?:total )?tokens in paged KV cache(?:, and (\d+) blocks per sequence)?"),
                  "kv_cache", ((1, "kv_tokens", 1), (2, "kv_blocks_per_seq", 1))),
        Statement(re.compile(r"Allocate (\d+) bytes for k/v cache"), "kv_cache", ((1, "kv_gib", _BYTES),)),
        Statement(re.compile(r"Max tokens in paged KV cache: (\d+)\. Allocating (\d+) bytes"), "kv_cache",
                  ((1, "kv_tokens", 1), (2, "kv_gib", _BYTES))),
        Statement(re.compile(r"Requested amount of GPU memory \((\d+) bytes\) could not be allocated"), None,
                  ((1, "oom_request_gib", _BYTES),)),
        Statement(re.compile(r"Started server process"), "http"),
    ),
    failures=(
        # the cache cannot hold one sequence of the engine's longest length (beam × tokens per block × blocks per
        # sequence): a shorter max length is the fix, as for vLLM's "max seq len … larger than the available KV cache"
        FailureLine(re.compile(r"maxTokensInPagedKvCache(?: \(\d+\))? must be large enough"), "max_len_exceeds_kv",
                    "kv_cache"),
        # the PyTorch executor's report: its first line, then the component it could not create
        FailureLine(re.compile(r"Executor creation failed due to insufficient GPU memory"), "exception"),
        FailureLine(re.compile(r"The following component could not be created: KV cache"), "kv_cache_no_memory",
                    "kv_cache", amends=True),
        FailureLine(re.compile(r"The following component could not be created: "), "cuda_oom", amends=True),
        FailureLine(re.compile(r"Cuda Runtime \(out of memory\)|OutOfMemory \(Requested size"), "cuda_oom"),
        FailureLine(re.compile(r"CUDA runtime error in .*: out of memory"), "cuda_oom"),
        FailureLine(re.compile(r"CUDA runtime error in "), "exception"),
        # the C++ backtrace under that error names the custom all-reduce's IPC buffers (peer access refused):
        # `3  0x7f… tensorrt_llm::runtime::IpcMemory::IpcMemory(…)`, `4  0x7f… …::createCustomAllReduceWorkspace(…)`
        FailureLine(re.compile(r"^\d+\s+0x[0-9a-f]+ .*(?:CustomAllReduce|AllReduceWorkspace|AllReduceBuffers|IpcMemory::)"),
                    "custom_allreduce_failed", amends=True, custom_ar=True),
        FailureLine(re.compile(r"^\S*\): out of memory \("), "cuda_oom", amends=True),  # the line above, wrapped
        # an assert in the KV cache's block manager (the executor's `Assertion failed: mNextBlocks.empty()
        # (…/batch_manager/kvCacheManager.cpp:256)`), or its C++ frames under another error: the KV cache's code
        FailureLine(re.compile(r"Assertion failed: .*\(\S*/(?:kvCache\w*|\w*[Cc]acheManager)\.(?:cpp|h):\d+\)"), "exception",
                    "kv_cache"),
        FailureLine(re.compile(r"^\d+\s+0x[0-9a-f]+ .*::kv_cache_manager::"), "exception", "kv_cache", amends=True),
        CUDA_OOM,
        FailureLine(re.compile(r"\[TensorRT-LLM\]\[ERROR\]|\[TRT-LLM(?: AUTO-DEPLOY)?\] (?:\[RANK \d+\] )?\[E\]"
                               r"|Failed to create instance"), "exception"),
    ),
    rank=re.compile(r"\[RANK (\d+)\]"),
    http_url=re.compile(r"Uvicorn running on (\S+)"),
)

KIND = ServerKind(
    name="trtllm",
    max_length="the engine's max_seq_len (or max_tokens_in_paged_kv_cache)",  # what a max_len_exceeds_kv asks to lower
    evidence=re.compile(r"\[TensorRT-LLM\]|\[TRT-LLM(?: AUTO-DEPLOY)?\]|trtllm-serve|tensorrt_llm|maxTokensInPagedKvCache"
                        r"|Executor creation failed due to insufficient GPU memory|Free GPU memory before component "
                        r"creation attempt"),
    ready_pattern=_READY.pattern,
    fatal_patterns=(r"maxTokensInPagedKvCache(?: \(\d+\))? must be large enough",
                    r"Executor creation failed due to insufficient GPU memory",
                    r"Failed to deserialize cuda engine", r"Failed to create instance"),
    parser=lambda rules: TableParser(TABLES),
    # "[TensorRT-LLM] TensorRT-LLM version: 0.20.0rc3" (1.x: "TensorRT LLM version: 1.2.0rc5")
    log_facts=LogFacts(version=re.compile(r"\[TensorRT-LLM\] TensorRT[- ]LLM version: v?(\d+\.\d+[\w.+-]*)"),
                       package="tensorrt_llm"),
    memory_fields=("kv_tokens", "kv_gib"),
)  # no budget: the log gives the free memory and the cache it sized, not the fraction that sized it
