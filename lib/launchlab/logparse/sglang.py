"""SGLang startup logs → per-rank memory fields, phase reached, readiness and failure.

Covers the SGLang 0.4.3–0.5.x statement formats of reference/log-formats.md section 2: the `[date time TPn]`
prefix found anywhere in a line (foreign prefixes before it are ignored), GB read as GiB, tracebacks that
continue unprefixed after "Scheduler hit an exception".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from launchlab.logparse.common import ParsedLog, clean_lines, debug_record

READY_PATTERN = r"The server is fired up and ready to roll!"
FATAL_PATTERNS = (
    r"Not enough memory\. Please try to increase --mem-fraction-static",
    r"Loaded weights leave no GPU memory for the KV cache",
    r"Scheduler hit an exception",
    r"Received sigquit from a child process",
    r"Initialization failed\. warmup error",
)

_PREFIX = re.compile(
    r"\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?|\d{2}:\d{2}:\d{2})"
    r"(?P<tags>(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] (?P<msg>.*)"
)
_TP = re.compile(r"TP(\d+)")
_NUM = r"(-?[\d.]+)"

# (compiled regex, phase it belongs to, [(group, field)])
_STATEMENTS = [
    (re.compile(r"Init torch distributed begin|Init nccl begin"), "dist_init", []),
    (re.compile(rf"(?:Init torch distributed ends\.|Memory baseline taken\.).*?mem usage={_NUM} GB"), "dist_init",
     [(1, "dist_init_mem_gib")]),
    (re.compile(rf"Load weight begin\. avail mem={_NUM} GB"), "weights", [(1, "weights_begin_avail_gib")]),
    (re.compile(rf"Load weight end\..*?avail mem={_NUM} GB(?:, mem usage={_NUM} GB)?"), "weights",
     [(1, "weights_end_avail_gib"), (2, "weights_mem_gib")]),
    (re.compile(rf"KV Cache is allocated\.(?: dtype: [\w.]+,)? (?:#tokens: (\d+), )?"
                rf"(?:K size: {_NUM} GB, V size: {_NUM} GB|KV size: {_NUM} GB)"), "kv_cache",
     [(1, "kv_tokens"), (2, "kv_k_gib"), (3, "kv_v_gib"), (4, "kv_gib")]),
    (re.compile(rf"Memory pool end\. avail mem={_NUM} GB"), "kv_cache", [(1, "pool_end_avail_gib")]),
    (re.compile(rf"Capture (?:[\w ]+? )?(?:cuda|CUDA|cpu|npu) graph begin\..*?avail mem={_NUM} GB"), "cuda_graph",
     [(1, "graph_begin_avail_gib")]),
    (re.compile(rf"Capture (?:[\w ]+? )?(?:cuda|CUDA|cpu|npu) graph end\.(?: Time elapsed: {_NUM} s\.| bs=\[[^\]]*\], "
                rf"elapsed={_NUM} s,)?(?: avail mem={_NUM} GB\.)?(?: mem usage={_NUM} GB[.,])?"
                rf"(?: avail mem={_NUM} GB\.)?"), "cuda_graph",
     [(1, "graph_s"), (2, "graph_s"), (3, "graph_end_avail_gib"), (4, "graph_mem_gib"), (5, "graph_end_avail_gib")]),
    (re.compile(r"max_total_num_tokens=(\d+)"), "kv_cache", [(1, "max_total_num_tokens")]),
    (re.compile(r"Uvicorn running on|Application startup complete\."), "http", []),
]
_SERVER_ARGS = re.compile(r"server_args=ServerArgs\(")
_ARG = {
    "mem_fraction_static": re.compile(r"\bmem_fraction_static=([\d.]+)"),
    "tp_size": re.compile(r"\btp_size=(\d+)"),
    "port": re.compile(r"\bport=(\d+)"),
    "disable_custom_all_reduce": re.compile(r"\bdisable_custom_all_reduce=(True|False)"),
}
_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?(?P<type>\w+(?:Error|Exception|Interrupt))(?::\s*(?P<msg>.*))?$")


def _timestamp(text: str) -> datetime | None:
    for fmt in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            pass
    return None  # HH:MM:SS only (SGLang ≤ 0.3.3): no date to anchor it


def classify(message: str) -> str:
    """The failure reason of an error message (vocabulary of ARCHITECTURE.md section 4.3)."""
    if re.search(r"Not enough memory|Loaded weights leave no GPU memory|Memory pool size is too small", message):
        return "kv_cache_no_memory"
    if re.search(r"Capture (?:cuda|CUDA) graph failed", message):
        return "cuda_graph_failed"
    if re.search(r"CUDA out of memory|OutOfMemoryError", message):
        return "cuda_oom"
    if re.search(r"custom_all_reduce|Custom allreduce", message):
        return "custom_allreduce_failed"
    if re.search(r"NCCL error|ncclInternalError|ncclSystemError", message):
        return "nccl_error"
    return "exception"


def parse(raw_lines: Iterable[str]) -> ParsedLog:
    log = ParsedLog(server="sglang")
    traceback_rank: str | None = None
    traceback_last = ""
    for number, text in clean_lines(raw_lines):
        m = _PREFIX.search(text)
        if m is None:
            if traceback_rank is not None and text.strip():
                traceback_last = text.strip()
                _maybe_exception_line(log, traceback_last)
            elif (records := debug_record(text)) is not None:
                log.debug.extend(records)
            continue
        traceback_rank = None
        msg = m["msg"]
        t = _timestamp(m["ts"])
        if log.first_t is None:
            log.first_t = t
        tp = _TP.search(m["tags"])
        rank = tp.group(1) if tp else "0"
        _statement(log, msg, t, rank, number)
        if "Scheduler hit an exception" in msg or msg.rstrip().endswith("Traceback (most recent call last):"):
            traceback_rank = rank
            log.fail("exception", None, msg)
    return log


def _maybe_exception_line(log: ParsedLog, line: str) -> None:
    m = _EXCEPTION_LINE.match(line)
    if m:
        reason = classify(line)
        phase = "kv_cache" if reason == "kv_cache_no_memory" else None
        log.fail(reason, phase, line)


def _statement(log: ParsedLog, msg: str, t: datetime | None, rank: str, number: int) -> None:
    if (records := debug_record(msg)) is not None:
        log.debug.extend(records)
        for r in records:
            log.record(t, rank, f"debug.{r['name']}.{r['key']}", r["value"], number)
        return
    if _SERVER_ARGS.search(msg):
        for name, rx in _ARG.items():
            if (a := rx.search(msg)) is not None:
                log.config[name] = a.group(1)
        return
    if "ready to roll" in msg:
        log.ready = True
        log.ready_t = t
        log.reach("ready")
        return
    for rx, phase, groups in _STATEMENTS:
        s = rx.search(msg)
        if s is None:
            continue
        log.reach(phase)
        for index, name in groups:
            if s.group(index) is not None:
                log.record(t, rank, name, float(s.group(index)), number)
        if name_kv := _kv_total(log.ranks.get(rank, {}), groups):
            log.record(t, rank, "kv_gib", name_kv, number)
        return
    if re.search(r"Not enough memory\. Please try to increase --mem-fraction-static"
                 r"|Loaded weights leave no GPU memory", msg):
        log.fail("kv_cache_no_memory", "kv_cache", msg)


def _kv_total(fields: dict[str, float], groups: list[tuple[int, str]]) -> float | None:
    """K + V as `kv_gib` when the pool printed them separately (MHA models)."""
    names = {n for _, n in groups}
    if "kv_k_gib" in names and "kv_k_gib" in fields and "kv_v_gib" in fields:
        return round(fields["kv_k_gib"] + fields["kv_v_gib"], 2)
    return None
