"""What SGLang prints that its parser reads (logparse/sglang.py), SGLang 0.3–0.5.23 (reference/log-formats.md
section 2): the anchor words a chunk must hold to be parsed, the line prefix with its rank tags, the statements of
each startup phase with the figures they carry, and the lines that say a failure, an override or an argument dump."""

from __future__ import annotations

import re

from launchlab.logparse import custom_ar

ANCHORS = ("Init torch distributed", "Init nccl", "Memory baseline", "Load weight", "KV Cache", "Memory pool",
           "Capture ", "max_total_num_tokens", "max_total_tokens", "Uvicorn running", "Application startup complete",
           "ready to roll", "server_args", "DEBUG", "Traceback", "Error", "error", "Exception", "exception",
           "Not enough memory", "Loaded weights leave", "sigquit", "Killed", "available memory for KV cache", "nccl",
           "KV cache dtype", "Automatically reduce", "Started server process", "NCCL", "Interrupt", "SystemExit",
           "is deprecated and will be removed", "world_size", "nranks", "tp_size=",
           "atchdog timeout", "CUDA IPC for multimodal", "mem-fraction-static", "speculative", "draft", "Draft",
           "Capturing batches", "architectures=", 'File "', *custom_ar.ANCHORS)

PREFIX = re.compile(
    r"\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?|\d{2}:\d{2}:\d{2})"
    r"(?P<tags>(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] (?P<msg>.*)"
)
TP_TAG = re.compile(r"TP(\d+)")
PP_TAG = re.compile(r"\bPP(\d+)")
DP_TAG = re.compile(r"\bDP(\d+)")  # not MOE_DP
NUMBER = r"(-?[\d.]+)"

WEIGHTS_END = re.compile(rf"Load weight end\..*?avail mem={NUMBER} GB(?:, mem usage={NUMBER} GB)?")
KV_ALLOCATED = re.compile(rf"KV Cache (?:is allocated|VA upper bound)\.(?: dtype: [\w.]+,)? (?:#tokens: (\d+), )?"
                          rf"(?:K size: {NUMBER} GB, V size: {NUMBER} GB|KV size: {NUMBER} GB)")
