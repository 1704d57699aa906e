"""The vLLM server kind: its startup logs (V0 and V1, 0.4–0.33) → per-rank memory fields, phase reached,
readiness and failure.

Formats: reference/log-formats.md section 3. The line is `[(<process> pid=N)] LEVEL MM-DD HH:MM:SS [file:line] msg`
with the process tag naming the TP rank (`Worker_TP3`, `VllmWorker TP3`, `VllmWorker rank=3`); V0 worker
processes carry only a pid (`VllmWorkerProcess pid=N`) and get ranks 1, 2, … in order of appearance, the
untagged driver being rank 0. Bare messages, uvicorn lines and unprefixed tracebacks are read too. Also read: the
server's arguments (`non-default args: {…}`, `args: Namespace(…)`, the engine config line → `args`), custom
all-reduce statements (logparse/custom_ar.py), the NCCL version, the engine generation (V0/V1), process ids by role,
the HTTP URL and routes, dead workers, and speculative decoding (the drafter's loading, the method and draft model;
logparse/speculative.py). Pastes: records flattened onto one line are read one by one, torch's `[rankN]:` prefix is
taken off, frames without their traceback's header are a failure, and zero KV blocks followed by a traceback is the
KV cache's failure whatever the traceback's last line.

`KIND`, at the end, is the kind's record (serverkind.py): how its logs are recognised, its ready and fatal
lines, and how the report recomputes its KV-cache budget.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from launchlab.logparse import custom_ar, speculative, vllmbudget, vllmlines
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
from launchlab.logparse.kindflags import VLLM as VLLM_FLAGS
from launchlab.logparse.kindstates import VLLM_STATES
from launchlab.logparse.parsedlog import Failure, ParsedLog, WorkerDeath, failure_message
from launchlab.logparse.serverkind import BreakEven, GraphCapture, LogFacts, Relaunch, ServerKind, Suspect
from launchlab.logparse.tracebacks import FRAME, HEADERLESS_FRAME, Attribution, method_phase


class VLLMParser:
    anchors = anchors(vllmlines.ANCHORS)

    def __init__(self) -> None:
        self.log = ParsedLog(server="vllm")
        self.in_traceback = False
        self.pending: tuple[int, str, datetime | None, str] | None = None  # a statement that may go on on the next line
        self.frames = Attribution()
        self.dummy = False  # a traceback line ran the model on dummy inputs: vLLM's memory profiling
        self.worker_ranks: dict[str, str] = {}
        self.flag_source = "args"  # the line that last set disable_custom_all_reduce
        self.headerless = False  # inside a traceback whose header the log does not hold
        self.level: str | None = None  # the level of the line being read (DEBUG … CRITICAL; None: unprefixed)
        self.registering: int | None = None  # a `Registering … cuda graph addresses` line whose phase the next says
        self.code_line: tuple[int, str] | None = None  # an ERROR record of code: the line above a frame
        self.frame_evidence = False  # the failure was read from a frame's name, not yet from its exception line
        self.zero_blocks: tuple[int, str] | None = None  # a "# GPU blocks: 0" line
        self.server_wide_ar: custom_ar.CustomAR | None = None  # a custom all-reduce state stated for every rank
        self.drafting: set[str] = set()  # ranks loading their drafter ("Loading drafter model…", until the total)

    def _rank(self, tag: re.Match | None) -> str:
        """A worker's rank key: its TP rank, as the stable interface keys ranks (`Worker_DP1_TP1_EP3` → "1")."""
        if tag is None:
            return "0"
        if tag["rank"] is not None:
            return tag["rank"]
        if (tp := vllmlines.TP_IN_TAG.search(tag["proc"])) is not None:
            return tp.group(1)
        if tag["proc"].startswith(("VllmWorkerProcess", "RayWorker")):
            return self.worker_ranks.setdefault(tag["pid"], str(len(self.worker_ranks) + 1))
        return "0"  # EngineCore, APIServer, …: engine-level lines

    @property
    def wants_every_line(self) -> bool:
        return self.in_traceback or self.pending is not None

    def feed(self, number: int, text: str) -> None:
        self.log.line = number
        if text.count(" pid=") > 1:  # a flattened paste: several records joined by spaces, each read as a line
            for record in vllmlines.RECORDS.split(text):
                if record.strip():
                    self._record(number, record)
            return
        self._record(number, text)

    def _record(self, number: int, text: str) -> None:
        tag = vllmlines.PROCESS_TAG.search(text)
        rest = text[tag.end():] if tag else text
        if rest[:5] == "[rank":
            if (torch_rank := TORCH_RANK.match(rest)) is not None:
                self.log.seen_ranks.add(torch_rank.group(1))  # a rank the group has (parallel.py)
            rest = TORCH_RANK.sub("", rest)
        m = vllmlines.LEVEL_LINE.search(rest)
        rank = self._rank(tag)
        if tag is not None:
            self._process(tag, rank)
        self._engine(text)
        pending, self.pending = self.pending, None
        noted = self.log.failure
        if m is None:
            if pending is None or not self._rejoin(pending, rest.strip()):
                self._unprefixed(number, rest.strip(), rank)
        else:
            if m["file"].startswith("v1/"):
                self.log.facts["engine"] = "v1"
            self._message(number, m["msg"], _timestamp(m["md"], m["hms"]), rank, m["lvl"])
        if noted is None and self.log.failure is not None and rank in self.drafting:
            self.log.place(self.log.failure.phase, draft=True)  # the worker failed loading its drafter

    def _process(self, tag: re.Match, rank: str) -> None:
        """What a process tag tells: the pid of a role or of a rank's worker, a DP rank, the engine generation."""
        log, proc = self.log, tag["proc"]
        if (dp := vllmlines.DP_IN_TAG.search(proc)) is not None:
            log.dp_ranks.add(dp.group(1))
        for prefix, role in vllmlines.ROLES.items():
            if proc.startswith(prefix):
                log.pids.setdefault(role, int(tag["pid"]))
                log.facts["engine"] = "v1"
                return
        if proc.startswith(vllmlines.WORKERS):
            log.seen_ranks.add(rank)
            log.rank_pids.setdefault(rank, int(tag["pid"]))
            if proc.startswith("VllmWorkerProcess"):
                log.facts.setdefault("engine", "v0")
            elif not proc.startswith("RayWorker"):
                log.facts["engine"] = "v1"

    def _engine(self, text: str) -> None:
        if "world" in text or "nranks" in text or "reader_ranks" in text:
            self.log.note_world(text)
        if self.log.facts.get("engine") != "v1" and ("ngine" in text or "/vllm/" in text or "blocks" in text or "KV cache" in text
                                        or "Worker" in text or "vLLM instance" in text):
            if vllmlines.V1.search(text):
                self.log.facts["engine"] = "v1"
            elif self.log.facts.get("engine") is None and vllmlines.V0.search(text):
                self.log.facts["engine"] = "v0"

    def _rejoin(self, pending: tuple[int, str, datetime | None, str], text: str) -> bool:
        """A statement the terminal wrapped ("GPU KV cache size: 532,032" / "tokens"): parsed whole, at its first line."""
        number, msg, t, rank = pending
        joined = f"{msg} {text}"
        if "max seq len (" in msg:  # a V1 max-len message cut mid-word: "… (4.26 GiB KV cach" / "e is needed, …"
            return self._rejoin_max_len(number, msg, text)
        if (ar := custom_ar.recognise(joined)) is not None and ar.reason is not None:
            self.log.note_custom_ar(rank, ar)  # "… disabled because this process group" / "spans across nodes."
            return True
        for row in vllmlines.STATEMENTS:  # only a statement that spans the cut: never one inside the next line alone
            if (m := row[0].search(joined)) is not None and m.start() < len(msg) < m.end():
                line, self.log.line = self.log.line, number
                match_statement(self.log, [row], joined, t, rank, number)
                self.log.line = line
                return True
        return False

    def _rejoin_max_len(self, number: int, msg: str, text: str) -> bool:
        """The rest of a cut max-len message (a line with no tag of its own): its figures read from the whole. The
        failure keeps the first line; where the cut split a word the pieces join without a space."""
        for joined in (msg + text, f"{msg} {text}"):
            if (m := vllmlines.MAX_LEN_V1.search(joined)) is not None and m.group(3) is not None:
                self._max_len_v1(joined, number)
                return True
        return False

    def _unprefixed(self, number: int, text: str, rank: str) -> None:
        if text.startswith("INFO:") and "Application startup complete" in text:
            self.log.ready = True
            self.log.reach("ready")
            return
        self._message(number, text, None, rank, None)

    def _message(self, number: int, msg: str, t: datetime | None, rank: str, level: str | None) -> None:
        log = self.log
        self.level = level
        if self.headerless and level not in (None, "ERROR"):  # a record of another level: those frames are over
            self.in_traceback = self.headerless = False
        if (records := debug_records(msg)) is not None:
            log.add_debug(records, t, rank, number)
            return
        if "Application startup complete" in msg:
            log.ready = True
            log.reach("ready")
            return
        if ("args" in msg or "config: " in msg) and self._arguments(msg, t, number):
            return
        self._custom_ar(number, msg, t, rank)
        if (version := nccl_version(msg)) is not None:
            log.nccl_version = version
        self._server_facts(msg)
        if (space := vllmlines.CPU_KV_SPACE.search(msg)) is not None:  # a setting the config prints: it moves no phase
            log.record(t, rank, "kv_avail_gib", float(space.group(1)), number)
            return
        if "across cluster" in msg:
            msg = vllmlines.REPEATED.sub("", msg)
        if "raft" in msg or "took" in msg:
            self._drafting(msg, rank)
        if ("raft" in msg or "MTP" in msg or "speculative" in msg) and self._draft(msg):
            return
        prefix = self._weights_prefix(msg, rank)
        if match_statement(log, vllmlines.STATEMENTS, msg, t, rank, number, prefix) is not None:
            if "blocks: 0" in msg and vllmlines.ZERO_BLOCKS.search(msg):
                self.zero_blocks = (number, msg)
            return
        if level is not None and vllmlines.WRAPPED.search(msg):
            self.pending = (number, msg, t, rank)
        self._failure(number, msg, t, rank)

    def _arguments(self, msg: str, t: datetime | None, number: int) -> bool:
        """The arguments msg prints, if any (True: nothing more to read in it)."""
        log = self.log
        for rx, split, source in vllmlines.ARGUMENTS:
            if (a := rx.search(msg)) is not None:
                found = split(msg[a.end():])
                log.args.update(found)
                speculative.from_args(log.spec, log.args)
                self._settings(found, t, number)
                if custom_ar.USER_FLAG in found:
                    self.flag_source = source
                return True
        return False

    def _custom_ar(self, number: int, msg: str, t: datetime | None, rank: str) -> None:
        found_ar = custom_ar.recognise(msg)
        if self.registering is not None and (found_ar is None or found_ar.state != "active"):
            self._settle_registering(msg)
        if found_ar is not None and found_ar.reason == custom_ar.SERVER_WIDE:
            self.server_wide_ar = found_ar  # every rank's, once the arguments say how many (result)
        elif found_ar is not None:
            self.log.note_custom_ar(rank, found_ar)
            if found_ar.state == "disabled" and found_ar.reason is None and not msg.rstrip().endswith("."):
                self.pending = (number, msg, t, rank)  # its reason may be on the next line (a wrapped paste)
            if found_ar.state == "active" and self.registering is None:
                self.registering = number  # graphs were captured: for real, or to size the KV cache (below)

    def _draft(self, msg: str) -> bool:
        """A speculative-decoding line: the drafter's weights (True: nothing more to read in it), or what it says of
        the method (a command line's `--speculative-config`, "Detected MTP model")."""
        speculative.from_text(self.log.spec, msg)
        if vllmlines.DRAFT_WEIGHTS.search(msg):
            self.log.reach_draft("draft_weights")
            return True
        return False

    def _drafting(self, msg: str, rank: str) -> None:
        """A worker loads its drafter from "Loading drafter model…" until "Model loading took" (both models)."""
        if "Loading drafter model" in msg:
            self.drafting.add(rank)
        elif "took" in msg and msg.startswith(("Model loading", "Loading model")):
            self.drafting.discard(rank)

    def _weights_prefix(self, msg: str, rank: str) -> str:
        """`draft_` for a rank's second "Loading model weights took" of a speculative launch: V0's spec-decode worker
        loads the target, then the draft model, each printing its own (V1 prints one, after both)."""
        if "took" in msg and "weights_mem_gib" in self.log.ranks.get(rank, {}) and (
                self.log.spec.method or self.log.spec.draft_model) and msg.startswith(("Loading model", "Model loading")):
            self.log.reach_draft("draft_weights")
            return "draft_"
        return ""

    def _settle_registering(self, msg: str) -> None:
        """The phase of the pending `Registering … cuda graph addresses` line, told by the next line that names one.

        Addresses are registered after each CUDA-graph capture. Since vLLM 0.18 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)
        graphs are also captured while the KV cache is sized, so the line is then followed by `Estimated CUDA graph
        memory` or `Available KV cache memory` (kv_cache); after the real capture by `Graph capturing finished`, `CUDA
        graph pool memory`, `init engine …` or a failure (cuda_graph). A line that names no phase leaves it pending."""
        named = next((phase for rx, phase, _ in vllmlines.STATEMENTS if rx.search(msg)), None)
        if named is None and not (any(rx.search(msg) for rx, _, _ in vllmlines.FAILURES) or vllmlines.WRAPPERS.search(msg)
                                  or exception_line(msg) is not None):
            return
        self._reach_at(self.registering, "kv_cache" if named == "kv_cache" else "cuda_graph")
        self.registering = None

    def _reach_at(self, number: int, phase: str) -> None:
        line, self.log.line = self.log.line, number
        self.log.reach(phase)
        self.log.line = line

    def _settings(self, found: dict[str, str], t: datetime | None, number: int) -> None:
        """The share of the GPU the arguments ask for, kept as an event: a launch that fails at KV sizing never
        prints its "Desired GPU memory utilization", and its budget row needs it (_budget)."""
        try:
            self.log.setting(t, "gpu_memory_utilization", float(found["gpu_memory_utilization"]), number)
        except (KeyError, ValueError):
            pass  # not among the arguments printed, or not a number
        for name in ("max_model_len", "max_seq_len"):  # V0's engine config says `max_seq_len=4096`
            if (value := found.get(name, "")).isdigit():
                self.log.record(t, "0", "max_model_len", float(value), number)

    def _server_facts(self, msg: str) -> None:
        """The HTTP side (URL, routes, uvicorn's pid) and workers reported dead."""
        log = self.log
        if (route := vllmlines.ROUTE.search(msg)) is not None:
            log.routes.append(route.group(1))
        elif (url := vllmlines.HTTP_URL.search(msg)) is not None:
            log.http_url = url.group(1) or url.group(2)
        elif (pid := vllmlines.SERVER_PID.search(msg)) is not None:
            log.pids.setdefault("http_server", int(pid.group(1)))
        elif (death := vllmlines.DEATH.search(msg)) is not None:
            code = death["code"] or death["v0code"]
            log.worker_deaths.append(WorkerDeath(death["name"] or death["v0name"],
                                                 int(death["pid"]) if death["pid"] else None,
                                                 None if code in (None, "None") else int(code)))

    def _failure(self, number: int, msg: str, t: datetime | None, rank: str) -> None:
        log = self.log
        for name, value in oom_fields(msg).items():
            log.record(t, rank, name, value, number)
        self._frame_line(number, msg)
        self.dummy = self.dummy or vllmlines.DUMMY.search(msg) is not None
        if (too_long := vllmlines.MAX_LEN.search(msg)) is not None:
            log.record(None, "0", "max_model_len", float(too_long.group(1)), 0)
            log.record(None, "0", "kv_tokens", float(too_long.group(2)), 0)
        if "max seq len (" in msg and self._max_len_v1(msg, number):
            self.pending = (number, msg, t, rank)  # cut by the terminal: the next line may hold the rest
        for rx, reason, phase in vllmlines.FAILURES:
            if rx.search(msg):
                old = log.failure
                ends = old is not None and exception_line(msg) is not None and not exception_line(old.message)
                if ends and old.reason in (reason, "exception"):
                    # the exception line ending a traceback whose frame (check_enough_kv_cache_memory) or wrapper
                    # was noted first: it says what went wrong, on its own line
                    log.refine(reason, msg, phase or self._frame_phase())
                elif ends and self.frame_evidence:  # what the exception says wins over the function it came from
                    log.correct(reason, msg, phase or self._frame_phase())
                else:
                    log.fail(reason, phase or self._frame_phase(), msg)
                self.frame_evidence = False
                return
        if self.in_traceback and vllmlines.FRAME_EVIDENCE.search(msg):
            # the frame's call and its own `File … in check_enough_kv_cache_memory` line both name it: the evidence
            # stays a frame's until an exception line says what went wrong
            self.frame_evidence = self.frame_evidence or log.failure is None or log.failure.reason == "exception"
            log.fail("kv_cache_no_memory", "kv_cache", msg)
            return
        self._exception(msg)

    def _frame_line(self, number: int, msg: str) -> None:
        """msg as a traceback's line, in a traceback or not."""
        log = self.log
        # a frame outside any traceback: an excerpt that starts inside one (its header is not in the log), a worker's
        # ERROR record or, before ready, a line of stderr that is a frame
        headerless = not self.in_traceback and "File " in msg and (
            (self.level == "ERROR" and FRAME.search(msg) is not None)
            or (self.level is None and not log.ready and HEADERLESS_FRAME.match(msg) is not None))
        if headerless and self.code_line is not None and self.code_line[0] >= number - 2:
            self.frames.call(self.code_line[1], self.code_line[0])  # the code line above it calls into it: its first line
        self.frames.see(msg, number)
        # a code line outside a traceback: an ERROR record's (indented), or an untagged line before an excerpt's first
        # frame (its indent stripped with its tag) — kept only for a frame on one of the next two lines
        if ((self.level == "ERROR" and msg[:1] == " ") or (self.level is None and not log.ready)) and not self.in_traceback:
            if msg.lstrip()[:1] not in "^~" and "(" in msg:  # carets and a call's continuation: the call's line stays
                self.code_line = (number, msg)
        else:
            self.code_line = None
        if headerless:
            log.fail("exception", None, msg)
            self.in_traceback = self.headerless = True
        if self.headerless and (place := self.frames.place) is not None:
            log.phase_lines.setdefault(place.phase, place.line)  # no progress line names it: the frames are its sign

    def _exception(self, msg: str) -> None:
        """A wrapper's line, or an exception line (ending a traceback)."""
        log = self.log
        found = exception_line(msg)
        unended = log.failure is not None and log.failure.reason == "exception" and not exception_line(log.failure.message)
        # a wrapper's own exception line ("RuntimeError: Engine core initialization failed. See root cause above.")
        # ends the traceback noted first: below, as any exception line does
        if vllmlines.WRAPPERS.search(msg) and not (found is not None and unended):
            log.fail("exception", method_phase(msg), msg)  # "Error executing method load_model": the method is the phase
            self.in_traceback = True
            return
        if found is not None:
            reason = classify(msg)
            phase = self._frame_phase() or ("kv_cache" if reason in ("kv_cache_no_memory", "max_len_exceeds_kv") else None)
            if unended:
                log.refine(reason, msg, phase)  # the wrapper's traceback ends here: its last line says what went wrong
            else:
                log.fail(reason, phase, msg)
            self.in_traceback = self.headerless = False

    def _max_len_v1(self, msg: str, number: int) -> bool:
        """V1's figures of a max seq len the KV cache cannot hold, on rank 0; True where the message stops before
        its last figure (a wrapped line)."""
        if (m := vllmlines.MAX_LEN_V1.search(msg)) is None:
            return False
        for name, value in zip(vllmlines.MAX_LEN_V1_FIELDS, m.groups(), strict=True):
            if value is not None:
                self.log.record(None, "0", name, float(value), number)
        return m.group(4) is None and not msg.rstrip().endswith(".")

    def _frame_phase(self) -> str | None:
        return self.frames.phase or ("kv_cache" if self.dummy else None)

    def result(self) -> ParsedLog:
        log = self.log
        for fields in log.ranks.values():
            if "kv_blocks" in fields and "kv_tokens" not in fields:
                fields["kv_tokens"] = fields["kv_blocks"] * vllmlines.BLOCK_SIZE
        if log.failure is not None and log.failure.reason == "exception" and self.frames.phase is not None:
            self.frames.conclude(log)
        if (zero := self.zero_blocks) is not None and log.failure is not None and log.failure.reason == "exception" \
                and (log.failure.line or 0) > zero[0]:
            # a traceback after zero KV blocks, whatever its last line (often beyond an excerpt): the KV failure
            log.failure = Failure("kv_cache_no_memory", "kv_cache", failure_message(zero[1]), zero[0], log.failure.draft)
        if self.server_wide_ar is not None:
            custom_ar.held_by_every_rank(log, self.server_wide_ar, log.args.get("tensor_parallel_size"))
        if self.registering is not None:  # nothing after it named a phase: the capture it follows was the real one
            self._reach_at(self.registering, "cuda_graph")
            self.registering = None
        custom_ar.disabled_by_user(log, log.args.get("tensor_parallel_size"), self.flag_source)
        return log


