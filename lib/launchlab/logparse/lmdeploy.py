"""The LMDeploy kind (`lmdeploy serve api_server`, `lmdeploy chat`; TurboMind and PyTorch engines): its logger's,
TurboMind's and uvicorn's lines → phases, the engine's configuration, KV-cache blocks, readiness and launch failures.

LMDeploy logs `<date> <time>,<ms> - lmdeploy - <LEVEL> - <message>`: the engine's configuration first (`input
backend=turbomind, backend_config=TurbomindEngineConfig(tp=2, session_len=…, cache_max_entry_count=0.8, …)`, or
`engine_cfg:` then that repr on a line of its own; `PytorchEngineConfig(…)` for the PyTorch engine), then for a
TurboMind model its converted `model_config:` as INI lines (`tensor_para_size = 2`, `cache_max_entry_count = 0.8`),
`get N model params` as the weights load. TurboMind's C++ side prints `[TM][INFO] [BlockManager] block_size = 8.000
MB`, `max_block_count = N`, `chunk_size = N` as it sizes its KV cache (`--cache-max-entry-count`: the share of the
memory free after the weights the cache takes), and `[TM][ERROR] CUDA runtime error: out of memory …` where the
GPU runs out. The server is ready at uvicorn's `Uvicorn running on http://…`. Formats: the excerpts in
tests/fixtures/real-logs-5 (LMDeploy 0.0.x – 0.9). `KIND`, at the end, is the kind's record.
"""

from __future__ import annotations

import re

from launchlab.logparse.arguments import call_arguments
from launchlab.logparse.kindstates import KV_POOL
from launchlab.logparse.serverkind import LogFacts, MemoryShare, Relaunch, ServerKind, Setting, State
from launchlab.logparse.tableparser import CUDA_OOM, FailureLine, Statement, TableParser, Tables

_MIB = 1 / 1024
_READY = re.compile(r"Uvicorn running on (?:https?://)")
# the engine configuration's repr, on its logger's line or alone (`lmdeploy chat` prints `engine_cfg:` above it)
_ENGINE_CONFIG = re.compile(r"\b(Turbomind|Pytorch)EngineConfig\(")
_INI_START = re.compile(r"\bmodel_config:\s*$")  # TurboMind's converted model config follows, one `key = value` a line
_INI_LINE = re.compile(r"^\s*(?:\[\w+\]|(\w+) = (.*?))\s*$")
# the PyTorch engine's report of its TP processes' errors, one per process: `Init tp model failed with error:
# [RuntimeError('…'), RuntimeError('…')]` — as many ranks as it lists (a line cut short lists at least that many)
_TP_ERRORS = re.compile(r"Init tp model failed with error: \[(.*)")
_TP_ERROR = re.compile(r"\b\w+(?:Error|Exception)\(")
_TURBOMIND = re.compile(r"\[TM\]\[|TurbomindEngineConfig|/turbomind/|gemm_config\.in is not found")
_PYTORCH = re.compile(r"PytorchEngineConfig|/lmdeploy/pytorch/")

TABLES = Tables(
    server="lmdeploy",
    anchors=("[TM][ERROR]", "out of memory", "Exception in", "RuntimeError", "CUDA runtime error",
             "negative dimension", "Init tp model"),
    startup_anchors=("lmdeploy", "EngineConfig", "model_config", "model params", "[TM]", "BlockManager",
                     "Started server process", "Uvicorn running", "_create_weight", "gemm_config"),
    ready=_READY,
    statements=(
        Statement(re.compile(r" - lmdeploy - \w+ - (?:input backend=|model_source: )|^engine_cfg:"), "startup"),
        Statement(re.compile(r" - lmdeploy - \w+ - get \d+ model params"
                             r"|Exception in thread [\w-]+ \((?:_create_weight|_get_params)\)"), "weights"),
        Statement(re.compile(r"\[TM\]\[INFO\] \[BlockManager\] block_size = ([\d.]+) MB"), "kv_cache",
                  ((1, "kv_block_gib", _MIB),)),
        Statement(re.compile(r"\[TM\]\[INFO\] \[BlockManager\] max_block_count = (\d+)"), "kv_cache",
                  ((1, "kv_blocks", 1),)),
        Statement(re.compile(r"\[TM\]\[INFO\] \[BlockManager\] chunk_size = (\d+)"), "kv_cache",
                  ((1, "kv_chunk_blocks", 1),)),
        Statement(re.compile(r"Started server process \[\d+\]"), "http"),
        Statement(_READY, "ready"),
    ),
    failures=(
        FailureLine(re.compile(r"\[TM\]\[ERROR\] CUDA runtime error: out of memory"), "cuda_oom"),
        CUDA_OOM,
        FailureLine(re.compile(r"\[TM\]\[ERROR\]"), "exception"),
        # the PyTorch engine's cache blocks are a tensor [blocks, block size, heads, head dim]: a negative first
        # dimension is a block count below zero, sized from the memory left after the weights
        FailureLine(re.compile(r"Trying to create tensor with negative dimension -\d+: \[-\d+, "), "exception",
                    "kv_cache"),
        FailureLine(re.compile(r"^ERROR:\s+Exception in ASGI application"), "exception"),  # a request's, once up
    ),
    http_url=re.compile(r"Uvicorn running on (\S+)"),
)


