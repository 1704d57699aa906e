"""The llama.cpp kind (`llama-server`, the older `server`): its lines → phases, the layers offloaded to the GPU,
the model's, KV cache's and compute buffers per device, readiness and launch failures.

llama.cpp logs are ggml's: `function: message` lines (`load_tensors: offloaded 33/33 layers to GPU`, `llama_context:
CUDA0 KV buffer size = 512.00 MiB`), behind a docker or elapsed-time prefix at times, searched anywhere in the line.
A device's figures key its rank (`CUDA1` → "1"). Newer builds bind the HTTP port before they load the model: that
line marks where HTTP started without counting as having got past the weights. Ready: "server is listening on
http…" or "all slots are idle". Failures: a cudaMalloc that fails for the weights, the KV cache or the compute
buffers, then the generic "failed to load model" — the first names the cause; a compute buffer the server retries
without pipeline parallelism is not a failure; a `GGML_ASSERT(…) failed` (with or without the backtrace after it)
ends the process wherever it comes. Buffers in host memory (`CPU KV buffer size`) are kept apart from the GPU's.
The 2026 router mode (`[port] 3.57.931.987 I srv    load_model: …`) puts an idle model to sleep and loads it again
on the next request: that reload is read as its own startup (parsedlog.Reload), with an MTP draft context's memory
(`[spec] estimated memory usage of MTP context is … MiB`, speculative decoding). Formats: the excerpts in
tests/fixtures/real-logs-round3 and real-logs-4 (builds of 2024 – 2026). `KIND`, at the end, is the kind's record.
"""

from __future__ import annotations

import re

from launchlab.logparse.serverkind import LogFacts, ServerKind
from launchlab.logparse.tableparser import FailureLine, Statement, TableParser, Tables

_MIB = 1 / 1024
_READY = re.compile(r"server is listening on http|all slots are idle")

