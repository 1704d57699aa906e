"""The `transformers serve` kind: model load, uvicorn readiness, continuous-batching failures, request outcomes.

The server is ready when uvicorn prints "Application startup complete."; it can still fail afterwards, on its
first request, when the continuous-batching cache cannot be sized ("No positive solution"). Such a log is
ready *and* has a failure: the run pipeline calls that outcome `degraded`. `KIND`, at the end, is the kind's
record (serverkind.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from launchlab.logparse.common import anchors, classify, debug_records, exception_line, feed_lines
from launchlab.logparse.cuda_oom import oom_fields
from launchlab.logparse.parsedlog import ParsedLog
from launchlab.logparse.serverkind import ServerKind

ANCHORS = ("[transformers]", "Loading weights", "Uvicorn running", "Application startup complete", "HTTP/1.1",
           "Traceback", "Error", "error", "Exception", "No positive solution", "Finished server process", "DEBUG")

_ACCESS = re.compile(r'"(?P<method>GET|POST|PUT|DELETE) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')
_CB = re.compile(r"\[Request received\].*CB: (True|False)")


class TransformersParser:
    anchors = anchors(ANCHORS)

    def __init__(self) -> None:
        self.log = ParsedLog(server="transformers")
        self.wants_every_line = False
        self.requests = 0

    def feed(self, number: int, text: str) -> None:
        log = self.log
        log.line = number
        msg = text.strip()
        if (records := debug_records(msg)) is not None:
            log.add_debug(records, None, "0", number)
        elif "[transformers] Loading" in msg or "loading weights file" in msg or msg.startswith("Loading weights"):
            log.reach("weights")
        elif "Uvicorn running on" in msg or "Started server process" in msg:
            log.reach("http")
        elif "Application startup complete" in msg:
            log.ready = True
            log.reach("ready")
        elif (cb := _CB.search(msg)) is not None:
            log.args["continuous_batching"] = cb.group(1)  # the server prints no argument line; requests say it
        elif (access := _ACCESS.search(msg)) is not None:
            if access["method"] == "POST":
                self.requests += 1
                log.record(None, "0", "request_http_status", float(access["status"]), number)
        elif "Traceback (most recent call last)" in msg:
            self.wants_every_line = True
        elif "No positive solution" in msg or "Error in generation loop" in msg:
            log.fail(classify(msg), "kv_cache" if "No positive solution" in msg else None, msg)
        elif self.wants_every_line and exception_line(msg) is not None:
            for name, value in oom_fields(msg).items():
                log.record(None, "0", name, value, number)
            reason = classify(msg)
            log.fail(reason, "kv_cache" if reason == "kv_cache_no_memory" else None, msg)
            self.wants_every_line = False

    def result(self) -> ParsedLog:
        return self.log


def parse(raw_lines: Iterable[str]) -> ParsedLog:
    return feed_lines(TransformersParser(), raw_lines)


KIND = ServerKind(
    name="transformers",
    evidence=re.compile(r"^\[transformers\]|transformers serve|ContinuousBatchingLogger"),
    ready_pattern=r"Application startup complete\.",
    fatal_patterns=(r"Traceback \(most recent call last\)",),
    parser=lambda rules: TransformersParser(),
)  # no budget: the log prints no memory figures, so the report shows nvidia-smi's
