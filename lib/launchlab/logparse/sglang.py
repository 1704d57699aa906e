"""The SGLang server kind: its startup logs → per-rank memory fields, phase reached, readiness and failure.

Covers the SGLang 0.3–0.5.23 statement formats of reference/log-formats.md section 2: the `[date time TPn]`
prefix searched anywhere in a line (docker, journald and other foreign prefixes before it are ignored; a `PPn` tag
keys the rank `pp<n>.<TP rank>`),
bare messages without a prefix, GB read as GiB, tracebacks that continue unprefixed after
"Scheduler hit an exception", and a negative profiled token count as certain evidence of a KV failure. Also read:
the `server_args=ServerArgs(…)` line (→ `args`), custom all-reduce statements (logparse/custom_ar.py), the NCCL
version, what ranks say about their model, dtypes and graph batch sizes, and the HTTP server's pid and URL.
A speculative-decoding draft model (EAGLE / EAGLE3 / NextN) prints the target's statements again: its lines are
told apart (speculative.DraftSteps, its `Capture draft …` lines, its model class) and its figures kept as `draft_*`
fields. A traceback pasted without its header (its first line a frame) is a failure too.

`KIND`, at the end, is the kind's record (serverkind.py): how its logs are recognised, its ready and fatal
lines, and how the report recomputes its KV-cache budget.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from launchlab.logparse import custom_ar, sglangbudget, sglanglines, speculative
from launchlab.logparse.arguments import call_arguments, config_arguments
from launchlab.logparse.common import (
    TORCH_RANK,
    anchors,
    classify,
    debug_records,
    exception_line,
    feed_lines,
    match_statement,
    nccl_version,
)
from launchlab.logparse.cuda_oom import oom_fields
from launchlab.logparse.kindflags import SGLANG as SGLANG_FLAGS
from launchlab.logparse.kindstates import SGLANG_STATES, sglang_usable
from launchlab.logparse.parsedlog import ParsedLog
from launchlab.logparse.serverkind import (
    BreakEven,
    GraphCapture,
    Instrumentation,
    LogFacts,
    Relaunch,
    ServerKind,
    Suspect,
)
from launchlab.logparse.tracebacks import HEADERLESS_FRAME, Attribution

if TYPE_CHECKING:  # annotations only: parsing a log never loads pandas
    pass

def _rank(tags: str) -> str:
    """The rank a line's tags name: the TP rank, as the stable interface keys ranks (`TP3` → "3"; under DP attention
    `DP1 TP1` → "1"); under pipeline parallelism `pp<stage>.<TP rank>`, since every stage has its own GPUs and TP
    ranks that start again at 0 (`PP3` → "pp3.0", `DP0 PP1 TP2` or `TP2 PP1` → "pp1.2"). A DP index does not key
    the rank: without DP attention two DP groups' TP rank 0 (`DP0 TP0`, `DP1 TP0`) share the key "0" (a known limit
    of the interface's keying; the DP ranks seen are in `dp_ranks`)."""
    tp = sglanglines.TP_TAG.search(tags)
    rank = tp.group(1) if tp else "0"
    pp = sglanglines.PP_TAG.search(tags)
    return rank if pp is None else f"pp{pp.group(1)}.{rank}"


def _timestamp(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)  # `2025-11-30 12:01:02[.123]`; C-fast, unlike strptime
    except ValueError:
        return None  # HH:MM:SS only (SGLang ≤ 0.3.3): no date to anchor it


