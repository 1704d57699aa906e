"""A run's conclusion: its outcome, its parsed logs and its samples → the status, failure and figures of its
record. Pure: no I/O (the lifecycle reads the files and writes the record)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from launchlab.logparse import ParsedLog
from launchlab.logparse.kinds import KINDS
from launchlab.logparse.serverkind import POOL_BELOW_CONTEXT
from launchlab.store.records import Outcome, RunRecord

EXITED_AFTER_READY = "exited_after_ready"  # the failure reason of a server that was ready, then exited by itself


@dataclass(frozen=True)
class NodeLog:
    """A node's parsed server log; `where` prefixes its failure message ("" for node 0)."""

    rank: int
    where: str
    parsed: ParsedLog


def conclude(record: RunRecord, outcome: Outcome | None, logs: list[NodeLog], peaks_mib: list[float]) -> None:
    """Fill the record's status, failure, phase and figures. The server's own failure (a parsed log) is
    preferred over what the kit saw from outside (an exit, a fatal line); node 0's log decides the phase."""
    first = next((log for log in logs if log.rank == 0), None)
    if first is not None:
        record.phase_reached = first.parsed.phase_reached
    record.peak_mem_used_mib = max(peaks_mib) if peaks_mib else None  # no sample is no peak, never 0
    if outcome is None:
        record.status, record.failure_message = "error", "the run stopped before the server was watched"
        return
    failing = next((log for log in logs if log.parsed.failure is not None), None)
    if outcome.status == "degraded" and record.stopped_with == "gone":
        # its first request failed and then it was gone: the request is what broke it (an OOM that killed the
        # server as it served), not an exit by itself — degraded, with the log's own reason where it has one
        outcome = _died_of_request(outcome, failing)
    elif outcome.status == "ready" and record.stopped_with == "gone":
        outcome = _exited_after_ready(outcome, failing)
        failing = None  # the reason is the exit after ready; the log's own failure is in the message
    record.status = (outcome := _usable(outcome, first)).status
    if outcome.status in ("ready", "degraded"):
        record.startup_s = round(outcome.ready_after_s, 2)
    _record_failure(record, outcome, failing)


def _record_failure(record: RunRecord, outcome: Outcome, failing: NodeLog | None) -> None:
    """The record's failure reason, phase and message, from the final outcome and the failing log."""
    if outcome.status == "degraded":
        # the server's own reason when its log has one (e.g. the KV cache could not be sized at the first request)
        if failing is not None:
            record.failure_reason, record.failure_phase = failing.parsed.failure.reason, failing.parsed.failure.phase
        else:
            record.failure_reason, record.failure_phase = outcome.reason, record.phase_reached
        record.failure_message = outcome.message
    elif outcome.status == "failed":
        if failing is not None:
            record.failure_reason = failing.parsed.failure.reason
            record.failure_phase = failing.parsed.failure.phase
            record.failure_message = failing.where + failing.parsed.failure.message
        else:
            record.failure_reason = outcome.reason or "exception"
            record.failure_phase = record.phase_reached
            record.failure_message = outcome.message
    elif outcome.status != "ready":
        record.failure_message = outcome.message
        if outcome.status in ("error", "timeout"):  # an interrupt's, ready signals that disagree; a kit error: none
            record.failure_reason = outcome.reason
        if outcome.status == "timeout":
            record.failure_phase = record.phase_reached


def unusable_why(log: dict, kind: str = "") -> str | None:
    """Why a launch the kit saw ready cannot serve one request at its own context length, as its kind reads its log
    (parsed.json: ServerKind.usable); None where it can, or the kind does not say."""
    found = KINDS.get(log.get("server") or kind)
    return found.usable(log) if found is not None and found.usable is not None else None


def _usable(outcome: Outcome, first: NodeLog | None) -> Outcome:
    """Ready, with a KV pool its own log says cannot hold one request at its context length (ServerKind.usable): it
    starts and cannot serve — degraded, with the numbers."""
    if outcome.status != "ready" or first is None or (why := unusable_why(first.parsed.to_json())) is None:
        return outcome
    return dataclasses.replace(outcome, status="degraded", reason=POOL_BELOW_CONTEXT,
                               message=f"ready at {outcome.ready_after_s:.1f} s, but {why}")


def _died_of_request(outcome: Outcome, failing: NodeLog | None) -> Outcome:
    """Ready, its first request failed, then gone: it starts but its first request fails (the log's reason where it
    states one: cuda_oom), and it said what the server did after."""
    said = f"; the server then exited: {failing.where}{failing.parsed.failure.message}" if failing is not None else \
        "; the server then exited"
    return Outcome("degraded", outcome.reason, f"{outcome.message}{said}", outcome.ready_after_s)


def _exited_after_ready(outcome: Outcome, failing: NodeLog | None) -> Outcome:
    """Ready, then gone before the kit stopped it: it started and broke, which is neither "ready" nor "failed" (a
    smoke request it no longer answered failed because it was gone: said after)."""
    said = f": {failing.where}{failing.parsed.failure.message}" if failing is not None else ""
    then = f" ({outcome.message})" if outcome.status == "degraded" else ""
    return Outcome("degraded", EXITED_AFTER_READY, f"ready at {outcome.ready_after_s:.1f} s, then exited by itself "
                   f"before the kit stopped it{said}{then}", outcome.ready_after_s)
