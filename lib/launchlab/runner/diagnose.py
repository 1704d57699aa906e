"""`launchlab diagnose LOG…`: what a failing launch's log says — what failed, in which phase, on which ranks, the
numbers its kind sizes memory from and the break-even they give, the features that were on — as a Diagnosis
(draft.py turns it into the params file of the experiment that isolates the failure).

It reads a log as every run's log is read (logparse, logfacts, the kind's own budget) and takes everything
server-specific from the kind's record (ServerKind: break_even, suspects, instrumentation, relaunch): nothing here
names a server.
"""

from __future__ import annotations

import re
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from launchlab.errors import ParseError
from launchlab.escaping import visible
from launchlab.logparse import ParsedLog, kinds, logfacts, parse_file
from launchlab.logparse.common import open_lines
from launchlab.logparse.parsedlog import Failure
from launchlab.logparse.serverkind import ServerKind, Suspect

RUN_ID = "diagnosed"
# a rank's tag on a line: "[… TP3]", "(Worker_TP3 pid=…)", "rank 3", "RANK=3"
_RANK_TAG = re.compile(r"\b(?:TP|Worker_TP|[Rr]ank|RANK)[ _=]?(\d+)\b")
_LINE_CHARS = 160  # a quoted log line in the diagnosis and the draft's comments
_FAILURE_CHARS = 320  # the failure's own line: long enough for the number a KV error ends on


# why a server switches custom all-reduce off by itself (logparse/custom_ar.py's reasons): on a PCIe box of more than
# two GPUs, a build that reads the kind's `forced_on` can have it on all the same; the others it cannot run on there
FORCEABLE = ("pcie_more_than_two_gpus",)
SERVER_OFF = ("pcie_more_than_two_gpus", "no_p2p", "spans_nodes", "unsupported_world_size", "missing_library",
              "disabled_by_server")


_TOO_LONG = ("max_model_len", "kv_needed_gib", "kv_avail_gib", "estimated_max_model_len")


@dataclass(frozen=True)
class Finding:
    """A suspect the log shows, the line that shows it (None: the dump leaves its switch out), and its state there:
    `on` (switched on), `failed` (it ran, and its own code failed: the suspect of the failure), `off` (the launch
    switched it off), `server off` (asked on, the server switched it off by itself: `reason` says why)."""

    suspect: Suspect
    line: int | None
    text: str
    takes_effect: bool
    state: str = "on"
    reason: str | None = None


@dataclass
class Diagnosis:
    """What the logs of one launch say, for the reader and for the draft. `missing` lists what could not be read
    (the draft gets a TODO for each); `memory` the budget's figures in GiB, by the budget's column."""

    logs: list[Path]
    kind: ServerKind | None = None
    version: str | None = None
    args: dict[str, str] = field(default_factory=dict)
    failure: Failure | None = None
    failure_log: Path | None = None
    failed_ranks: list[str] = field(default_factory=list)
    ready: bool = False
    tp: int = 1
    parallel: dict = field(default_factory=dict)  # the parallel sizes the log shows (logparse/parallel.py)
    custom_ar: dict[str, object] = field(default_factory=dict)  # each rank's custom all-reduce state (CustomAR)
    too_long: dict[str, float] = field(default_factory=dict)  # a max-length failure's figures (max_model_len, …)
    requested: float | None = None
    break_even: float | None = None
    memory: dict[str, float] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    kv_avail_gib: float | None = None  # the KV memory the server found ("Available KV cache memory"), MIN


def diagnose(logs: list[Path], server: str = "auto", *, gpu_memory_gib: float | None = None) -> Diagnosis:
    """Read the logs of one launch (one per rank, or one merged) into a Diagnosis; a log that cannot be read raises
    ParseError naming it. gpu_memory_gib: the card's total (`--gpu-memory`, or asked of the host), for a kind whose
    break-even needs it and whose log does not state it (a failed launch that printed no profile)."""
    parsed = [parse_file(log, server) for log in logs]
    for log, one in zip(logs, parsed, strict=True):
        if not (_server_wrote(one) or logfacts.read(log, one).get("server_version") or _log_like(log)):
            raise ParseError(f"{log}: nothing in it is a line a server writes — no argument dump, version, startup "
                             "phase, rank, custom all-reduce, failure or ready line, nor a logger's timestamped "
                             "lines; give the server's own log (its stdout and stderr, as `… 2>&1 | tee server.log` "
                             "keeps them)")
    found = Diagnosis(logs=list(logs))
    kind_name = next((p.server for p in parsed if p.server != "generic"), parsed[0].server)
    found.kind = kinds.KINDS.get(kind_name)
    for log, one in zip(logs, parsed, strict=True):
        found.args = {**one.args, **found.args}  # the first log's value wins
        found.ready = found.ready or one.ready
        if found.failure is None and one.failure is not None:
            found.failure, found.failure_log = one.failure, log
        found.version = found.version or logfacts.read(log, one).get("server_version")
        found.custom_ar = {**one.custom_ar, **found.custom_ar}
        for fields in one.ranks.values():
            found.too_long.update({k: v for k, v in fields.items() if k in _TOO_LONG and k not in found.too_long})
    found.parallel = max((one.parallel for one in parsed), key=lambda p: (p.get("tp", 1), not p.get("tp_at_least")))
    found.tp = found.parallel.get("tp", 1)
    if found.failure is not None:
        fatal = found.kind.fatal_patterns if found.kind else ()
        found.failed_ranks = _ranks_saying(found.failure_log, found.failure.message, fatal)
    _read_budget(found, parsed, gpu_memory_gib)
    found.findings = _findings(found)
    found.missing = _missing(found)
    return found