class SGLangParser:
    anchors = anchors(sglanglines.ANCHORS)

    def __init__(self) -> None:
        self.log = ParsedLog(server="sglang")
        self.in_traceback = False  # inside a traceback that continues without the SGLang prefix
        self.current: str | None = None  # the phase in progress: after "Load weight end" it is the KV pool
        self.traceback_rank = "0"  # the rank whose "Scheduler hit an exception" the unprefixed lines continue
        self.frames = Attribution()  # the phase the traceback's frames name
        self.graphs: dict[tuple[str, str], tuple[float, float, int]] = {}  # (rank, model) → GiB, s and count so far
        self.steps = speculative.DraftSteps()  # whose each startup statement is, the target's or a draft's
        self.drafting: set[str] = set()  # processes whose last startup statement was their draft model's

    @property
    def wants_every_line(self) -> bool:
        """Inside a traceback, and between the HTTP server's start and ready: the warm-up request's first line
        ("Prefill batch") is read there only — later, one per request, it would make every chunk of a long log read."""
        return self.in_traceback or (self.log.phase_reached == "http" and not self.log.ready)

    def feed(self, number: int, text: str) -> None:
        log = self.log
        log.line = number
        if text[:5] == "[rank" and (torch_rank := TORCH_RANK.match(text)) is not None:
            log.seen_ranks.add(torch_rank.group(1))
        m = sglanglines.PREFIX.search(text)
        if m is None:
            self._unprefixed(number, text)
            return
        if self.in_traceback:  # the traceback ended without its exception line (cut, or another rank's line)
            self.frames.conclude(log)
        self.in_traceback = False
        if m.start() and text.startswith("Capturing "):  # the capture's progress bar, the line glued after it
            match_statement(log, sglanglines.STATEMENTS, text[: m.start()], None, "0", number)
        msg = m["msg"]
        if m["tags"]:
            log.seen_ranks.add(rank := _rank(m["tags"]))
            if (dp := sglanglines.DP_TAG.search(m["tags"])) is not None:
                log.dp_ranks.add(dp.group(1))
                log.seen_ranks.add(f"dp{dp.group(1)}.{rank}")  # which DP rank a TP rank is in (parallel.py)
        if "world_size" in msg or "nranks" in msg or ("_size=" in msg and "ServerArgs(" not in msg):
            log.note_world(msg)
        if log.phase_reached == "http" and not log.ready and msg.startswith("Prefill batch"):
            log.reach("warmup")  # the warm-up request, after the HTTP server started (warmup's line, not its place)
        if not self.anchors.contains(msg):  # a decode or access line in a chunk fed for another line: nothing to read
            return
        noted = log.failure
        self._message(number, msg, _timestamp(m["ts"]), _rank(m["tags"]), process=m["tags"])
        if noted is None and log.failure is not None and m["tags"] in self.drafting and not (
                log.failure.phase == "kv_cache" and self.steps.before_target_kv(m["tags"])):
            # the process failed in its draft model's startup (not in the target's KV sizing that follows a draft
            # loaded first: that one counts the draft's weights, but is the target's)
            log.place(log.failure.phase, draft=True)

    def _unprefixed(self, number: int, text: str) -> None:
        if self.in_traceback:
            if (found := custom_ar.recognise(text)) is not None:  # e.g. the kernel's error inside the traceback
                self.log.note_custom_ar(self.traceback_rank, found)
            self.frames.see(text, number)
            if not text[:1].isspace() and exception_line(text) is not None:
                for name, value in oom_fields(text).items():
                    self.log.record(None, self.traceback_rank, name, value, number)
                self._kv_minimum(number, text, None, self.traceback_rank)
                reason = classify(text)
                self.log.refine(reason, text.strip(), "kv_cache" if reason == "kv_cache_no_memory" else None)
                self.frames.conclude(self.log)
                self.in_traceback = False
            return
        if not self.log.ready and text[:1] in " F" and HEADERLESS_FRAME.match(text):
            # a frame with no traceback before it: an excerpt that starts inside one (its header is not in the log)
            self.log.fail("exception", self.current, text.strip())
            self.in_traceback, self.traceback_rank = True, "0"
            self.frames.see("Traceback (most recent call last):")
            self.frames.see(text, number)
            return
        if "_size=" in text and sglanglines.DUMP_PIECE.search(text) and len(sglanglines.ARG_PAIR.findall(text)) >= 5:
            self._dump_piece(text)
            return
        # a bare message (pasted without its prefix) or a line of another program
        if self.anchors.contains(text):
            self._message(number, text.strip(), None, "0", bare=True)

    def _dump_piece(self, text: str) -> None:
        """A piece of the argument dump a paste or a store broke across lines (`…, tp_size=1, pp_size=2, …` with no
        prefix): its whole pairs, never overriding the dump's own line; its first and last pair may be cut."""
        pairs = list(config_arguments(text).items())
        for name, value in pairs[1:-1] if len(pairs) > 2 else []:
            self.log.args.setdefault(name, value)

    def _message(self, number: int, msg: str, t: datetime | None, rank: str, bare: bool = False,
                 process: str = "") -> None:
        log = self.log
        if (records := debug_records(msg)) is not None:
            log.add_debug(records, t, rank, number)
            return
        if (start := msg.find(sglanglines.SERVER_ARGS)) >= 0:
            self._server_args(number, msg[start + len(sglanglines.SERVER_ARGS):], t)
            return
        if "ready to roll" in msg:
            log.ready = True
            log.reach("ready")
            return
        if (found := custom_ar.recognise(msg)) is not None:
            self._custom_ar(msg, rank, found)
        if (version := nccl_version(msg)) is not None:
            log.nccl_version = version
        prefix, step = self._whose(msg, rank, process)
        self._facts(number, msg, t, rank, draft=bool(prefix))
        if (matched := match_statement(log, sglanglines.STATEMENTS, msg, t, rank, number, prefix)) is not None:
            phase, m = matched
            self.current = sglanglines.NEXT.get(msg[: msg.find(".")], phase)
            if step is not None or prefix:
                self.drafting.add(process)
            elif phase != "http":
                self.drafting.discard(process)
            if step is not None:
                log.reach_draft(step)
                if m.re is sglanglines.WEIGHTS_END and m.group(1) is not None and self.steps.before_target_kv(process):
                    # the draft loaded between the target's weights and its KV cache: what the sizing starts from
                    log.record(t, rank, "kv_sizing_avail_gib", float(m.group(1)), number)
            if m.re is sglanglines.KV_ALLOCATED and m.group(2) is not None:  # MHA pools print K and V: their sum is the pool
                log.record(t, rank, f"{prefix}kv_gib", round(float(m.group(2)) + float(m.group(3)), 2), number)
            elif phase == "cuda_graph" and sglanglines.GRAPH_END in msg and "piecewise" not in msg:
                self._graph_total(number, t, rank, prefix)
            return
        self._kv_minimum(number, msg, t, rank)
        self._unmatched(number, msg, t, rank, bare=bare)

    def _custom_ar(self, msg: str, rank: str, found) -> None:
        log = self.log
        log.note_custom_ar(rank, found)
        if found.state == "active":
            log.reach("cuda_graph")  # addresses are registered as graphs are captured
        elif found.reason == "cuda_error":  # the kernel's CUDA error ends the process, with or without a wrapper
            log.fail("custom_allreduce_failed", "cuda_graph" if "Capture cuda graph failed" in msg else self.current,
                     msg)

    def _unmatched(self, number: int, msg: str, t: datetime | None, rank: str, *, bare: bool) -> None:
        """A message no statement matched: what it overrides, or how it fails."""
        log = self.log
        if (over := sglanglines.OVER_CAP.search(msg)) is not None and int(over.group(2)) <= 0:
            log.fail("kv_cache_no_memory", "kv_cache", msg)  # a negative profiled size makes the failure certain
        elif over is not None:  # the cap is not taken: the pool is the profiled size
            log.override("max_total_tokens", over.group(1), over.group(2), msg)
        elif (ignored := sglanglines.IGNORED_FLAG.search(msg)) is not None:
            log.override(ignored.group(1).replace("-", "_"), None, None, msg)
        elif sglanglines.NOT_ENOUGH.search(msg):
            log.fail("kv_cache_no_memory", "kv_cache", msg)
        elif sglanglines.WATCHDOG.match(msg):  # a scheduler stuck that long: SGLang kills the server after it
            log.fail("exception", self.current, msg)
        elif "Initialization failed. warmup error" in msg:
            # the warm-up request after the server started: the line itself says the phase, and its traceback follows
            log.reach("warmup")
            log.fail(classify(msg), "warmup", msg)
            self._traceback(msg, rank)
        elif "Scheduler hit an exception" in msg or msg.rstrip().endswith("Traceback (most recent call last):"):
            log.fail(classify(msg), self.current, msg)
            self._traceback(msg, rank)
        elif "Capture cuda graph failed" in msg or "Capture CUDA graph failed" in msg:
            log.fail("cuda_graph_failed", "cuda_graph", msg)
        elif not bare and exception_line(msg) is not None:
            for name, value in oom_fields(msg).items():
                log.record(t, rank, name, value, number)
            reason = classify(msg)
            log.fail(reason, "kv_cache" if reason == "kv_cache_no_memory" else None, msg)

    def _whose(self, msg: str, rank: str, process: str) -> tuple[str, str | None]:
        """Whose figures a statement prints: ("", None) the target's; a draft's field prefix and its step
        (`draft_`/`draft_extend_`, parsedlog.DRAFT_PHASES). A draft's capture names itself; its other statements are
        the target's words, told apart by speculative.DraftSteps."""
        if "Capture draft" in msg and (capture := sglanglines.DRAFT_CAPTURE.search(msg)) is not None:
            self.steps.begin()
            return ("draft_extend_", "draft_extend_graph") if capture.group(1) else ("draft_", "draft_cuda_graph")
        if "architectures=" in msg and (arch := speculative.ARCHITECTURES.search(msg)) is not None:
            if speculative.DRAFT_ARCHITECTURE.search(arch.group(1)):  # the draft runner's model config
                self.steps.begin()
                self.log.describe(rank, "draft_architecture", arch.group(1))
        step = next((step for words, step in sglanglines.STEPS if words in msg), None)
        if step is None:
            return "", None
        typed = (step == "weights_end" and (kind := sglanglines.WEIGHTS_TYPE.search(msg)) is not None
                 and speculative.DRAFT_ARCHITECTURE.search(kind.group(1)) is not None) or (
            step == "kv" and "raft KV Cache" in msg)  # 0.5.23 names a labelled pool: "<label> KV Cache is allocated"
        if typed:
            self.steps.begin()
        if not (typed or self.steps.is_draft(process, step)):
            return "", None
        return "draft_", sglanglines.DRAFT_STEP.get(step)

    def _graph_total(self, number: int, t: datetime | None, rank: str, prefix: str = "") -> None:
        """0.5.17 captures a prefill graph, then a decode graph, each with its own `mem usage` and `elapsed`: from the
        second capture on, the rank's graph memory and time are recorded again as the sums so far (the last value is
        the total) with `graph_captures`, their count (a draft's, `prefix`, apart)."""
        fields = self.log.ranks.get(rank, {})
        mem, secs, captures = self.graphs.get((rank, prefix), (0.0, 0.0, 0))
        mem += fields.get(f"{prefix}graph_mem_gib", 0.0)
        secs, captures = secs + fields.get(f"{prefix}graph_s", 0.0), captures + 1
        self.graphs[(rank, prefix)] = (mem, secs, captures)
        if captures > 1:
            self.log.record(t, rank, f"{prefix}graph_mem_gib", round(mem, 2), number)
            self.log.record(t, rank, f"{prefix}graph_s", round(secs, 2), number)
            self.log.record(t, rank, f"{prefix}graph_captures", float(captures), number)

    def _kv_minimum(self, number: int, msg: str, t: datetime | None, rank: str) -> None:
        """SGLang's own figures in its KV-sizing error (the share it was given, the share it says is the minimum, the
        one it suggests: a rank's first error only, its own), and the multimodal IPC pool it reserves before sizing.
        The error may be wrapped after its first sentence (a paste): each part is read where it is."""
        if "mem-fraction-static" in msg:
            fields = self.log.ranks.get(rank, {})
            if (m := sglanglines.KV_ERROR_FRACTION.search(msg)) is not None and "kv_error_fraction" not in fields:
                self.log.record(t, rank, "kv_error_fraction", float(m.group(1)), number)
            if (m := sglanglines.KV_RAISE.search(msg)) is not None and "kv_min_fraction" not in fields:
                self.log.record(t, rank, "kv_min_fraction", float(m.group(2)), number)
                self.log.record(t, rank, "kv_suggested_fraction", float(m.group(1)), number)
        elif (m := sglanglines.IPC_RESERVE.search(msg)) is not None:
            self.log.record(t, rank, "ipc_reserve_gib", int(m.group(1)) / 1024, number)

    def _traceback(self, msg: str, rank: str) -> None:
        """A failure line whose traceback follows without the SGLang prefix: read every line until its exception."""
        if msg.rstrip().endswith("Traceback (most recent call last):") or "Scheduler hit an exception" in msg:
            self.in_traceback = True
            self.traceback_rank = rank
            self.frames.see(msg, self.log.line)  # the header: a new traceback

    def _server_args(self, number: int, text: str, t: datetime | None) -> None:
        log = self.log
        log.args.update(call_arguments(text))
        speculative.from_args(log.spec, log.args)
        for name in sglanglines.SETTINGS:
            try:
                log.setting(t, name, float(log.args[name]), number)
            except (KeyError, ValueError):
                pass  # not printed, or None (not yet resolved)

    def _facts(self, number: int, msg: str, t: datetime | None, rank: str, draft: bool = False) -> None:
        """What a line states besides its phase: the scheduler summary, names and dtypes (a draft's model class as
        `draft_architecture`), graph batch sizes, HTTP, speculative decoding."""
        log = self.log
        if "speculative" in msg:
            speculative.from_text(log.spec, msg)
        if (summary := msg.find("max_total_num_tokens=")) >= 0:
            for name, value, gb in sglanglines.SUMMARY_PAIR.findall(msg, summary):
                log.record(t, rank, f"{name}_gib" if gb else name, float(value), number)
        elif (weights := sglanglines.WEIGHTS_TYPE.search(msg)) is not None:
            if draft:
                log.describe(rank, "draft_architecture", weights.group(1))
                return
            log.describe(rank, "model_type", weights.group(1))
            if weights.group(2):
                log.describe(rank, "dtype", weights.group(2))
        elif (kind := sglanglines.GRAPH_KIND.search(msg)) is not None:
            log.describe(rank, "graph_kind", kind.group(1).lower())
        elif (bs := sglanglines.CAPTURE_BS.search(msg)) is not None:
            sizes = [int(b) for b in re.findall(r"\d+", bs.group(1))]
            log.describe(rank, "capture_bs", bs.group(1))
            log.record(t, rank, "capture_bs_count", float(len(sizes)), number)
            if sizes:
                log.record(t, rank, "capture_bs_max", float(max(sizes)), number)
        elif "KV cache dtype" in msg or "dtype: " in msg:
            if (kv := sglanglines.KV_DTYPE.search(msg)) is not None:
                log.describe(rank, "kv_cache_dtype", kv.group(1) or kv.group(2))
        elif (auto := sglanglines.MEM_FRACTION_AUTO.search(msg)) is not None:
            log.override("mem_fraction_static", log.args.get("mem_fraction_static"), auto.group(1), msg)
            log.setting(t, "mem_fraction_static", float(auto.group(1)), number)
        elif (url := sglanglines.UVICORN.search(msg)) is not None:
            log.http_url = url.group(1)
        elif (pid := sglanglines.SERVER_PID.search(msg)) is not None:
            log.pids.setdefault("http_server", int(pid.group(1)))

    def result(self) -> ParsedLog:
        if self.in_traceback:  # the log ends inside a traceback
            self.frames.conclude(self.log)
        custom_ar.disabled_by_user(self.log, self.log.args.get("tp_size"), "server_args")
        return self.log


