"""A line parser read from tables, for servers whose launch statements are one line each: TGI, TensorRT-LLM and
llama.cpp. A kind's module gives its `Tables`; `TableParser` reads a log with them.

A statement moves the launch to its phase and records the numbers it prints (each scaled to the unit of its field:
MiB and bytes become GiB); a failure line fails the launch with the kind's reason; the ready line makes it ready.
The first specific failure is kept (a later, more generic line — llama.cpp's "failed to load model" after the
cudaMalloc that caused it — does not replace it). A Python traceback (TGI's shards, trtllm-serve) is read to its
exception line, which the kind's failure table classifies first and the shared vocabulary (common.classify) after;
its frames place the failure as SGLang's and vLLM's do (tracebacks.py). A speculative-decoding draft's statements
mark its steps (parsedlog.DRAFT_PHASES). A server that puts its model to sleep once ready and loads it again on the next
request (llama-server's router, 2026) has that reload read as its own startup (parsedlog.Reload), not as the launch's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launchlab.logparse import custom_ar
from launchlab.logparse.common import anchors, classify, debug_records, exception_line, nccl_version
from launchlab.logparse.cuda_oom import oom_fields
from launchlab.logparse.parsedlog import DRAFT_MAIN_PHASE, Failure, ParsedLog, Reload
from launchlab.logparse.tracebacks import FRAME, Attribution

_TRACEBACK = "Traceback (most recent call last)"
_COMMON_ANCHORS = ("Traceback", "File \"", "Error", "DEBUG", "NCCL", "nccl", "out of memory", "OutOfMemory")


@dataclass(frozen=True)
class Statement:
    """A line that states a phase and its numbers: `fields` are (regex group, field name, factor to the field's
    unit: 1/1024 for MiB → GiB, 2**-30 for bytes → GiB)."""

    rx: re.Pattern[str]
    phase: str | None
    fields: tuple[tuple[int, str, float], ...] = ()
    advances: bool = True  # False: its line is kept as the phase's first, but the launch has not got that far
    adds: bool = False  # True: its value adds to the rank's field (llama.cpp prints one KV buffer per cache)
    draft: str | None = None  # the draft model's step it marks (parsedlog.DRAFT_PHASES), which reaches its main phase
    spec: str | None = None  # the speculative-decoding method it shows (llama.cpp's MTP context: "mtp")


@dataclass(frozen=True)
class FailureLine:
    """A line after which the launch will not become ready: its reason (parsedlog.REASONS) and its phase (None: the
    phase the log had reached). A line that `amends` says where (and what) the failure already noted was — TGI's
    "Shard 0 failed to start" after the shard's own error, TRT-LLM's "could not be created: KV cache" after its
    "Executor creation failed": it gives that failure its phase, and its reason where the failure's is generic,
    and keeps its line; with no failure noted it is the failure."""

    rx: re.Pattern[str]
    reason: str
    phase: str | None = None
    amends: bool = False
    custom_ar: bool = False  # it names the custom all-reduce: the failure it amends is that rank's custom AR failing


# what any Python server prints when CUDA runs out of memory outside a traceback (a shard's stderr, a pasted line)
CUDA_OOM = FailureLine(re.compile(r"torch\.(?:cuda\.)?OutOfMemoryError|CUDA out of memory|CUDA error: out of memory"),
                       "cuda_oom")


@dataclass(frozen=True)
class Tables:
    """What a kind's log says and where. `anchors`: words, one of which every failure line contains literally, and
    `startup_anchors` the words of its launch statements (a chunk without any is skipped unread, common.scan_file):
    once the server is ready only the first are looked for, since a server that runs for days repeats some launch
    words in every request's line (llama.cpp's "all slots are idle", TGI's `text_generation_router`), and reading
    each of those lines ran at ~25 MB/s. `rank`: group 1 is the rank a line names (TRT-LLM's `[RANK 1]`, llama.cpp's
    `CUDA1`), else rank "0"; `http_url`: group 1 is the URL it serves on."""

    server: str
    anchors: tuple[str, ...]
    startup_anchors: tuple[str, ...]
    ready: re.Pattern[str]
    statements: tuple[Statement, ...]
    failures: tuple[FailureLine, ...]
    rank: re.Pattern[str] | None = None
    http_url: re.Pattern[str] | None = None
    recovered: re.Pattern[str] | None = None  # a line after which the failure noted before was recovered from
    sleep: re.Pattern[str] | None = None  # once ready: the model put to sleep (its reload follows the wake line)
    wake: re.Pattern[str] | None = None


class TableParser:
    """The line parser of one log of a table-driven kind (common.LineParser)."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self.anchors = self._startup_anchors = anchors((*_COMMON_ANCHORS, *tables.anchors, *tables.startup_anchors))
        self._ready_anchors = anchors((*_COMMON_ANCHORS, *tables.anchors))
        self.log = ParsedLog(server=tables.server)
        self.in_traceback = False
        self.frames = Attribution()
        self.reloading = False  # between a wake after ready and ready again: the reload's own startup
        self.opened: tuple[int, str] | None = None  # the line that opened the traceback being read

    @property
    def wants_every_line(self) -> bool:
        """Inside a traceback every line counts: its frames place the failure, its last line names the error."""
        return self.in_traceback

    def feed(self, number: int, text: str) -> None:
        log = self.log
        log.line = number
        msg = text.strip()
        ended = self.in_traceback and self._traceback(text, msg)  # the exception line ending a traceback: its failure
        if not self.anchors.contains(msg):
            return
        if (records := debug_records(msg)) is not None:
            log.add_debug(records, None, "0", number)
            return
        rank = self._rank(msg)
        if self.tables.ready.search(msg) and (not log.ready or self.reloading):
            self._ready(number)
        elif log.ready and self.tables.sleep is not None:
            self._sleep_or_wake(number, msg)
        if (version := nccl_version(msg)) is not None:
            log.nccl_version = version
        if self.tables.http_url is not None and (url := self.tables.http_url.search(msg)) is not None:
            log.http_url = url.group(1)
        self._statements(number, msg, rank)
        if not ended:
            self._failures(number, msg, rank)

    def _ready(self, number: int) -> None:
        log = self.log
        self.anchors = self._ready_anchors
        if self.reloading:  # the reloaded model serves again
            self.reloading = False
            log.reload.reach("ready", number)
            return
        log.ready = True
        log.reach("ready")
        if log.failure is not None:  # the server got over it (TGI's "Decode cuda graph warmup failed"): not fatal
            log.phase_lines.setdefault(log.failure.phase, log.failure.line or number)
            log.failure = None

    def _sleep_or_wake(self, number: int, msg: str) -> None:
        """After ready: the model put to sleep, then woken and loaded again (its statements read as the reload's)."""
        log = self.log
        if self.tables.sleep.search(msg):
            if log.reload is None or log.reload.wake is not None:  # the first line of each sleep (the latest is kept)
                log.reload = Reload(sleep=number)
        elif log.reload is not None and log.reload.wake is None and self.tables.wake.search(msg):
            log.reload.wake = number
            self.reloading = True
            self.anchors = self._startup_anchors

    def _reach(self, phase: str, number: int) -> None:
        """The launch got to a phase, or the reload of a model put to sleep did."""
        if self.reloading:
            self.log.reload.reach(phase, number)
        else:
            self.log.reach(phase)

    def _rank(self, msg: str) -> str:
        if self.tables.rank is not None and (m := self.tables.rank.search(msg)) is not None:
            return m.group(1)
        return "0"

    def _statements(self, number: int, msg: str, rank: str) -> None:
        log = self.log
        for statement in self.tables.statements:
            if (m := statement.rx.search(msg)) is None:
                continue
            if statement.phase is not None and statement.advances:
                self._reach(statement.phase, number)
            elif statement.phase is not None and not self.reloading:
                log.phase_lines.setdefault(statement.phase, number)
            if statement.draft is not None:
                self._reach(DRAFT_MAIN_PHASE[statement.draft], number)
                log.draft_phase_lines.setdefault(statement.draft, number)
            if statement.spec is not None:
                log.spec.method = log.spec.method or statement.spec
            for group, name, factor in statement.fields:
                if m.group(group) is not None:
                    value = float(m.group(group).replace(",", "")) * factor
                    if statement.adds:
                        value += log.ranks.get(rank, {}).get(name, 0.0)
                    log.record(None, rank, name, value, number)

    def _failures(self, number: int, msg: str, rank: str) -> None:
        log = self.log
        for name, value in oom_fields(msg).items():
            log.record(None, rank, name, value, number)
        if self.tables.recovered is not None and self.tables.recovered.search(msg):
            if (old := log.failure) is not None:
                # not a launch failure after all: the phase it was read in stays reached, from its line on
                log.failure = None
                log.phase_lines.setdefault(old.phase, old.line or number)
                log.reach(old.phase)
            return
        for line in self.tables.failures:
            if not line.rx.search(msg):
                continue
            if line.amends and (old := log.failure) is not None:
                log.failure = Failure(line.reason if old.reason == "exception" else old.reason,
                                      line.phase or old.phase, old.message, old.line, old.draft)
                if line.custom_ar:  # the error it amends was the custom all-reduce's (TRT-LLM's IPC workspace)
                    log.note_custom_ar(rank, custom_ar.failed(old.message))
            else:
                log.fail(line.reason, line.phase, msg)
            return
        # a traceback, or before ready its frames pasted without their header (after ready a frame alone is a
        # warning's stack: reading every line after it for an exception line that never comes ran at ~2 MB/s)
        if not self.in_traceback and (_TRACEBACK in msg or (not log.ready and FRAME.search(msg))):
            self.in_traceback = True
            self.opened = (number, msg)
            self.frames = Attribution()
            self.frames.see(msg, self.log.line)

    def _traceback(self, text: str, msg: str) -> bool:
        """A line inside a Python traceback: a frame or its code (False: read on), the exception line that ends it
        (True), or a statement of the kind's, which ends a traceback cut before its exception line (False)."""
        self.frames.see(msg, self.log.line)
        if (found := exception_line(msg)) is None or text[:1].isspace():
            if not FRAME.search(msg) and (self.tables.ready.search(msg)
                                          or any(s.rx.search(msg) for s in self.tables.statements)):
                self.in_traceback = False
                self.frames.conclude(self.log)
            return False
        self.in_traceback = False
        for name, value in oom_fields(msg).items():
            self.log.record(None, self._rank(msg), name, value, self.log.line)
        line = next((line for line in self.tables.failures if line.rx.search(msg)), None)
        reason = line.reason if line is not None else classify(msg) if found[0] != "KeyboardInterrupt" else "exception"
        old = self.log.failure
        if old is not None and exception_line(old.message) is not None:
            # a traceback ended already said what failed (two processes' tracebacks in one log): the first stays,
            # unless it said only `exception` and this one says more
            if old.reason == "exception" and reason != "exception":
                self.log.fail(reason, line.phase if line is not None else None, msg)
            return True
        if line is not None:
            self.log.refine(line.reason, msg, line.phase)
        else:
            self.log.refine(reason, msg)
        if line is None or line.phase is None:  # the frames say where it failed
            self.frames.conclude(self.log)
        return True

    def result(self) -> ParsedLog:
        log = self.log
        if self.in_traceback:  # the log ends inside a traceback
            if log.failure is None and not log.ready and self.opened is not None:
                # cut before its exception line (a paste's end): an uncaught error before ready, where it opened
                log.line, message = self.opened
                log.fail("exception", None, message)
            self.frames.conclude(log)
        return log