class LMDeployParser(TableParser):
    """The table-driven parser, plus the engine's configuration (its `…EngineConfig(…)` repr and TurboMind's INI
    dump → ParsedLog.args; `tensor_para_size` also as a stated TP size) and which engine ran (facts["backend"])."""

    def __init__(self) -> None:
        super().__init__(TABLES)
        self.in_ini = False  # inside TurboMind's `model_config:` INI lines

    @property
    def wants_every_line(self) -> bool:
        return self.in_traceback or self.in_ini

    def feed(self, number: int, text: str) -> None:
        log = self.log
        if self.in_ini:
            if (m := _INI_LINE.match(text)) is not None or not text.strip():
                if m is not None and m.group(1):
                    self._setting(m.group(1), m.group(2))
                return
            self.in_ini = False
        if _INI_START.search(text):
            self.in_ini = True
        if (config := _ENGINE_CONFIG.search(text)) is not None:
            for name, value in call_arguments(text[config.end():]).items():
                log.args.setdefault(name, value)
            if (tp := log.args.get("tp", "")).isdigit():
                log.stated_sizes.setdefault("tp", int(tp))
        if "Init tp model" in text and (errors := _TP_ERRORS.search(text)) is not None:
            log.seen_ranks.update(str(rank) for rank in range(len(_TP_ERROR.findall(errors.group(1)))))
        if "backend" not in log.facts:  # LMDeploy's own word for its engine (`--backend turbomind|pytorch`)
            if _TURBOMIND.search(text):
                log.facts["backend"] = "turbomind"
            elif _PYTORCH.search(text):
                log.facts["backend"] = "pytorch"
        super().feed(number, text)

    def _setting(self, name: str, value: str) -> None:
        """A `key = value` line of TurboMind's converted model config: the engine's own view of its launch."""
        self.log.args.setdefault(name, value)
        if name == "tensor_para_size" and value.isdigit():
            self.log.stated_sizes.setdefault("tp", int(value))



# what sets the states the kit reads from an LMDeploy log (the engine configuration it prints, the block manager's
# lines): the flags of `lmdeploy serve api_server`
LMDEPLOY_STATES = (
    State(KV_POOL, (
        Setting("--cache-max-entry-count", "the share of the memory free after the weights that the KV cache takes"),
        Setting("--session-len", "the longest session (request and answer) the engine accepts"),
        Setting("--max-batch-size", "the most sequences in a batch"),
        Setting("--tp", "tensor parallel size: the GPUs the model is split over"),
    ), "cache_max_entry_count= in the engine configuration; \"[TM][INFO] [BlockManager] max_block_count = N\" "
       "(TurboMind's blocks)"),
)

KIND = ServerKind(
    name="lmdeploy",
    # literals only: detection scans every kind's pattern over a log's first 2000 lines (a tenth of the time here)
    evidence=re.compile(r"lmdeploy|\[TM\]\[|TurbomindEngineConfig\(|PytorchEngineConfig\("),
    ready_pattern=_READY.pattern,
    fatal_patterns=(r"\[TM\]\[ERROR\] CUDA runtime error: out of memory",),
    parser=lambda rules: LMDeployParser(),
    # "lmdeploy==0.7.1" (pip), `lmdeploy check_env`'s "LMDeploy: 0.7.1+…"
    log_facts=LogFacts(version=re.compile(r"\blmdeploy==(\d+\.\d+[\w.+-]*)|\bLMDeploy: v?(\d+\.\d+[\w.+-]*)"),
                       package="lmdeploy", tp_size="tp", dp_size="dp",
                       labels={"backend": "LMDeploy backend (TurboMind or PyTorch)"}),
    volatile_args=frozenset({"model_name", "tp", "dp", "server_port", "server_name"}),
    memory_fields=("kv_blocks", "kv_block_gib"),
    model_flags=("--model-path",),
    # the engine configuration names no model path: the draft's command says TODO-model (validate refuses it)
    relaunch=Relaunch(launcher=("lmdeploy", "serve", "api_server", "{model}"),
                      args=("tp", "session_len", "max_batch_size", "cache_max_entry_count", "cache_block_seq_len"),
                      skip=frozenset({"server_name", "server_port"}), port_flag="--server-port"),
    states=LMDEPLOY_STATES,
    memory_share=MemoryShare("cache_max_entry_count", "--cache-max-entry-count",
                             "the cache's share of the memory free after the weights"),
    units_note="GiB (TurboMind's `MB` is MiB)",
)  # no budget: TurboMind prints its blocks, not the free memory they were sized from (so: memory_share)