def _server_wrote(parsed: ParsedLog) -> bool:
    """Whether a parsed file holds anything a server writes (a README that names a server holds none of it). A
    failure's words alone (and the phase they place it in) are not enough: a params file or a README quotes "Not
    enough memory" too — a log of only its traceback is a logger's lines (_log_like)."""
    return bool(parsed.args or parsed.ranks or parsed.custom_ar or parsed.ready or parsed.debug or parsed.nccl_version
                or parsed.pids or parsed.http_url or parsed.seen_ranks or parsed.rank_pids or parsed.worker_deaths)


# the start of a line a program's logger writes: a timestamp (`[2026-01-01 …`, `INFO 12-01 19:48:40`, llama.cpp's
# `1.06.520.107 W`), a level word, a process tag (`(Worker_TP1 pid=…)`); Python's traceback, its frames (behind
# torch's `[rank0]:` too), its exception line and its warnings (`…/quant_api.py:1731: SyntaxWarning: …`); C++'s;
# a configuration's `name=value` pairs
_RECORD = re.compile(r"^\s*(?:\[rank\d+\]:\s*)?(?:\[?\d{1,4}[-/.:]\d{1,2}[-/.: T]|\(?[\w ]+ pid=\d+"
                     r"|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\b|.*Traceback \(most recent call last\)"
                     r"|File \"[^\"]+\", line \d+|[\w.]+(?:Error|Exception): |\S+\.py:\d+: \w+(?:Warning|Error): "
                     # C++: an assert's `file.cpp:2320: GGML_ASSERT(…)`, a backtrace's frames, a library's own tag
                     r"|\S+\.(?:c|cc|cpp|cu|h|hpp):\d+: |#\d+ +\S|\d+ +0x[0-9a-f]+ |\[(?:TensorRT-LLM|TM)\]\["
                     # a piece of an argument dump the paste broke across lines (`…, tp_size=1, pp_size=2, …`)
                     r"|(?:\w+=[^,=\s]*, ){4})")


def _log_like(log: Path, lines: int = 200) -> bool:
    """Whether a file the parser found nothing in reads as a program's log all the same (a server the kit does not
    know): its first non-empty line, or a quarter of the first 200, start like a logger's records. A README or a
    params file does not."""
    seen = hits = 0
    first = False
    with closing(open_lines(log)) as text:
        for line in text:
            if line.strip():
                seen += 1
                hits += (record := bool(_RECORD.match(line)))
                first = first or (seen == 1 and record)  # a logger's record first: a log, whatever block follows
            if seen >= lines:
                break
    return first or (seen > 0 and hits * 4 >= seen)


def _ranks_saying(log: Path, message: str, fatal: tuple[str, ...]) -> list[str]:
    """The ranks whose tagged lines carry the failure's message (its first words: a message may be cut) or one of
    the kind's fatal lines (a traceback's last line carries no tag; the rank's "hit an exception" line does)."""
    probe = message.strip()[:60]
    said = re.compile("|".join([re.escape(probe)] * bool(probe) + [f"(?:{p})" for p in fatal]) or r"(?!)")
    ranks: set[str] = set()
    with closing(open_lines(log)) as lines:
        for line in lines:
            if m := said.search(line):
                ranks.update(_RANK_TAG.findall(line[: m.start()]))
    return sorted(ranks, key=int)


