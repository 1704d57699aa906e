"""Per-run sentences said once: the same sentence of many runs grouped, with the runs counted and named compactly
("15 runs (01–05, 07–11, 13–17): custom_ar=on: custom all-reduce was not used: one GPU (tp_size=1)"), where the
verdict said it once per run."""

from __future__ import annotations

import re

_IN_RUN = re.compile(r"^(?P<said>.*?) in run (?P<run>\S+)$", re.S)
_SEQ = re.compile(r"^(?P<seq>\d+)_")


def runs_named(run_ids: list[str]) -> str:
    """The runs by the sequence number their ids start with, consecutive ones as a range ('01–05, 07, 09–11'); the
    ids themselves where some id has no such number (an imported run's)."""
    seqs = [_SEQ.match(r) for r in run_ids]
    if not run_ids or not all(seqs) or len({m.group("seq") for m in seqs}) < len(run_ids):
        return ", ".join(run_ids)
    numbered = sorted((int(m.group("seq")), m.group("seq")) for m in seqs)
    spans: list[list[tuple[int, str]]] = []
    for n, text in numbered:
        if spans and n == spans[-1][-1][0] + 1:
            spans[-1].append((n, text))
        else:
            spans.append([(n, text)])
    return ", ".join(s[0][1] if len(s) == 1 else f"{s[0][1]}, {s[1][1]}" if len(s) == 2 else f"{s[0][1]}–{s[-1][1]}"
                     for s in spans)


def grouped(sentences: list[str]) -> list[str]:
    """The sentences with those that differ only in their closing ' in run <id>' said once, in the order each was
    first said: 'N runs (<runs_named>): <sentence>'. A sentence of one run, or of no run, stays as it was."""
    groups: dict[str, list[str]] = {}
    order: list[tuple[str, str]] = []  # (kind, key): a sentence of runs is keyed by what it says, another by itself
    for sentence in sentences:
        m = _IN_RUN.match(sentence)
        if m is None:
            order.append(("as is", sentence))
            continue
        if m.group("said") not in groups:
            order.append(("runs", m.group("said")))
        groups.setdefault(m.group("said"), []).append(m.group("run"))
    out = []
    for kind, key in order:
        runs = groups.get(key, []) if kind == "runs" else []
        if kind == "as is":
            out.append(key)
        elif len(runs) == 1:
            out.append(f"{key} in run {runs[0]}")
        else:
            out.append(f"{len(runs)} runs ({runs_named(runs)}): {key}")
    return out


def detail(text: str, sep: str = "; ") -> str:
    """A detail of per-run sentences joined by `sep` (a level check's, a level confound's), grouped."""
    return sep.join(grouped(sentences(text, sep)))


def sentences(text: str, sep: str = "; ") -> list[str]:
    """The per-run sentences of a detail joined by `sep`. A sentence may hold `sep` itself (a server's message
    quoted: "…: failed; see the log in run 01"): a piece that does not end in ' in run <id>' belongs with the
    pieces after it up to one that does — split at every `sep`, its halves were grouped apart and read garbled."""
    found: list[str] = []
    pending: list[str] = []
    for piece in text.split(sep):
        pending.append(piece)
        if _IN_RUN.match(piece):
            found.append(sep.join(pending))
            pending = []
    return found + pending