# (regex on the message, phase, [(group, field)])
STATEMENTS = [
    (re.compile(r"Init torch distributed begin|Init nccl begin|sglang is using nccl|Setup Custom allreduce failed"
                r"|Custom ?[Aa]ll[Rr]educe(?:V2)? is disabled"), "dist_init", []),
    (re.compile(rf"(?:Init torch distributed ends\.|Memory baseline taken\.).*?mem usage={NUMBER} GB"), "dist_init",
     [(1, "dist_init_mem_gib")]),
    (re.compile(rf"Load weight begin\. avail mem={NUMBER} GB"), "weights", [(1, "weights_begin_avail_gib")]),
    (WEIGHTS_END, "weights", [(1, "weights_end_avail_gib"), (2, "weights_mem_gib")]),  # next: the KV pool
    (re.compile(rf"The available memory for KV cache is {NUMBER} GB"), "kv_cache", [(1, "kv_avail_gib")]),
    (re.compile(r"Using KV cache dtype: "), "kv_cache", []),  # the pool's first line (≥ 0.4)
    (KV_ALLOCATED, "kv_cache",
     [(1, "kv_tokens"), (2, "kv_k_gib"), (3, "kv_v_gib"), (4, "kv_gib")]),
    (re.compile(rf"Memory pool end\. avail mem={NUMBER} GB"), "kv_cache", [(1, "pool_end_avail_gib")]),
    # the piecewise capture (0.5.x) after the first one: its figures kept apart, never in the first one's
    (re.compile(rf"Capture piecewise (?:cuda|CUDA) graph begin\.(?:.*?avail mem={NUMBER} GB)?"), "cuda_graph",
     [(1, "piecewise_graph_begin_avail_gib")]),
    (re.compile(rf"Capture piecewise (?:cuda|CUDA) graph end\.(?: Time elapsed: {NUMBER} s\.)?(?: mem usage={NUMBER} GB\.)?"
                rf"(?: avail mem={NUMBER} GB\.)?"), "cuda_graph",
     [(1, "piecewise_graph_s"), (2, "piecewise_graph_mem_gib"), (3, "piecewise_graph_end_avail_gib")]),
    (re.compile(rf"Capture (?:[\w ]+? )?(?:cuda|CUDA|cpu|CPU|npu|NPU) graph begin\.(?:.*?avail mem={NUMBER} GB)?"), "cuda_graph",
     [(1, "graph_begin_avail_gib")]),
    (re.compile(rf"Capture (?:[\w ]+? )?(?:cuda|CUDA|cpu|CPU|npu|NPU) graph end\.(?: Time elapsed: {NUMBER} s\.| bs=\[[^\]]*\],"
                rf"(?: elapsed={NUMBER} s,)?| elapsed={NUMBER} s,)?(?: avail mem={NUMBER} GB\.)?(?: mem usage={NUMBER} GB[.,])?"
                rf"(?: avail mem={NUMBER} GB\.)?"), "cuda_graph",
     [(1, "graph_s"), (2, "graph_s"), (3, "graph_s"), (4, "graph_end_avail_gib"), (5, "graph_mem_gib"),
      (6, "graph_end_avail_gib")]),
    # the capture's progress bar (rank 0; a failure's line glued to it shows no "Capture … begin" before it)
    (re.compile(r"^Capturing batches \("), "cuda_graph", []),
    (re.compile(r"max_total_num_tokens=(\d+)"), "kv_cache", []),  # the scheduler summary: see SUMMARY_PAIR
    (re.compile(r"Uvicorn running on|Application startup complete\.|Started server process \["), "http", []),
]
# A statement that ends a phase: a failure right after it belongs to the next phase.
NEXT = {"Load weight end": "kv_cache", "Memory pool end": "cuda_graph"}
OVER_CAP = re.compile(r"max_total_tokens=(\d+) is larger than the profiled value (-?\d+)")
# a flag SGLang's argparse takes and ignores (its DeprecatedAction stores nothing): the level it set never took effect
IGNORED_FLAG = re.compile(r"The command line argument '--([\w-]+)' is deprecated and will be removed in future versions")
SERVER_ARGS = "server_args=ServerArgs("
# a piece of that dump on a line of its own: a parallel size among five or more `name=value, ` pairs
DUMP_PIECE = re.compile(r"\b(?:tp|pp|dp)_size=\d+, ")
ARG_PAIR = re.compile(r"\b\w+=[^,=]*, ")
SETTINGS = ("mem_fraction_static", "tp_size")  # also kept as events, for the frames
SUMMARY_PAIR = re.compile(r"(\w+)=(-?[\d.]+)( GB)?")  # max_total_num_tokens=…, context_len=…, available_gpu_mem=… GB
# The scheduler's watchdog before it kills the server (older "Watchdog timeout (…)", newer "Scheduler watchdog
# timeout (…, self.soft=False)"; a soft one only dumps the stacks and the server goes on)
WATCHDOG = re.compile(r"(?:Scheduler w|W)atchdog timeout \(self\.watchdog_timeout=[\d.]+(?:, self\.soft=False)?\)")
MEM_FRACTION_AUTO = re.compile(r"Automatically reduce --mem-fraction-static to ([\d.]+)")
WEIGHTS_TYPE = re.compile(r"Load weight end\..*?\btype=(\w+)(?:, dtype=([\w.]+))?")
KV_DTYPE = re.compile(r"Using KV cache dtype: ([\w.]+)|KV Cache (?:is allocated|VA upper bound)\. dtype: ([\w.]+),")
GRAPH_KIND = re.compile(r"Capture (?:[\w ]+? )?(cuda|CUDA|cpu|CPU|npu|NPU) graph begin")
CAPTURE_BS = re.compile(r"Capture (?:cuda|CUDA|cpu|npu) graph bs (\[[\d, ]*\])")
UVICORN = re.compile(r"Uvicorn running on (\S+)")
SERVER_PID = re.compile(r"Started server process \[(\d+)\]")
# the tokenizer's pool for multimodal features (0.5.17), which takes GPU memory the KV budget then lacks
IPC_RESERVE = re.compile(r"Using CUDA IPC for multimodal features: reserving up to (\d+) MiB")
GRAPH_END = "graph end."
# the same statements for the target and a speculative-decoding draft (speculative.DraftSteps): the step each names
STEPS = (("Init torch distributed ends", "dist_init"), ("Memory baseline taken", "dist_init"),
          ("Load weight begin", "weights_begin"), ("Load weight end", "weights_end"), ("KV Cache is allocated", "kv"),
          ("KV Cache VA upper bound", "kv"), ("Memory pool end", "pool_end"))
DRAFT_STEP = {"weights_begin": "draft_weights", "weights_end": "draft_weights", "kv": "draft_kv_cache",
               "pool_end": "draft_kv_cache"}
# `Capture draft cuda graph begin`, `Capture draft extend cuda graph end` (0.5.23: `Capture draft decode CUDA graph`)
DRAFT_CAPTURE = re.compile(r"Capture draft (extend )?")
# 0.5.17's KV-sizing error states the share it was given and SGLang's own break-even: "… under
# --mem-fraction-static=0.0025. Raise --mem-fraction-static above 0.003 (minimum viable = 1 - available/pre =
# 0.0029)."; a paste may wrap it after its first sentence, or shorten it ("… (minimum viable = 0.9335).")
KV_ERROR_FRACTION = re.compile(r"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=(\d*\.?\d+)")
KV_RAISE = re.compile(r"Raise --mem-fraction-static above ([\d.]+) \(minimum viable = (?:1 - available/pre = )?(-?[\d.]+)\)")
NOT_ENOUGH = re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static|Loaded weights leave no GPU memory")