TABLES = Tables(
    server="llamacpp",
    anchors=("cudaMalloc", "failed", "unable to allocate", "error loading", "retrying without", "exiting due to",
             "sleeping state"),
    startup_anchors=("ggml_cuda_init", "CUDA", "Device", "loading model", "llama_model_loader", "print_info",
                     "llm_load", "load_tensors", "......", "offload", "llama_new_context_with_model", "llama_context",
                     "llama_init_from", "llama_kv_cache", "KV buffer", "KV self", "compute buffer", "n_ctx ",
                     "n_ctx_seq", "new slot", "initializing, n_slots", "warming up", "HTTP server", "without SSL",
                     "server is listening", "all slots are idle", "[spec]", "draft context"),
    ready=_READY,
    statements=(
        Statement(re.compile(r"found (\d+) CUDA devices"), None, ((1, "cuda_devices", 1),)),
        Statement(re.compile(r"Device \d+: .*VRAM: (\d+) MiB \((\d+) MiB free\)|- CUDA\d+\s*: .*\((\d+) MiB, (\d+) "
                             r"MiB free\)"), None,
                  ((1, "device_total_gib", _MIB), (2, "device_free_gib", _MIB), (3, "device_total_gib", _MIB),
                   (4, "device_free_gib", _MIB))),
        Statement(re.compile(r"HTTP server is listening|HTTP server listening|running without SSL|threads for HTTP "
                             r"server"), "http", advances=False),  # before the model loads: see the module's doc
        Statement(re.compile(r"\bloading model\b|llama_model_loader: |print_info: |llm_load_print_meta: "
                             r"|load_tensors: |llm_load_tensors: |llama_model_load_from_file_impl: |^\.{20,}$"),
                  "weights"),
        Statement(re.compile(r"using device CUDA\d+ \(.*\) - (\d+) MiB free"), "weights",
                  ((1, "device_free_gib", _MIB),)),
        Statement(re.compile(r"offloaded (\d+)/(\d+) layers to GPU"), "weights",
                  ((1, "gpu_layers", 1), (2, "model_layers", 1))),
        Statement(re.compile(r"CUDA\d+ (?:model )?buffer size =\s*([\d.]+) MiB"), "weights",
                  ((1, "weights_mem_gib", _MIB),)),
        Statement(re.compile(r"llama_new_context_with_model: |llama_context: |llama_init_from_model: "
                             r"|llama_kv_cache\w*: |KV buffer size"), "kv_cache"),
        Statement(re.compile(r"CUDA\d+ KV buffer size =\s*([\d.]+) MiB"), "kv_cache", ((1, "kv_gib", _MIB),),
                  adds=True),  # an SWA model has two caches per device
        Statement(re.compile(r"KV self size\s*=\s*([\d.]+) MiB"), "kv_cache", ((1, "kv_self_gib", _MIB),)),
        Statement(re.compile(r"CUDA\d+ compute buffer size =\s*([\d.]+) MiB"), "kv_cache",
                  ((1, "compute_buffer_gib", _MIB),)),
        # host memory: a CPU-only run's cache, or the layers left on the CPU (never the GPU's figure)
        Statement(re.compile(r"\bCPU KV buffer size =\s*([\d.]+) MiB"), "kv_cache", ((1, "kv_host_gib", _MIB),),
                  adds=True),
        Statement(re.compile(r"\b(?:CPU|CUDA_Host) compute buffer size =\s*([\d.]+) MiB"), "kv_cache",
                  ((1, "compute_buffer_host_gib", _MIB),), adds=True),
        # speculative decoding's MTP draft (2026): its memory estimated with the model, its context after the target's
        Statement(re.compile(r"\[spec\] estimated memory usage of \w+ context is ([\d.]+) MiB"), None,
                  ((1, "draft_context_gib", _MIB),), draft="draft_weights"),
        Statement(re.compile(r"creating \w+ draft context"), None, draft="draft_context"),
        Statement(re.compile(r"\[spec\] estimated memory usage of MTP context|creating MTP draft context"), None,
                  spec="mtp"),
        Statement(re.compile(r"\bn_ctx\s+=\s+(\d+)"), None, ((1, "n_ctx", 1),)),
        Statement(re.compile(r"\bn_ctx_seq \((\d+)\)"), None, ((1, "n_ctx_seq", 1),)),
        Statement(re.compile(r"\bn_ctx_slot = (\d+)"), None, ((1, "n_ctx_slot", 1),)),
        Statement(re.compile(r"allocating ([\d.]+) MiB on device \d+: cudaMalloc failed"), None,
                  ((1, "oom_request_gib", _MIB),)),
        Statement(re.compile(r"warming up the model"), "warmup"),
        Statement(_READY, "ready"),
    ),
    failures=(
        FailureLine(re.compile(r"cudaMalloc failed: out of memory"), "cuda_oom"),
        FailureLine(re.compile(r"GGML_ASSERT\(.*\) failed"), "exception"),  # ggml aborts the process
        FailureLine(re.compile(r"failed to allocate buffer for kv cache|llama_kv_cache_init\(\) failed"),
                    "kv_cache_no_memory", "kv_cache", amends=True),
        FailureLine(re.compile(r"failed to allocate compute (?:pp )?buffers|compute buffer allocation failed"),
                    "cuda_oom", "kv_cache", amends=True),
        FailureLine(re.compile(r"(?:failed|unable) to allocate CUDA\d+ buffer"), "cuda_oom", amends=True),
        FailureLine(re.compile(r"error loading model|failed to load model|failed to initialize the context"
                               r"|failed to create context|exiting due to model loading error"), "exception",
                    amends=True),
    ),
    rank=re.compile(r"(?:CUDA|[Dd]evice )(\d+)"),
    http_url=re.compile(r"server is listening on (http\S+)"),
    recovered=re.compile(r"retrying without pipeline parallelism"),
    sleep=re.compile(r"entering sleeping state"),
    wake=re.compile(r"exiting sleeping state"),
)

KIND = ServerKind(
    name="llamacpp",
    evidence=re.compile(r"ggml_cuda_init:|llama_model_loader:|llm_load_tensors:|load_tensors:|llm_load_print_meta:"
                        r"|llama_new_context_with_model:|llama_context:|llama_kv_cache|ggml_backend_|llama-server"
                        r"|common_init_from_params:|\bbuild: \d+ \((?:[0-9a-f]+|unknown)\) with |update_slots: "
                        r"|all slots are idle|main: server is listening on http"),
    ready_pattern=_READY.pattern,
    fatal_patterns=(r"error loading model", r"failed to load model", r"exiting due to model loading error",
                    r"failed to initialize the context"),
    parser=lambda rules: TableParser(TABLES),
    # "build: 4524 (6171c9d2) with cc … for x86_64-linux-gnu"; `--version`: "version: 5172 (eb1776b1)"
    log_facts=LogFacts(version=re.compile(r"\b(?:build|version): (\d+ \((?:[0-9a-f]+|unknown)\))")),
    memory_fields=("weights_mem_gib", "kv_gib"),
    model_flags=("--model",),
)  # no budget: the buffers it allocates are printed, not the free memory it sized them against