def _read_budget(found: Diagnosis, parsed: list[ParsedLog], gpu_memory_gib: float | None) -> None:
    """The kind's own budget of the launch (one row), its break-even and the value the launch asked for; the card's
    total, where given, as one nvidia-smi sample of it."""
    kind = found.kind
    if kind is not None and kind.memory_share is not None:  # no budget to read: the value asked for, as logged
        found.requested = _number(found.args.get(kind.memory_share.arg))
    if kind is None or kind.budget is None:
        return
    import pandas as pd  # the budget is a frame function; loaded only here

    from launchlab.verdicts import frames

    events = pd.concat([frames.events_of(one, RUN_ID) for one in parsed], ignore_index=True)
    kv = events.loc[events["field"] == "kv_avail_gib", "value"]
    found.kv_avail_gib = float(kv.min()) if len(kv) else None
    runs = pd.DataFrame([{"run_id": RUN_ID, "variant": "diagnosed", "status": "ready" if found.ready else "failed"}])
    card = None if gpu_memory_gib is None else pd.DataFrame({"run_id": [RUN_ID], "mem_total_mib": [gpu_memory_gib * 1024]})
    rows = kind.budget(events, runs, card)
    if kind.break_even is not None:
        found.requested = _number(found.args.get(kind.break_even.arg))
    if rows is None or rows.empty:
        return
    row = rows.iloc[0]
    found.memory = {k: float(v) for k, v in row.items() if k.endswith("_gib") and pd.notna(v) and _number(v) is not None}
    if kind.break_even is not None and pd.notna(row.get(kind.break_even.column)):
        found.break_even = float(row[kind.break_even.column])
    for key in ("fraction", "utilization"):  # the value the budget used (the log's own, adjusted or not)
        if found.requested is None and pd.notna(row.get(key)):
            found.requested = float(row[key])


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _findings(found: Diagnosis) -> list[Finding]:
    """The kind's suspects the log shows, each with the line that says so: custom all-reduce by what its ranks and the
    failure say first (its own code failing, on, switched off by the server or by the launch), then every suspect by
    the arguments."""
    if found.kind is None:
        return []
    out = []
    for suspect in found.kind.suspects:
        if suspect.custom_ar and (seen := _custom_ar_finding(found, suspect)) is not None:
            out.append(seen)
            continue
        value = found.args.get(suspect.arg)
        if value is None:
            if not (found.args and suspect.absent_on):
                continue  # the log does not say
            line, text = None, f"the argument dump leaves `{suspect.arg}` out: on by default"
        elif re.fullmatch(suspect.on, value):
            line, text = _line_naming(found.logs[0], suspect.arg)
        else:
            continue
        out.append(Finding(suspect, line, text, takes_effect=found.tp > 1 or not suspect.needs_tp))
    return out


def _custom_ar_finding(found: Diagnosis, suspect: Suspect) -> Finding | None:
    """Custom all-reduce as the log's ranks and failure show it (logparse/custom_ar.py), or None where they say
    nothing: failed in its own code (the failure's reason, a rank's state) — it ran, and is the suspect; active on a
    rank; switched off by the server by itself (why); switched off by the launch's own flag."""
    states = found.custom_ar
    failed = [r for r, s in states.items() if s.state == "failed"]
    ranks = _rank_list(failed or list(states))
    if (found.failure is not None and found.failure.reason.startswith("custom_allreduce")) or failed:
        said = found.failure.message if found.failure is not None and not failed else states[failed[0]].message
        return Finding(suspect, found.failure.line if found.failure else None,
                       f"failed in its own code{f' on {ranks}' if failed else ''}: {quote(said)}", True,
                       state="failed")
    active = [r for r, s in states.items() if s.state == "active"]
    if active:
        return Finding(suspect, None, f"active on {_rank_list(active)}: {quote(states[active[0]].message)}", True)
    off = [s for s in states.values() if s.state == "disabled"]
    if not off:
        return None
    why = off[0].reason
    if why in SERVER_OFF:
        return Finding(suspect, None, f"switched off by the server on {ranks}: {quote(off[0].message)}",
                       why in FORCEABLE and bool(suspect.forced_on) and found.tp > 1, state="server off", reason=why)
    return Finding(suspect, None, f"switched off by the launch on {ranks}: {quote(off[0].message)}",
                   found.tp > 1, state="off", reason=why)


def _rank_list(ranks: list[str]) -> str:
    """'rank 0', 'ranks 0–7'."""
    from launchlab.verdicts.levelchecks import ranks_text  # 0, 1, 2, 3 → "0–3"

    return f"rank{'s' if len(ranks) > 1 else ''} {ranks_text(ranks)}"


def _line_naming(log: Path, arg: str) -> tuple[int | None, str]:
    """The first line of the log that names the argument (its argument dump), cut to a quotable length."""
    word = re.compile(rf"\b{re.escape(arg)}\b['\"]?\s*[=:]?\s*[^,)}}]{{0,60}}")  # `arg=value` up to its comma
    with closing(open_lines(log)) as lines:
        for number, line in enumerate(lines, start=1):
            if m := word.search(line):
                return number, quote(m.group(0))
    return None, f"`{arg}`"


