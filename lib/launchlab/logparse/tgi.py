"""The TGI kind (Hugging Face Text Generation Inference, `text-generation-launcher`): its launcher's, shards' and
router's lines → phases, KV-cache sizing, readiness and launch failures.

The launcher prints its `Args { … }` (one line before 2.x, pretty-printed over many lines since), downloads the
weights and starts one shard per GPU ("Starting shard rank=N", "Shard ready in S s"); the router then warms the
model up — TGI sizes its KV cache there ("KV-cache blocks: N, size: B" in 3.x, "Setting max batch total tokens to
T": the cache's capacity in tokens) — and is ready at "Connected". Launch failures: "Not enough memory to handle N
prefill tokens" (a CUDA out-of-memory in the warm-up, re-raised by TGI), a shard's own error or signal, then the
launcher's "Shard N failed to start". A request's "Server error" after ready makes the run degraded. Formats:
the excerpts in tests/fixtures/real-logs-round3 (TGI 0.9 – 3.2). `KIND`, at the end, is the kind's record.
"""

from __future__ import annotations

import re

from launchlab.logparse.parsedlog import ParsedLog
from launchlab.logparse.serverkind import LogFacts, ServerKind
from launchlab.logparse.tableparser import CUDA_OOM, FailureLine, Statement, TableParser, Tables

_ROUTER_LINE = r"text_generation_router(?:_v3)?(?:::\w+)*: [\w/.]+:\d+: "
_READY = re.compile(rf"{_ROUTER_LINE}Connected\s*$")

TABLES = Tables(
    server="tgi",
    anchors=("Not enough memory", "Server error", "signal", "failed to start", "ShardCannotStart", "WebserverFailed",
             "crashed", "ShardFailed", "Error when initializing model"),
    startup_anchors=("text_generation", "Args {", "Runtime environment", "download", "shard", "Shard",
                     "KV-cache blocks", "max batch total tokens", "defaulted to", "Warming up", "warmup", "Warmup",
                     "Webserver", "Connected"),
    ready=_READY,
    statements=(
        Statement(re.compile(r"Starting download process|Successfully downloaded weights|Files are already present "
                             r"on the host|Starting shard|Waiting for shard to be ready|Server started at unix://"),
                  "weights"),
        Statement(re.compile(r"Shard ready in ([\d.]+)s"), "weights", ((1, "weights_s", 1),)),
        Statement(re.compile(r"Starting Webserver|text_generation_router(?:_v3)?::server: "), "http"),
        Statement(re.compile(r"Warming up model|\bwarmup\{|Method Warmup encountered an error"), "warmup"),
        Statement(re.compile(r"KV-cache blocks: (\d+), size: (\d+)"), "kv_cache",
                  ((1, "kv_blocks", 1), (2, "kv_block_tokens", 1))),
        Statement(re.compile(r"Setting max batch total tokens to (\d+)"), "kv_cache", ((1, "kv_tokens", 1),)),
        Statement(re.compile(r"Maximum input tokens defaulted to (\d+)"), None, ((1, "max_input_tokens", 1),)),
        Statement(re.compile(r"Maximum total tokens defaulted to (\d+)"), None, ((1, "max_total_tokens", 1),)),
        Statement(re.compile(r"Not enough memory to handle (?:\d+ total tokens with )?(\d+) prefill tokens"), None,
                  ((1, "prefill_tokens", 1),)),
        Statement(_READY, "ready"),
    ),
    failures=(
        # the warm-up's torch OOM, re-raised: "You need to decrease `--max-batch-prefill-tokens`"
        FailureLine(re.compile(r"Not enough memory to handle (?:\d+ total tokens with )?\d+ prefill tokens"), "cuda_oom",
                    "warmup"),
        FailureLine(re.compile(r"\bwarmup\{[^}]*\}:warmup: .*Server error: |Method Warmup encountered an error"),
                    "exception", "warmup", amends=True),
        CUDA_OOM,
        FailureLine(re.compile(r"Shard process was signaled to shutdown with signal \d+"), "exception"),
        # the shard's own report (0.9: `ERROR shard-manager: … Error when initializing model`), its traceback after it
        FailureLine(re.compile(r"Error when initializing model"), "exception", "weights"),
        FailureLine(re.compile(r"Shard \d+ failed to start|Error: ShardCannotStart"), "exception", "weights",
                    amends=True),
        FailureLine(re.compile(r"Shard \d+ crashed|Error: ShardFailed"), "exception"),  # a shard that died later
        FailureLine(re.compile(rf"{_ROUTER_LINE}Server error: |^Error: (?:WebserverFailed|Warmup)"), "exception"),
    ),
    rank=re.compile(r"\brank=(\d+)"),
)

