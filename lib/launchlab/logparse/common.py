"""What every server-log parser shares: streaming and line cleaning (the ParsedLog record and the vocabularies it
is written in: parsedlog.py).

A server that ran for days writes hundreds of MB of decode-progress lines, so files are read in chunks and
a chunk is only decoded and handed to the line parser when one of its lines could matter: when it contains an
anchor word of the parser (every statement a parser reads contains one of its anchors literally) or the parser
is inside a multi-line message (a traceback). The anchors are searched all at once over the raw bytes by an
Aho-Corasick automaton with a SIMD prefilter (ahocorasick-rs), at about the speed of `grep -F`; counting the
chunk's newlines (for line numbers) is the only other pass over a skipped chunk. Memory stays bounded by the
chunk size: a line is read up to LINE_BYTES and the rest of it skipped unread (a server can print a line of
hundreds of MB, and no statement a parser reads is near that length).

Line cleaning: terminal escape sequences (colour codes, window titles: escaping.without_escapes) are removed
and `\\r`-separated progress-bar updates are split, so a log line glued after a bar is seen on its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Protocol

import ahocorasick_rs

from launchlab.escaping import without_escapes
from launchlab.logparse.parsedlog import ParsedLog
from launchlab.safefiles import open_regular

# torch's per-rank prefix of a worker's stderr (`[rank1]:[W CudaIPCTypes.cpp:16] …`): a rank the group has
TORCH_RANK = re.compile(r"^\[rank(\d+)\]:\s?")
CHUNK_BYTES = 256 * 1024  # measured fastest in bench/parse_vs_grep.py: the chunks fed whole stay short
# the longest line the kit reads or keeps: far above any statement a parser reads (the real logs' longest line is
# under 1 KiB, a server_args line a few KiB), far below what a server can print (one 500 MB line, issue 23)
LINE_BYTES = 64 * 1024
_DEBUG = re.compile(r"\bDEBUG (?P<name>[\w.]+): (?P<pairs>.*)")
_PAIR = re.compile(r"(?P<key>\w+)=(?P<value>-?[\d.]+(?:[eE][-+]?\d+)?)(?: ?(?P<unit>[A-Za-z%]+))?")
_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?(?P<type>\w*(?:Error|Exception|Interrupt|Exit))(?::\s*(?P<msg>.*))?$")
_QUOTE = re.compile(r"^(?:> ?)+")  # `> `, `> > ` (a quote in a quote)
_NCCL_VERSION = re.compile(r"\busing nccl==(?P<pip>[\w.]+)|\bNCCL version (?P<lib>\d+\.\d+\.\d+)"
                           r"|\blibnccl\.so\.(?P<file>\d+\.\d+\.\d+)\b")


class Anchors:
    """The anchor words of a parser: `search(data)` says whether any of them occurs in data (bytes)."""

    def __init__(self, words: Iterable[str]):
        self.words = tuple(words)
        # leftmost-first is the match kind under which the automaton uses its SIMD prefilter (10x faster here)
        self._automaton = ahocorasick_rs.BytesAhoCorasick([w.encode() for w in self.words],
                                                          matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST)

        self._text_automaton = ahocorasick_rs.AhoCorasick(list(self.words),
                                                          matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST)

    def search(self, data: bytes) -> bool:
        return bool(self._automaton.find_matches_as_indexes(data))

    def contains(self, text: str) -> bool:
        """Whether a decoded line holds an anchor: a parser skips the rest of its work on a line that holds none."""
        return bool(self._text_automaton.find_matches_as_indexes(text))


class LineParser(Protocol):
    """What the streaming reader drives: one parser per server kind."""

    anchors: Anchors  # a line that contains none of these cannot matter
    wants_every_line: bool  # True while inside a multi-line message (a traceback)

    def feed(self, number: int, text: str) -> None: ...
    def result(self) -> ParsedLog: ...


def anchors(words: Iterable[str]) -> Anchors:
    """The anchors of a parser: literal words, each contained in every statement it stands for."""
    return Anchors(words)


def match_statement(log: ParsedLog, statements: list, msg: str, t: datetime | None, rank: str,
                    line: int, prefix: str = "") -> tuple[str, re.Match] | None:
    """Record the first statement of a parser's table that matches msg: (phase, match), or None.

    A table row is (regex, phase, [(group, field)]): the phase the statement belongs to, and which regex
    group holds which field (numbers may carry thousands separators). `prefix` names whose figures they are when
    not the target model's (a draft's: `draft_`, speculative.py)."""
    for rx, phase, groups in statements:
        m = rx.search(msg)
        if m is None:
            continue
        log.reach(phase)
        for index, name in groups:
            if m.group(index) is not None:
                log.record(t, rank, prefix + name, float(m.group(index).replace(",", "")), line)
        return phase, m
    return None


def clean(text: str) -> list[str]:
    """A raw line as the segments a reader saw: terminal escape sequences removed, a markdown quote's `> ` taken off
    (a log pasted as a blockquote), split at carriage returns."""
    if "\x1b" in text:
        text = without_escapes(text)
    if text[:1] == ">":
        text = _QUOTE.sub("", text, count=1)
    if "\r" in text:
        return [s for s in text.split("\r") if s.strip()]
    return [text] if text else []


def feed_lines(parser: LineParser, raw_lines: Iterable[str]) -> ParsedLog:
    """Parse text lines already in memory (every line is fed; used for short logs and tests)."""
    for number, raw in enumerate(raw_lines, start=1):
        for segment in clean(raw.rstrip("\n")):
            parser.feed(number, segment)
    return parser.result().settle()


def scan_file(parser: LineParser, path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> ParsedLog:
    """Stream a log file through a parser, skipping chunks in which no line can matter (see module doc). A line
    longer than LINE_BYTES is read up to there (fed or skipped as any other line) and the rest of it skipped
    unread, so neither memory nor time depends on how long a line is."""
    number = 0
    rest = b""
    skipping = False  # inside a line already cut: its rest is looked at only for its end
    with open_regular(path) as fh:  # a FIFO or a device is refused at once, never waited on
        while block := fh.read(chunk_bytes):
            if skipping:
                end = block.find(b"\n")
                if end < 0:
                    continue
                block, skipping = block[end + 1:], False
            if rest:
                block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut:
                # the partial last line is searched too: a match there feeds this chunk early, never wrongly
                if parser.wants_every_line or parser.anchors.search(block):
                    number += _feed_block(parser, block[:cut], number)
                else:
                    number += block.count(b"\n", 0, cut)
            rest = block[cut:]
            if len(rest) > LINE_BYTES:  # a line longer than the kit reads: its head is its line, then its end
                if parser.wants_every_line or parser.anchors.search(rest[:LINE_BYTES]):
                    _feed_block(parser, rest[:LINE_BYTES], number)
                number += 1
                rest, skipping = b"", True
    if rest:
        _feed_block(parser, rest, number)
    return parser.result().settle()


def _feed_block(parser: LineParser, block: bytes, first_number: int) -> int:
    """Feed every line of a chunk (each cut at LINE_BYTES); the number of newlines in it."""
    lines = block.decode("utf-8", errors="replace").split("\n")
    for offset, raw in enumerate(lines, start=1):
        if len(raw) > LINE_BYTES:  # a chunk holds whole lines up to its own size
            raw = raw[:LINE_BYTES]
        for segment in clean(raw):
            parser.feed(first_number + offset, segment)
    return len(lines) - 1


def line_blocks(fh: BinaryIO, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The lines of a binary file, each with its newline (the last one may have none), cut at LINE_BYTES: a line
    longer than that is its first LINE_BYTES and a newline, the rest of it skipped unread."""
    rest, skipping = b"", False
    while block := fh.read(chunk_bytes):
        if skipping:
            end = block.find(b"\n")
            if end < 0:
                continue
            block, skipping = block[end + 1:], False
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line[:LINE_BYTES] + b"\n"
        if len(rest) > LINE_BYTES:
            yield rest[:LINE_BYTES] + b"\n"
            rest, skipping = b"", True
    if rest:
        yield rest


