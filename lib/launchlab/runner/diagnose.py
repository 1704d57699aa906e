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

from launchlab.escaping import visible
from launchlab.logparse import ParsedLog, kinds, logfacts, parse_file
from launchlab.logparse.common import Failure, open_lines
from launchlab.logparse.serverkind import ServerKind, Suspect

RUN_ID = "diagnosed"
# a rank's tag on a line: "[… TP3]", "(Worker_TP3 pid=…)", "rank 3", "RANK=3"
_RANK_TAG = re.compile(r"\b(?:TP|Worker_TP|[Rr]ank|RANK)[ _=]?(\d+)\b")
_LINE_CHARS = 160  # a quoted log line in the diagnosis and the draft's comments
_FAILURE_CHARS = 320  # the failure's own line: long enough for the number a KV error ends on


@dataclass(frozen=True)
class Finding:
    """A suspect the log shows switched on, and the line that shows it (None: the dump leaves its switch out)."""

    suspect: Suspect
    line: int | None
    text: str
    takes_effect: bool


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
    found = Diagnosis(logs=list(logs))
    kind_name = next((p.server for p in parsed if p.server != "generic"), parsed[0].server)
    found.kind = kinds.KINDS.get(kind_name)
    for log, one in zip(logs, parsed, strict=True):
        found.args = {**one.args, **found.args}  # the first log's value wins
        found.ready = found.ready or one.ready
        if found.failure is None and one.failure is not None:
            found.failure, found.failure_log = one.failure, log
        found.version = found.version or logfacts.read(log, one).get("server_version")
    found.tp = _tp_size(found)
    if found.failure is not None:
        fatal = found.kind.fatal_patterns if found.kind else ()
        found.failed_ranks = _ranks_saying(found.failure_log, found.failure.message, fatal)
    _read_budget(found, parsed, gpu_memory_gib)
    found.findings = _findings(found)
    found.missing = _missing(found)
    return found


def _tp_size(found: Diagnosis) -> int:
    key = found.kind.log_facts.tp_size if found.kind else None
    try:
        return max(1, int(found.args.get(key or "", "1")))
    except ValueError:
        return 1


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
    """The kind's suspects the arguments show on, each with the line that says so."""
    if found.kind is None:
        return []
    out = []
    for suspect in found.kind.suspects:
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
    lines = [f"server: {kind}{' ' + found.version if found.version else ''}; "
             f"{len(found.logs)} log(s); tensor parallel {found.tp}"]
    if found.failure is not None:
        f = found.failure
        ranks = f"ranks {', '.join(found.failed_ranks)}" if found.failed_ranks else "ranks not tagged"
        lines.append(f"failed: {f.reason} in {f.phase} ({ranks}; line {f.line} of {found.failure_log.name}): "
                     f"{quote(f.message, _FAILURE_CHARS)}")
    elif found.ready:
        lines.append("no failure: the server became ready")
    lines += _numbers_text(found)
    for finding in found.findings:
        idle = "" if finding.takes_effect else " — cannot take effect at tensor parallel 1: left out"
        where = f"line {finding.line}: " if finding.line else ""
        lines.append(f"on: {finding.suspect.what} ({where}{finding.text}){idle}")
    lines += [f"not read: {gap}" for gap in found.missing]
    return "\n".join(lines)


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
