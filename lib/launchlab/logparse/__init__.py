"""Server-log parsers: one entry point for the run pipeline and `launchlab parse`.

`rules_for(kind)` gives the lifecycle the ready line and fatal patterns of a server kind; `parse_file` gives
the per-rank fields, the phase reached and the failure. Both come from the same per-server module, and
`parse_file` streams (see common.scan_file), so a log of hundreds of MB parses in bounded memory.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from launchlab.errors import ParseError
from launchlab.logparse import generic, sglang, transformers, vllm
from launchlab.logparse.common import PHASES, REASONS, Event, Failure, ParsedLog, open_lines, scan_file

SERVERS = ("sglang", "vllm", "transformers", "generic")
_EVIDENCE = {
    "sglang": re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: (?:DP|PP|TP|EP|ATTN_CP|MOE_DP)\d+)*\] "
                         r"|\[\d{2}:\d{2}:\d{2} TP\d+\] |server_args=ServerArgs|sglang|KV Cache is allocated"
                         r"|Load weight (?:begin|end)"),
    "vllm": re.compile(r"(?:DEBUG|INFO|WARNING|ERROR) \d{2}-\d{2} \d{2}:\d{2}:\d{2} \[?[\w./-]+:\d+\]|vllm|vLLM"
                       r"|Available KV cache memory|GPU KV cache size|# (?:GPU|cuda) blocks"),
    "transformers": re.compile(r"^\[transformers\]|transformers serve|ContinuousBatchingLogger"),
}


@dataclass(frozen=True)
class ReadyRules:
    ready_pattern: str | None
    fatal_patterns: tuple[str, ...]


def rules_for(kind: str, ready_pattern: str | None = None, fatal_patterns: tuple[str, ...] = ()) -> ReadyRules:
    """The server kind's ready line and fatal patterns, with the params' own added (a params pattern wins)."""
    module = {"sglang": sglang, "vllm": vllm, "transformers": transformers}.get(kind)
    if module is None:
        return ReadyRules(ready_pattern, tuple(fatal_patterns))
    return ReadyRules(ready_pattern or module.READY_PATTERN, module.FATAL_PATTERNS + tuple(fatal_patterns))


def detect(path: str | Path, sample_lines: int = 2000) -> str:
    """Which server wrote a log, from the evidence in its first lines (the kind with the most wins)."""
    try:
        head = list(itertools.islice(open_lines(path), sample_lines))
    except OSError as exc:
        raise ParseError(f"{path}: cannot read the log: {exc.strerror}") from None
    scores = {kind: sum(1 for line in head if rx.search(line)) for kind, rx in _EVIDENCE.items()}
    best = max(scores, key=scores.get)
    return best if scores[best] else "generic"


def parser_for(kind: str, rules: ReadyRules | None = None):
    if kind == "sglang":
        return sglang.SGLangParser()
    if kind == "vllm":
        return vllm.VLLMParser()
    if kind == "transformers":
        return transformers.TransformersParser()
    if kind == "generic":
        rules = rules or ReadyRules(None, ())
        return generic.GenericParser(rules.ready_pattern, rules.fatal_patterns)
    raise ParseError(f"unknown server kind {kind!r} (known: auto, {', '.join(SERVERS)})")


def parse_file(path: str | Path, server: str = "auto", rules: ReadyRules | None = None) -> ParsedLog:
    path = Path(path)
    if not path.is_file():
        raise ParseError(f"{path}: no such log file")
    kind = detect(path) if server == "auto" else server
    return scan_file(parser_for(kind, rules), path)


__all__ = ["PHASES", "REASONS", "SERVERS", "Event", "Failure", "ParsedLog", "ReadyRules", "detect", "parse_file",
           "parser_for", "rules_for"]