def open_lines(path: str | Path) -> Iterator[str]:
    """Lines of a log file, decoded leniently (a server can print any bytes), each cut at LINE_BYTES (and any
    length of line)."""
    with open_regular(path) as fh:
        for line in line_blocks(fh):
            yield line.decode("utf-8", errors="replace")


def debug_records(text: str) -> list[dict] | None:
    """`DEBUG name: k=v unit, …` instrumentation lines → one record per key, or None."""
    m = _DEBUG.search(text)
    if not m:
        return None
    records = [
        {"name": m["name"], "key": p["key"], "value": float(p["value"]), "unit": p["unit"]}
        for p in _PAIR.finditer(m["pairs"])
    ]
    return records or None


def nccl_version(text: str) -> str | None:
    """The NCCL version a line names: SGLang/vLLM `… is using nccl==2.27.3`, NCCL's own `NCCL version 2.21.5+cuda12.4`,
    or the library's file name (`Loading nccl from library …/libnccl.so.2.18.1`)."""
    m = _NCCL_VERSION.search(text)
    if m is None:
        return None
    return m["pip"] or m["lib"] or m["file"]


def exception_line(text: str) -> tuple[str, str] | None:
    """(type, message) when a line is the last line of a Python traceback, e.g. `RuntimeError: …`."""
    m = _EXCEPTION_LINE.match(text.strip())
    if m is None:
        return None
    return m["type"], (m["msg"] or "")


def classify(message: str) -> str:
    """The failure reason of an error message or traceback line (REASONS: the vocabulary of the stable parse object)."""
    if re.search(r"max seq len|max_model_len|maximum number of tokens that can be stored in KV cache", message):
        return "max_len_exceeds_kv"
    if re.search(r"Not enough memory|Loaded weights leave no GPU memory|Memory pool size is too small"
                 r"|No available memory for the cache blocks|raise_if_cache_size_invalid|No positive solution"
                 r"|Free memory on device", message):
        return "kv_cache_no_memory"
    if re.search(r"custom_all_reduce\.cuh:\d+", message):  # the kernel's error, also inside "Capture cuda graph failed"
        return "custom_allreduce_failed"
    if re.search(r"Capture (?:cuda|CUDA) graph failed|CUDA_GRAPH_CAPTURE_FAILED", message):
        return "cuda_graph_failed"
    if re.search(r"(?:CUDA|HIP|XPU) out of memory|OutOfMemoryError|CUDA error: out of memory", message):
        return "cuda_oom"
    if re.search(r"custom_all_reduce|Custom ?[Aa]ll[Rr]educe", message):
        return "custom_allreduce_failed"
    if re.search(r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError", message):
        return "nccl_error"
    return "exception"