def quote(text: str, limit: int = _LINE_CHARS) -> str:
    """A log's text as one printable line (it goes into a terminal and a YAML comment), at most `limit` characters,
    cut after a word rather than inside one (a number cut in two would say another number)."""
    line = visible(" ".join(text.split()))
    if len(line) <= limit:
        return line
    cut = line[:limit]
    return (cut[:cut.rfind(" ")] if " " in cut else cut) + " …"


def _missing(found: Diagnosis) -> list[str]:
    gaps = []
    if found.kind is None or found.kind.name == "generic":
        gaps.append("the server kind (no line of a known server)")
    if not found.args:
        gaps.append("the server's arguments (no argument dump in the log)")
    if found.failure is None:
        gaps.append("a failure (the log shows none)" + (": the server became ready" if found.ready else ""))
    if found.kind is not None and found.kind.break_even is not None and found.break_even is None:
        gaps.append(f"the numbers of the break-even {found.kind.break_even.formula}" + _finish(found))
    return gaps


def _finish(found: Diagnosis) -> str:
    """The break-even as a formula the reader can finish where the log lacks only the card's total."""
    kv, asked = found.kv_avail_gib, found.requested
    if kv is None or asked is None:
        return ""
    return (f": with the card's total memory T GiB (nvidia-smi --query-gpu=memory.total), it is {asked:g} − "
            f"({kv:+.3g} GiB) / T — or give --gpu-memory T")


def text(found: Diagnosis) -> str:
    """The diagnosis for the terminal: what failed, where, the numbers that matter, the suspects."""
    kind = found.kind.name if found.kind else "unknown"
    sizes = found.parallel
    said = f" ({sizes['said']})" if sizes.get("said") else ""
    more = "".join(f", {name} {sizes[key]}" for name, key in (("pipeline parallel", "pp"), ("data parallel", "dp"))
                   if sizes.get(key, 1) > 1)
    lines = [f"server: {kind}{' ' + found.version if found.version else ''}; {len(found.logs)} log(s); tensor parallel "
             f"{found.tp}{said}{more}"]
    if found.failure is not None:
        f = found.failure
        ranks = f"ranks {', '.join(found.failed_ranks)}" if found.failed_ranks else "ranks not tagged"
        lines.append(f"failed: {f.reason} in {f.phase} ({ranks}; line {f.line} of {found.failure_log.name}): "
                     f"{quote(f.message, _FAILURE_CHARS)}")
        if f.reason == "max_len_exceeds_kv":
            setting = found.kind.max_length if found.kind and found.kind.max_length else "the longest request allowed"
            lines.append(_too_long(found.too_long, setting))
    elif found.ready:
        lines.append("no failure: the server became ready")
    lines += _numbers_text(found)
    for finding in found.findings:
        idle = "" if finding.takes_effect else f" — {_idle(found, finding)}: left out"
        where = f"line {finding.line}: " if finding.line else ""
        state = {"server off": "off by the server", "off": "off", "failed": "failed"}.get(finding.state, "on")
        lines.append(f"{state}: {finding.suspect.what} ({where}{finding.text}){idle}")
    lines += [f"not read: {gap}" for gap in found.missing]
    return "\n".join(lines)


def _too_long(figures: dict[str, float], setting: str) -> str:
    """What a max-length failure asks for: not more memory first, a shorter longest request (its figures as logged)."""
    said = []
    if "kv_needed_gib" in figures and "kv_avail_gib" in figures:
        said.append(f"one request at the longest length needs {figures['kv_needed_gib']:g} GiB of KV cache, "
                    f"{figures['kv_avail_gib']:g} GiB are there")
    if "max_model_len" in figures:
        said.append(f"max length {figures['max_model_len']:,.0f} tokens")
    if "estimated_max_model_len" in figures:
        said.append(f"the server estimates {figures['estimated_max_model_len']:,.0f} fit")
    return (f"the fix: lower {setting} (the longest request, not the memory, is what does not fit)"
            + (f" — {'; '.join(said)}" if said else "") + "; or more memory for the KV cache")


def _idle(found: Diagnosis, finding: Finding) -> str:
    """Why a suspect cannot take effect in the experiment: one GPU, or a box where the server switches it off."""
    if finding.state == "server off":
        return f"the server switches it off on this box by itself ({finding.reason}), and no setting forces it on"
    return f"cannot take effect at tensor parallel {found.tp}"


def _numbers_text(found: Diagnosis) -> list[str]:
    kind = found.kind
    if kind is None or kind.break_even is None:
        return []
    figures = ", ".join(f"{k.removesuffix('_gib')} {v:.3f} GiB" for k, v in found.memory.items())
    lines = [f"memory (from the log, MIN over ranks): {figures}"] if figures else []
    asked = f"{found.requested:g}" if found.requested is not None else "not logged"
    if found.break_even is not None:
        lines.append(f"{kind.break_even.arg}: asked {asked}; break-even {found.break_even:.3g} "
                     f"({kind.break_even.formula})")
    return lines