def parse(raw_lines: Iterable[str]) -> ParsedLog:
    return feed_lines(SGLangParser(), raw_lines)


def _sim_card_mib(free_before_weights_gib: float, *, reserved_mib: int, custom_ar: bool) -> int:
    """The simulator's own arithmetic (imported when a box is shaped, never to parse a log)."""
    from launchlab.sim.sglang_server import card_mib

    return card_mib(free_before_weights_gib, reserved_mib=reserved_mib, custom_ar=custom_ar)


KIND = ServerKind(
    name="sglang",
    max_length="--context-length",  # what a max_len_exceeds_kv asks to lower
    evidence=re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: (?:DP|PP|TP|EP|ATTN_CP|MOE_DP)\d+)*\] "
                        r"|\[\d{2}:\d{2}:\d{2} TP\d+\] |server_args=ServerArgs|sglang|KV Cache is allocated"
                        r"|Load weight (?:begin|end)"),
    ready_pattern=r"The server is fired up and ready to roll!",
    fatal_patterns=(
        r"Not enough memory\. Please try to increase --mem-fraction-static",
        r"Loaded weights leave no GPU memory for the KV cache",
        r"Scheduler hit an exception",
        r"Received sigquit from a child process",
        r"Initialization failed\. warmup error",
    ),
    parser=lambda rules: SGLangParser(),
    budget=sglangbudget.kv_budget,
    report_intro=("SGLang sizes its KV cache as `rest = avail − total × (1 − mem_fraction_static)` with "
                  "`total` the free memory before the weights and `avail` after them (\"Load weight end\", MIN over "
                  "ranks); `rest ≤ 0` is \"Loaded weights leave no GPU memory for the KV cache\" (0.5.17) or "
                  "\"Not enough memory\", and the break-even fraction is `1 − avail/total`. SGLang 0.5.17 measures "
                  "`total` before something else takes memory, so \"Load weight begin\" understates it; "
                  "`total_from` says which numbers gave it: on a failed launch, the minimum viable share SGLang's "
                  "error states (then the break-even is SGLang's own); on a ready one, the KV pool it allocated "
                  "(K + V, printed to 0.01 GB); otherwise \"Load weight begin\". `logged_agrees` compares `rest` "
                  "with an instrumentation line (`DEBUG profile_available_bytes` or `DEBUG profile_max_num_token`) "
                  "when the server printed one. A multimodal CUDA IPC pool (`ipc_reserve_gib`, up to 1 GiB) is "
                  "reserved before the sizing, so it is already outside `avail`."),
    break_even=BreakEven(arg="mem_fraction_static", column="break_even_fraction", formula="1 − avail/total",
                         flag="--mem-fraction-static", margin=0.01),
    pool_cap_args=("max_total_tokens",),
    custom_ar_off="--disable-custom-all-reduce",
    states=SGLANG_STATES,
    known_flags=SGLANG_FLAGS,
    usable=sglang_usable,
    arg_aliases={"tp": "tp_size", "tp-size": "tp_size", "dp": "dp_size", "ep": "ep_size", "pp": "pp_size",
                 "model": "model_path"},
    # "sglang==0.5.6" (pip freeze, env dumps), "SGLang version 0.5.8"
    log_facts=LogFacts(version=re.compile(r"\b(?:SGLang|sglang) version:? v?(\d+\.\d+[\w.+-]*)|\bsglang==(\d+\.\d+[\w.+-]*)"),
                       package="sglang", model="model_path", tp_size="tp_size", dp_size="dp_size", pp_size="pp_size"),
    volatile_args=frozenset({"port", "host", "random_seed", "nccl_port", "dist_init_addr", "log_requests", "api_key",
                             "served_model_name", "tokenizer_path", "model_path", "tp_size", "dp_size",
                             "file_storage_path", "download_dir", "log_level"}),
    memory_fields=("dist_init_mem_gib", "weights_mem_gib", "weights_end_avail_gib", "kv_tokens", "kv_gib",
                   "pool_end_avail_gib", "graph_mem_gib", "graph_end_avail_gib"),
    free_memory=sglangbudget.free_memory,
    graph_capture=GraphCapture(fields=("graph_end_avail_gib", "graph_mem_gib", "graph_s"),
                               registered="`Registering … cuda graph addresses`"),
    model_flags=("--model-path", "--model"),
    relaunch=Relaunch(launcher=("python3", "-m", "sglang.launch_server"),
                      args=("model_path", "tp_size", "dp_size", "trust_remote_code", "context_length",
                            "chunked_prefill_size", "cuda_graph_max_bs", "kv_cache_dtype", "quantization",
                            "attention_backend", "disable_cuda_graph", "disable_custom_all_reduce",
                            "enable_torch_compile", "speculative_algorithm", "speculative_draft_model_path"),
                      simulated=("python3", "-m", "launchlab.sim.sglang_server"), sim_card_mib=_sim_card_mib,
                      compiles=True),
    suspects=(
        Suspect("custom_ar", "disable_custom_all_reduce", on="False", what="custom all-reduce", needs_tp=True,
                off_flags={"--disable-custom-all-reduce": True}, off_env={"SGLANG_FORCE_CUSTOM_AR_PCIE": "0"},
                phase="dist_init", custom_ar=True,
                forced_on={"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "SGLANG_CUSTOM_AR_ALLOW_PCIE": "1"},
                forced_note=("no upstream SGLang release (0.3.0-0.5.23) reads them: there 'on' stays off and the "
                             "verdict says custom_ar was not shown to vary; the seed's build and the kit's simulator "
                             "read the first, the fork haohervchb/sglang-V100 the second")),
        Suspect("cuda_graphs", "disable_cuda_graph", on="False", what="CUDA graphs",
                off_flags={"--disable-cuda-graph": True}, phase="cuda_graph"),
        Suspect("torch_compile", "enable_torch_compile", on="True", what="torch.compile",
                off_flags={"--enable-torch-compile": False}, phase="cuda_graph"),
        Suspect("draft_model", "speculative_algorithm", on=r"(?!None$).+", what="speculative decoding (a draft model)",
                off_flags={"--speculative-algorithm": False, "--speculative-draft-model-path": False},
                phase="weights"),
    ),
    instrumentation=Instrumentation(patch="sglang-0.5.17-profile-debug.diff", versions=("0.5.17",),
                                    prints="DEBUG profile_available_bytes: avail=… total=… fraction=… reserved=… rest=…"),
    units_note="GiB as printed; SGLang's `GB` is GiB",
)