_YEAR = datetime.now().year


def _timestamp(month_day: str, hms: str) -> datetime | None:
    """vLLM prints no year; the current year is assumed (the run pipeline re-anchors to the launch date)."""
    try:
        return datetime.fromisoformat(f"{_YEAR}-{month_day} {hms}")
    except ValueError:
        return None


def parse(raw_lines: Iterable[str]) -> ParsedLog:
    return feed_lines(VLLMParser(), raw_lines)


KIND = ServerKind(
    name="vllm",
    max_length="--max-model-len",  # what a max_len_exceeds_kv asks to lower
    evidence=re.compile(r"(?:DEBUG|INFO|WARNING|ERROR) \d{2}-\d{2} \d{2}:\d{2}:\d{2} \[?[\w./-]+:\d+\]|vllm|vLLM"
                        r"|Available KV cache memory|GPU KV cache size|# (?:GPU|cuda) blocks"
                        r"|\((?:VllmWorker|Worker_\w+) (?:rank=\d+ )?pid=\d+\)|CUDA graph pool memory: .* \(actual\)"
                        r"|/csrc/custom_all_reduce\.cuh"),  # vLLM's own kernel (SGLang's is under sgl-kernel)
    ready_pattern=r"Application startup complete\.",
    fatal_patterns=(
        r"EngineCore failed to start", r"EngineCore hit an exception", r"Engine core initialization failed",
        r"No available memory for the cache blocks", r"died unexpectedly", r"Error executing method",
        r"CUDA out of memory", r"custom_all_reduce\.cuh",
    ),
    parser=lambda rules: VLLMParser(),
    budget=vllmbudget.kv_budget,
    report_intro=("vLLM sizes its KV cache as `total × gpu_memory_utilization − (weights + non-torch + "
                  "activation peak)`; the break-even utilization is `(weights + non-torch + activation) / total`. "
                  "A launch that failed at KV sizing prints no total, non-torch memory or activation peak: its row "
                  "takes them from the other runs on its host that load the same weights and agree on them "
                  "(`profile_from`), with its own utilization, weights and logged KV memory; a search's predicted "
                  "break-even leaves such rows out."),
    break_even=BreakEven(arg="gpu_memory_utilization", column="break_even_utilization",
                         formula="(weights + non-torch + activation peak) / total", flag="--gpu-memory-utilization",
                         margin=0.01),
    pool_cap_args=("num_gpu_blocks_override", "kv_cache_memory_bytes"),
    custom_ar_off="--disable-custom-all-reduce",
    states=VLLM_STATES,
    known_flags=VLLM_FLAGS,
    arg_aliases={"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size"},
    # "vLLM API server version 0.7.3", "Initializing a V1 LLM engine (v0.8.5) with config", "vLLM version 0.9"
    # and the ASCII banner of ≥ 0.2x: "… █ ▀▄▀ █  version 0.23.0"
    log_facts=LogFacts(version=re.compile(r"vLLM API server version v?(\d+\.\d+[\w.+-]*)|[█▀▄] +version v?(\d+\.\d+[\w.+-]*)"
                                          r"|Initializing an? (?:V1 )?LLM engine \(v(\d+\.\d+[\w.+-]*)\)"
                                          r"|\bvLLM version:? v?(\d+\.\d+[\w.+-]*)|\bvllm==(\d+\.\d+[\w.+-]*)"
                                          # an egg's install path in the frames, a container image's tag
                                          r"|/vllm-(\d+\.\d+[\w.+]*?)-py\d|\bvllm-openai:v(\d+\.\d+[\w.+-]*)"),
                       package="vllm", model="model", tp_size="tensor_parallel_size", dp_size="data_parallel_size",
                       pp_size="pipeline_parallel_size",
                       labels={"engine": "vLLM engine generation"}),
    volatile_args=frozenset({"port", "host", "seed", "served_model_name", "model", "tensor_parallel_size",
                             "data_parallel_size", "download_dir", "api_key"}),
    memory_fields=("weights_mem_gib", "kv_tokens", "kv_gib", "graph_mem_gib"),
    graph_capture=GraphCapture(fields=("graph_mem_gib", "graph_s"), registered="`Registering … cuda graph addresses`"),
    model_flags=("--model",),
    # its arguments are read from the non-default dump and the engine's config line (every setting, defaults and
    # internal objects included): only those a command sets are put back; a feature on by default is on where the
    # non-default dump leaves its switch out
    relaunch=Relaunch(launcher=("vllm", "serve", "{model}"),
                      args=("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_model_len",
                            "max_num_seqs", "quantization", "kv_cache_dtype", "trust_remote_code", "enforce_eager",
                            "disable_custom_all_reduce", "speculative_config"),
                      compiles=True),
    suspects=(
        Suspect("custom_ar", "disable_custom_all_reduce", on="False", absent_on=True, what="custom all-reduce",
                needs_tp=True, off_flags={"--disable-custom-all-reduce": True}, phase="dist_init", custom_ar=True,
                forced_on={"VLLM_ENABLE_PCIE_ALLREDUCE": "1"},
                forced_note=("upstream vLLM has no way to force it on more than two PCIe-only GPUs: there 'on' "
                             "stays off and the verdict says custom_ar was not shown to vary; the fork "
                             "local-inference-lab/vllm reads it")),
        # torch.compile runs in the profile run that sizes the KV cache: it can take the KV cache's room
        Suspect("cuda_graphs", "enforce_eager", on="False", absent_on=True, what="CUDA graphs (and torch.compile)",
                off_flags={"--enforce-eager": True}, phase="kv_cache"),
        Suspect("draft_model", "speculative_config", on=r"(?!None$).+", what="speculative decoding (a draft model)",
                off_flags={"--speculative-config": False}, phase="weights"),
    ),
    units_note="GiB as vLLM prints them",
)