_ARGS = "Args {"
# `num_shard: Some(4)`, `model_id: "…"`, `max_input_length: 4096`: the scalar fields of Rust's Debug output
_ARG = re.compile(r'(\w+): (?:Some\(\s*)?("(?:[^"\\]|\\.)*"|[^\s,(){}\[\]]+)')
# never kept: `api_key`, `hf_token`, `ngrok_authtoken`, `ngrok_edge` are in the Args, and a URL may carry a password
_SECRET = re.compile(r"(?:key|token|secret|password|edge)$", re.I)
_CREDENTIALS = re.compile(r"://[^/\s@]*@")
_TGI_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z")  # where TGI's own line starts, after any prefix


class TGIParser(TableParser):
    """The table-driven parser, plus the launcher's `Args { … }`, one line or many (→ ParsedLog.args)."""

    def __init__(self) -> None:
        super().__init__(TABLES)
        self.args_lines: list[str] | None = None  # inside a pretty-printed Args block
        self.outer = 0  # the length of the prefix a collector put before each line (docker's `tgi-1  | `)

    @property
    def wants_every_line(self) -> bool:
        return self.in_traceback or self.args_lines is not None

    def feed(self, number: int, text: str) -> None:
        if self.args_lines is not None:
            line = text[self.outer:]
            if line.startswith("}") or _ARGS in text or "text_generation_" in text:  # its end, or a new record
                self._arguments(" ".join(self.args_lines))
            else:
                self.args_lines.append(line)
                return
        if (start := text.find(_ARGS)) >= 0:
            rest = text[start + len(_ARGS):]
            if rest.strip():
                self._arguments(rest)
            else:
                self.args_lines = []
                own = _TGI_TIME.search(text, 0, start)
                self.outer = own.start() if own is not None else 0
        super().feed(number, text)

    def _arguments(self, text: str) -> None:
        self.args_lines = None
        for key, value in _ARG.findall(text):
            if not _SECRET.search(key) and not _CREDENTIALS.search(value):
                self.log.args.setdefault(key, value.strip('"'))

    def result(self) -> ParsedLog:
        if self.args_lines is not None:  # the log ends inside the block
            self._arguments(" ".join(self.args_lines))
        return super().result()


KIND = ServerKind(
    name="tgi",
    evidence=re.compile(r"text_generation_(?:launcher|router|server|client)|text-generation-launcher"
                        r"|text-generation-server"),
    ready_pattern=_READY.pattern,
    fatal_patterns=(r"Shard \d+ failed to start", r"Error: ShardCannotStart", r"Error: WebserverFailed",
                    r"Error: Warmup", r"Not enough memory to handle \d+ (?:total tokens with \d+ )?prefill tokens"),
    parser=lambda rules: TGIParser(),
    # "text-generation-launcher 2.0.2" (--version); the Args and the runtime environment state none
    log_facts=LogFacts(version=re.compile(r"text-generation-launcher v?(\d+\.\d+[\w.+-]*)"),
                       package="text_generation_server", model="model_id", tp_size="num_shard"),
    volatile_args=frozenset({"port", "api_key"}),
    memory_fields=("kv_tokens",),
    model_flags=("--model-id",),
)  # no budget: TGI prints its KV capacity (kv_tokens) but not the memory figures it sized it from
