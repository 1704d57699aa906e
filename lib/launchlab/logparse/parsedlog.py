"""What a server log says about a launch, as the parsers write it: the ParsedLog record (with its Event, Failure,
CustomAR, WorkerDeath, Speculative and Reload parts) and the vocabularies it is written in — the phases a launch goes
through, the failure reasons, custom all-reduce's states — with the order of ranks."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime

from launchlab.logparse.patterns import SlowPattern

PHASES = ("startup", "dist_init", "weights", "kv_cache", "cuda_graph", "warmup", "http", "ready")
# a speculative-decoding draft model's own steps (its lines also count for the main phase: DRAFT_MAIN_PHASE)
DRAFT_PHASES = ("draft_weights", "draft_kv_cache", "draft_context", "draft_cuda_graph", "draft_extend_graph")
DRAFT_MAIN_PHASE = {"draft_weights": "weights", "draft_kv_cache": "kv_cache", "draft_context": "kv_cache",
                    "draft_cuda_graph": "cuda_graph", "draft_extend_graph": "cuda_graph"}
REASONS = ("kv_cache_no_memory", "cuda_oom", "max_len_exceeds_kv", "cuda_graph_failed", "custom_allreduce_failed",
           "nccl_error", "exception")
# the size of the process group in a line's words: `world_size=8`, vLLM's `rank 2 in world size 8`, NCCL's `nranks 32`
_WORLD = re.compile(r"\bworld[_ ]size\s*[=:]?\s*(\d+)|\bnranks\s+(\d+)")
# a size the server states of itself outside its argument dump (SGLang: `DSA with TP mode is active, dp_size=1,
# tp_size=8, …`)
_SIZES = re.compile(r"\b(tp|pp|dp)_size=(\d+)\b")
# vLLM's message queue names its local readers (`local_reader_ranks=[1, 2, …, 7]`): ranks on this node
_READERS = re.compile(r"\blocal_reader_ranks=\[([\d, ]*)\]")
CUSTOM_AR_STATES = ("active", "disabled", "failed")  # weakest evidence first: a later state never loses to an earlier one
_TRACEBACK_HEADER = re.compile(r"\s*Traceback \(most recent call last\):?")
_RANK_KEY = re.compile(r"(?:pp(\d+)\.)?(\d+)")  # "3", "pp1.2"


@dataclass(frozen=True)
class Event:
    """One parsed metric: a field of a rank at a moment (t: the log's own timestamp, naive host time)."""

    t: datetime | None
    rank: str
    field: str
    value: float
    line: int


@dataclass(frozen=True)
class Failure:
    """Why a launch failed, in which phase, the line that says so and its number in the log (None: not from a line);
    `draft`: its traceback's frames or its lines are a speculative-decoding draft model's (loading the drafter,
    capturing the draft's graphs)."""

    reason: str
    phase: str
    message: str
    line: int | None = None
    draft: bool = False


@dataclass(frozen=True)
class CustomAR:
    """What a rank's custom all-reduce did: a state of CUSTOM_AR_STATES, a reason code (or None) and the log message
    that says so (reason codes: logparse/custom_ar.py)."""

    state: str
    reason: str | None
    message: str


@dataclass(frozen=True)
class WorkerDeath:
    """A worker process the server reported dead (vLLM: "Worker proc VllmWorker-0 died unexpectedly (exit code: …)")."""

    name: str
    pid: int | None
    exit_code: int | None


@dataclass
class Speculative:
    """What a log states about speculative decoding: the method as written (`EAGLE3`, `mtp`, `draft_model`), the draft
    model's path or name, and whether the KV budget counts the draft's weights (SGLang's "If using speculative
    decoding, draft weights are now counted": the draft is loaded before the KV cache is sized)."""

    method: str | None = None
    draft_model: str | None = None
    draft_weights_counted: bool = False

    def to_json(self) -> dict:
        return {k: v for k, v in (("method", self.method), ("draft_model", self.draft_model),
                                  ("draft_weights_counted", self.draft_weights_counted)) if v}


@dataclass
class Reload:
    """A model put to sleep after ready and loaded again (llama-server's router, 2026): the lines of sleep and wake,
    and the reload's own startup — neither a failure nor a second server."""

    sleep: int
    wake: int | None = None
    phase_reached: str = "startup"
    phase_lines: dict[str, int] = field(default_factory=dict)

    def reach(self, phase: str, line: int) -> None:
        if PHASES.index(phase) > PHASES.index(self.phase_reached):
            self.phase_reached = phase
        if phase != "startup":
            self.phase_lines.setdefault(phase, line)


@dataclass
class ParsedLog:
    """Everything a server log says about a launch.

    `args`: the server's own account of its arguments (SGLang `server_args=ServerArgs(…)`, vLLM `non-default args`,
    `args: Namespace(…)` and the engine config line), keyed by Python attribute name, every value as the text the
    server printed (`'0.55'`, `'True'`, `'None'`; strings without their quotes). `overrides`: the settings the server
    announces it replaced after printing them, by argument: `{asked, used, line}` (SGLang "max_total_tokens=… is
    larger than the profiled value N. Use the profiled value instead.", "Automatically reduce --mem-fraction-static to
    0.540 …"); `adjusted_args` is their used values alone (what an older kit wrote).
    `rank_info`: what each rank says about itself in words (model_type, dtype, kv_cache_dtype, graph_kind, capture_bs).
    `pids`: process ids by role (`http_server`, `api_server`, `engine_core`); `rank_pids`: the pid a rank's lines carry.
    """

    server: str
    ready: bool = False
    phase_reached: str = "startup"
    failure: Failure | None = None
    ranks: dict[str, dict[str, float]] = field(default_factory=dict)
    custom_ar: dict[str, CustomAR] = field(default_factory=dict)
    debug: list[dict] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    args: dict[str, str] = field(default_factory=dict)
    adjusted_args: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, dict] = field(default_factory=dict)
    not_finite: list[dict] = field(default_factory=list)  # figures that read as no finite number: {field, rank, line}
    nccl_version: str | None = None
    facts: dict[str, str] = field(default_factory=dict)  # what only this kind states (vLLM: engine "v0"/"v1")
    rank_info: dict[str, dict[str, str]] = field(default_factory=dict)
    rank_pids: dict[str, int] = field(default_factory=dict)
    dp_ranks: set[str] = field(default_factory=set)
    seen_ranks: set[str] = field(default_factory=set)  # every rank a tag named, on any line read (parallel.py)
    world_size: int | None = None  # the largest `world_size=N` / NCCL `nranks N` a line states
    stated_sizes: dict[str, int] = field(default_factory=dict)  # `tp_size=8` stated outside the dump: tp, pp, dp
    parallel: dict = field(default_factory=dict)  # the parallel sizes the log shows (parallel.read, by parse_file)
    pids: dict[str, int] = field(default_factory=dict)
    http_url: str | None = None
    routes: list[str] = field(default_factory=list)
    worker_deaths: list[WorkerDeath] = field(default_factory=list)
    slow_patterns: list[SlowPattern] = field(default_factory=list)  # params patterns that ran over their time budget
    phase_lines: dict[str, int] = field(default_factory=dict)  # the line number of each phase's first line
    draft_phase_lines: dict[str, int] = field(default_factory=dict)  # … of each DRAFT_PHASES step's first line
    spec: Speculative = field(default_factory=Speculative)
    reload: Reload | None = None
    line: int = 0  # the number of the line being parsed: where a phase or a failure is seen

    def reach(self, phase: str) -> None:
        if PHASES.index(phase) > PHASES.index(self.phase_reached):
            self.phase_reached = phase
        if self.line and phase != "startup":
            self.phase_lines.setdefault(phase, self.line)

    def reach_draft(self, step: str, line: int | None = None) -> None:
        """A draft model's step (DRAFT_PHASES) on the line being parsed: its first line, and its main phase reached.
        `line`: a line read before, where a traceback's frames named the step (its main phase is placed apart)."""
        if line is None:
            self.reach(DRAFT_MAIN_PHASE[step])
            line = self.line
        if line:
            self.draft_phase_lines.setdefault(step, line)

    def note_world(self, text: str) -> None:
        """A line that states how many ranks there are: the process group's size (`world_size=8`, NCCL's `nranks 8`),
        a parallel size (`tp_size=8`), or the ranks a rank talks to (`local_reader_ranks=[1, …, 7]`)."""
        for m in _WORLD.finditer(text):
            size = int(m.group(1) or m.group(2))
            if 0 < size <= 100_000:
                self.world_size = max(self.world_size or 0, size)
        for m in _SIZES.finditer(text):
            if 0 < (size := int(m.group(2))) <= 100_000:
                self.stated_sizes[m.group(1)] = size
        for m in _READERS.finditer(text):
            self.seen_ranks.update(r.strip() for r in m.group(1).split(",") if r.strip().isdigit())

    def override(self, arg: str, asked: str | None, used: str | None, said: str) -> None:
        """The server says it did not take `arg` as asked and uses `used` instead (None: it ignores the flag);
        `said`: its line, cut."""
        if used is not None:
            self.adjusted_args[arg] = used
        self.overrides.setdefault(arg, {"asked": asked, "used": used, "line": said.strip()[:300]})

    def record(self, t: datetime | None, rank: str, name: str, value: float, line: int) -> bool:
        """A figure of a rank, as an event too; False for a value that is no finite number (`avail mem=<400 digits>
        GB` reads as infinity): a data error, said in `not_finite` and kept nowhere else."""
        if not math.isfinite(value):
            self.not_finite.append({"field": name, "rank": rank, "line": line})
            return False
        self.ranks.setdefault(rank, {})[name] = value
        self.events.append(Event(t, rank, name, value, line))
        return True

    def setting(self, t: datetime | None, name: str, value: float, line: int) -> None:
        """A launch setting read from the log (e.g. mem_fraction_static): an event, not a per-rank field."""
        if not math.isfinite(value):
            self.not_finite.append({"field": name, "rank": "0", "line": line})
            return
        self.events.append(Event(t, "0", name, value, line))

    def describe(self, rank: str, name: str, text: str) -> None:
        """A fact a rank states in words (e.g. model_type=Qwen3ForCausalLM): kept as text, not as an event."""
        self.rank_info.setdefault(rank, {})[name] = text

    def note_custom_ar(self, rank: str, found: CustomAR) -> None:
        """Keep the strongest evidence per rank: failed beats disabled beats active; at equal state a reason beats none."""
        old = self.custom_ar.get(rank)
        if old is None:
            self.custom_ar[rank] = found
            return
        stronger = CUSTOM_AR_STATES.index(found.state) > CUSTOM_AR_STATES.index(old.state)
        more_specific = found.state == old.state and old.reason in (None, "init_failed") and found.reason not in (
            None, "init_failed")
        if stronger or more_specific:
            self.custom_ar[rank] = found

    def add_debug(self, records: list[dict], t: datetime | None, rank: str, line: int) -> None:
        """Instrumentation records: kept for `parse --json` and recorded as events `debug.<name>.<key>` (a value
        that is no finite number is a data error: kept nowhere, said in `not_finite`)."""
        for r in records:
            if self.record(t, rank, f"debug.{r['name']}.{r['key']}", r["value"], line):
                self.debug.append(r)

    def fail(self, reason: str, phase: str | None, message: str) -> None:
        """Keep the strongest evidence: a specific reason replaces a generic `exception`, never the reverse."""
        if self.failure is None or (self.failure.reason == "exception" and reason != "exception"):
            self.failure = Failure(reason, phase or (self.failure.phase if self.failure else self.phase_reached),
                                   failure_message(message), self.line or None,
                                   self.failure is not None and self.failure.draft)

    def refine(self, reason: str, message: str, phase: str | None = None) -> None:
        """The exception line that ends the traceback of the failure already noted: it becomes the message (and its
        line the failure's line); its reason replaces a generic one, never a specific one; a phase the traceback's
        frames name replaces the phase that was only where the log had got to."""
        old = self.failure
        if old is None:
            self.fail(reason, phase, message)
            return
        self.failure = Failure(reason if old.reason == "exception" else old.reason, phase or old.phase,
                               failure_message(message), self.line or old.line, old.draft)

    def correct(self, reason: str, message: str, phase: str | None = None) -> None:
        """The exception line of a failure first read from a frame's name (vLLM's `raise_if_cache_size_invalid`):
        what the exception says wins over what the function it was raised in suggests."""
        old = self.failure
        if old is None:
            self.fail(reason, phase, message)
            return
        self.failure = Failure(reason, phase or old.phase, failure_message(message), self.line or old.line, old.draft)

    def place(self, phase: str, draft: bool = False) -> None:
        """The failure happened in this phase (from the traceback's frames): it overrides where the log had got to;
        `draft`: those frames are the draft model's."""
        if self.failure is not None:
            f = self.failure
            self.failure = Failure(f.reason, phase, f.message, f.line, f.draft or draft)

    def settle(self) -> ParsedLog:
        """After the last line: the log got at least as far as the phase its failure is placed in."""
        if self.failure is not None:
            if PHASES.index(self.failure.phase) > PHASES.index(self.phase_reached):
                self.phase_reached = self.failure.phase
            if self.failure.line is not None and self.failure.phase != "startup":
                self.phase_lines.setdefault(self.failure.phase, self.failure.line)
        return self

    def to_json(self) -> dict:
        """The stable `launchlab parse --json` object (docs/architecture.md, "The stable interfaces, in short")."""
        return {
            "server": self.server,
            "ready": self.ready,
            "phase_reached": self.phase_reached,
            "failure": None if self.failure is None else {
                "reason": self.failure.reason, "phase": self.failure.phase, "message": self.failure.message,
                "line": self.failure.line, "draft": self.failure.draft},
            "ranks": {r: dict(sorted(self.ranks[r].items())) for r in sorted(self.ranks, key=rank_order)},
            "custom_ar": {r: {"state": c.state, "reason": c.reason, "message": c.message}
                          for r, c in sorted(self.custom_ar.items(), key=lambda item: rank_order(item[0]))},
            "debug": self.debug,
            "args": dict(self.args),
            "adjusted_args": dict(self.adjusted_args),
            "overrides": {arg: dict(o) for arg, o in self.overrides.items()},
            "not_finite": list(self.not_finite),
            "parallel": dict(self.parallel),
            "nccl_version": self.nccl_version,
            "phase_lines": {p: self.phase_lines[p] for p in PHASES if p in self.phase_lines},
            "draft_phase_lines": {p: self.draft_phase_lines[p] for p in DRAFT_PHASES if p in self.draft_phase_lines},
            "spec": self.spec.to_json(),
            "reload": None if self.reload is None else {
                "sleep": self.reload.sleep, "wake": self.reload.wake, "phase_reached": self.reload.phase_reached,
                "phase_lines": {p: self.reload.phase_lines[p] for p in PHASES if p in self.reload.phase_lines}},
        }


def failure_message(text: str) -> str:
    """What a failure line says, without the header of a traceback that follows it ("Scheduler hit an exception:
    Traceback (most recent call last):" → "Scheduler hit an exception"): the header names no error."""
    text = _TRACEBACK_HEADER.sub("", text.strip()).rstrip(" :")
    return (text or "a traceback whose last line is not in the log")[:2000]


def rank_order(rank: str) -> tuple[int, int, str]:
    """Ranks in numeric order: TP ranks ("2" before "10"), then by pipeline stage and TP rank ("pp2.0" before
    "pp10.0"); anything else last, by name."""
    m = _RANK_KEY.fullmatch(rank)
    if m is None:
        return (1 << 30, 0, rank)
    pp, tp = m.groups()
    return (int(pp) if pp else -1, int(tp), "")
