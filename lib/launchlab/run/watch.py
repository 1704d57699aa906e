"""Watching a starting server: its logs and samples mirrored as they grow, and who holds its GPUs looked at every
second or so, until it is ready, fails, exits, or the deadline passes; then, optionally, one smoke request. A lost
host ends the watch as an error, never as a failure: it says nothing about the server."""

from __future__ import annotations

import contextlib
import re
import time
import urllib.parse
from pathlib import Path

from launchlab import logparse, masking, params, safefiles
from launchlab.errors import HostError, LaunchlabError
from launchlab.hosts import Host, commands
from launchlab.hosts.nodes import Node, masker_of
from launchlab.logparse.patterns import BudgetedPattern
from launchlab.polling import backoff
from launchlab.store import rundir
from launchlab.store.keptlog import KeptLog, LogCut
from launchlab.store.records import READY_SIGNALS, Outcome, RunRecord
from launchlab.tags import RUN_ID_ENV
from launchlab.verdicts import gpustate

POLL_S = 0.2  # the longest pause between two looks at a quiet server
FIRST_POLL_S = 0.01  # the first pause, and the one after the log grew: a server ready at once is seen at once
# one look at a growing file reads at most this much: a flooding server's backlog is read in pieces, never at once
READ_BYTES = 4 * 2**20
SAMPLES_EVERY_S = 1.0  # how often the samples are mirrored while watching (they are collected in full at the end)
FATAL_GRACE_S = 3.0  # after a fatal line, let the server finish writing its traceback before stopping it
GPU_LOOK_EVERY_S = 1.0  # how often the kit looks at who holds the run's GPUs while it watches (GpuLooks)
GPU_LOOK_TIMEOUT_S = 10.0  # one look: the watch waits for it, so a host that hangs must not hold the deadline


class GpuLooks:
    """Who holds the memory of the run's GPUs while the kit watches the server start: every GPU_LOOK_EVERY_S, on each
    node the kit samples itself (a scheduler's job runs where it does not look), the compute apps and the run each
    belongs to (commands.gpu_owners, gpustate.read_look). The preflight before the launch and the looks when
    watching ends miss a process that takes memory in between and frees it again; these looks see its peak.
    provenance.json keeps them as `gpu_watching` (gpustate.watching). A look that fails is a note, never the
    run's end."""

    def __init__(self, nodes: list[Node], t_launch: float):
        self.nodes = [n for n in nodes if n.sampled]  # less those whose GPUs the kit cannot reach (look)
        self.masker = masker_of(nodes)  # every node's secrets, as the rest of provenance.json is masked
        self.t_launch, self.last = t_launch, time.monotonic()
        self.looks: list = []
        self.count = 0
        self.failed: str | None = None

    def due(self) -> bool:
        return bool(self.nodes) and time.monotonic() - self.last >= GPU_LOOK_EVERY_S

    def look(self) -> None:
        self.last = time.monotonic()
        tried = False
        for node in list(self.nodes):
            try:
                text = node.host.run_on_gpu_node(commands.gpu_owners(RUN_ID_ENV, node.gpus), timeout=GPU_LOOK_TIMEOUT_S)
                if text is None:  # a scheduler's job, on a node the kit's commands do not reach: never looked at
                    self.nodes.remove(node)
                    continue
                tried = True
                sessions = frozenset(r.pgid for r in node.refs if r.role == "server")  # a server leads a session
                self.looks.append(gpustate.read_look(text, gpustate.PEAK, node.host.name, node.tag, sessions=sessions,
                                                     t_s=round(time.monotonic() - self.t_launch, 2)))
            except LaunchlabError as exc:
                tried = True
                self.failed = self.failed or f"the GPUs' processes on {node.label} could not be read while watching: {exc}"
        self.count += tried  # one look, however many nodes it read

    def record(self, folder: rundir.RunFolder, notes: list[str]) -> None:
        """The looks into provenance.json (`gpu_watching`), masked like the rest of it; nothing without a look."""
        if self.failed:
            notes.append(self.failed)
        if not self.count or not folder.provenance.exists():
            return
        try:
            rundir.update_json(folder.provenance, {"gpu_watching": self.masker.record(
                gpustate.watching(self.looks, every_s=GPU_LOOK_EVERY_S, count=self.count))})
        except LaunchlabError as exc:
            notes.append(f"the GPU state while watching was not recorded: {exc}")


class Mirror:
    """Follows a growing file on the host (the samples): returns its new complete lines and appends them, secrets
    masked, to a local copy, so what was seen survives a host or connection that goes away mid-run. (A line still
    being written is held back until it is complete: a secret could be cut in two at a chunk's end.) One look
    reads at most READ_BYTES."""

    def __init__(self, host: Host, remote: str, local: Path, masker: masking.Masker):
        self.host, self.remote, self.local, self.offset, self.partial = host, remote, local, 0, b""
        self.masker = masker
        safefiles.create(local).close()  # in the run's own folder, never through a link planted there

    def new_lines(self) -> list[str]:
        chunk = self.host.read_bytes(self.remote, self.offset, READ_BYTES)
        if not chunk:
            return []
        self.offset += len(chunk)
        data = self.partial + chunk
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        complete, self.partial = self.masker.bytes(data[:cut]), data[cut:]
        if complete:
            with safefiles.create(self.local, append=True) as fh:
                fh.write(complete)
        return re.split(r"[\r\n]", complete.decode("utf-8", errors="replace"))[:-1]


TAIL_BYTES = 4096


def _last_line(tail: bytes) -> str:
    """The last non-empty line of a log's tail (already masked and cut by the kept log), at most 200 characters."""
    lines = [line.strip() for line in tail.decode("utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


class LogMirror:
    """Follows a growing server log on the host, READ_BYTES at a look, into the kit's copy of it (keptlog: its head
    and tail, lines cut, secrets masked), so what was seen survives a host that goes away mid-run; each look
    returns the new complete lines as one text, for the watcher to search."""

    def __init__(self, host: Host, remote: str, local: Path, masker: masking.Masker):
        self.host, self.remote, self.offset = host, remote, 0
        self.kept = KeptLog(local, masker)

    def read(self) -> tuple[bytes, bool]:
        """(the new complete lines, whether more was waiting than one look reads)."""
        chunk = self.host.read_bytes(self.remote, self.offset, READ_BYTES)
        self.offset += len(chunk)
        return self.kept.feed(chunk), len(chunk) == READ_BYTES

    def close(self) -> LogCut:
        return self.kept.close()


def watch(nodes: list[Node], folder: rundir.RunFolder, rules: logparse.ReadyRules, health_url: str | None,
                   *, deadline: float, t_launch: float, notes: list[str]) -> Outcome:
    """_watch, with the patterns under a time budget (a slow one is noted) and a lost host turned into an error:
    a host the kit cannot reach (its transport already retried) says nothing about the server, so the run is
    then an error, never a failure."""
    ready_rx = BudgetedPattern(rules.ready_pattern) if rules.ready_pattern else None
    fatal_rx = [BudgetedPattern(p) for p in rules.fatal_patterns]
    looks = GpuLooks(nodes, t_launch)
    try:
        return _poll(nodes, folder, ready_rx, fatal_rx, health_url=health_url, deadline=deadline, t_launch=t_launch,
                     looks=looks)
    except HostError as exc:
        return Outcome("error", None, f"lost the connection to host {exc.host!r} while watching: {exc}. What the "
                                       "server did is unknown, so the run is an error, not a failure; if it is still "
                                       "running there, the next `launchlab run` finds it (--stop-leftovers)")
    finally:
        notes.extend(slow.note() for rx in [ready_rx, *fatal_rx] if rx is not None and (slow := rx.slow()) is not None)
        looks.record(folder, notes)


def _poll(nodes: list[Node], folder: rundir.RunFolder, ready_rx: BudgetedPattern | None, fatal_rx: list[BudgetedPattern],
           *, health_url: str | None, deadline: float, t_launch: float, looks: GpuLooks) -> Outcome:
    """Poll until ready, failed (a fatal line or an exit on any node) or the deadline. Ready means: every node
    alive, the ready line seen on node 0 (when the kind has one) and the health URL, asked from node 0's host,
    answering 200 (when one is given)."""
    logs = [LogMirror(n.host, f"{n.dir}/{n.log_name}", folder.log(n.rank), n.masker) for n in nodes]
    samples = [Mirror(n.host, f"{n.dir}/{n.csv_name}", folder.live_samples(n.rank), n.masker) for n in nodes]
    try:
        outcome = _poll_logs(nodes, logs, samples, ready_rx, fatal_rx=fatal_rx, health_url=health_url,
                             deadline=deadline, t_launch=t_launch, looks=looks)
        # the samples up to the end of watching: a server ready within the first mirror's second would otherwise
        # leave the live display (and the run's folder, were the host lost now) with none
        with contextlib.suppress(HostError):  # the outcome stands: the samples are collected in full at the end
            for mirror in samples:
                mirror.new_lines()
        return outcome
    finally:
        for node, log in zip(nodes, logs, strict=True):
            node.kept[node.log_name] = log.close()


class Probe:
    """The kit's probe of the health URL (asked from node 0's host) and every answer it got, counted: what the
    record keeps beside the server's own ready line, so a probe that never agrees with the server is said as such."""

    def __init__(self, host: Host, url: str | None):
        self.host, self.url = host, url
        self.answers: dict[str, int] = {}
        self.order: list[str] = []

    @property
    def path(self) -> str:
        """The URL's path (its host and port are the run's own): what a report names, never a link."""
        parts = urllib.parse.urlsplit(self.url or "")
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def ok(self) -> bool:
        """Asked now: whether it answered 200 (True without a URL to ask)."""
        if self.url is None:
            return True
        answer = str(self.host.http_status(self.url))
        if answer not in self.answers:
            self.order.append(answer)
        self.answers[answer] = self.answers.get(answer, 0) + 1
        return answer == "200"

    def said(self) -> str | None:
        """'404 ×41'; '200 ×1 after refused ×3, 503 ×12' — None where it was never asked."""
        if not self.answers:
            return None
        counted = [f"{a} ×{self.answers[a]}" for a in self.order]
        return counted[-1] + (f" after {', '.join(counted[:-1])}" if len(counted) > 1 else "")


def _poll_logs(nodes: list[Node], logs: list[LogMirror], samples: list[Mirror], ready_rx: BudgetedPattern | None,
               *, fatal_rx: list[BudgetedPattern], health_url: str | None, deadline: float, t_launch: float,
               looks: GpuLooks) -> Outcome:
    scan = _Scan(len(nodes), ready_rx, fatal_rx, t_launch)
    probe = Probe(nodes[0].host, health_url)
    pauses, samples_at = backoff(FIRST_POLL_S, POLL_S), time.monotonic()
    while True:
        grew, behind = scan.read(nodes, logs)
        if time.monotonic() - samples_at >= SAMPLES_EVERY_S:
            samples_at = time.monotonic()
            for mirror in samples:
                mirror.new_lines()
        dead = [n for n in nodes if not n.host.group_alive(n.refs[-1].pgid)]
        if scan.fatal_line is not None and (dead or time.monotonic() - scan.fatal_at > FATAL_GRACE_S):
            return Outcome("failed", None, scan.fatal_line)
        if dead:
            return _exited(nodes, logs, dead, scan.tails)
        if scan.fatal_line is None and scan.ready_line and probe.ok():
            return Outcome("ready", None, "", time.monotonic() - t_launch, scan.ready_line_s, probe.said())
        if time.monotonic() > deadline:
            return _deadline(scan, probe, waited_s=deadline - t_launch)
        # after the checks above, so a look never delays seeing the server ready (it takes the place of this round's
        # pause); none once a fatal line came: the server goes down, and its processes vanish under the look
        if scan.fatal_line is None and looks.due():
            looks.look()
            continue
        # back-off, not a fixed sleep: looking again soon after the log moved, rarely while it is quiet
        if behind:  # more of the log waits than one look reads: read on at once
            continue
        if grew:
            pauses = backoff(FIRST_POLL_S, POLL_S)
        time.sleep(next(pauses))


def _deadline(scan: _Scan, probe: Probe, *, waited_s: float) -> Outcome:
    """Not ready by the deadline: slow (censored, the ledger says), or — where the server's own ready line came and
    the probe never answered 200, or the probe answers 200 and the ready line never came — two ready signals that
    disagree: a problem of the params (`ready: health_url`, `ready: log_pattern`) or the host, not of the server."""
    said = f"not ready after {waited_s:.0f} s"
    if scan.fatal_line is None and scan.ready_line and scan.ready_line_s is not None and probe.url is not None:
        return Outcome("timeout", READY_SIGNALS,
                       f"the server logged its ready line at {scan.ready_line_s:.1f} s, but the kit's probe of "
                       f"{probe.path} got {probe.said() or 'no answer'} until the deadline ({waited_s:.0f} s): check "
                       "ready: health_url in the params", None, scan.ready_line_s, probe.said())
    if scan.fatal_line is None and not scan.ready_line and probe.url is not None and probe.ok():
        return Outcome("timeout", READY_SIGNALS,
                       f"the kit's probe of {probe.path} answers 200, but the server's ready line never came in "
                       f"{waited_s:.0f} s: check ready: log_pattern in the params (or the server kind)", None, None,
                       probe.said())
    return Outcome("timeout", None, said, None, scan.ready_line_s, probe.said())


class _Scan:
    """What the logs said so far: the ready line (node 0), the first fatal line (any node) and when it came, the
    lines read per node (where a slow pattern is reported) and each node's last lines (a server that exits says
    why in its last words)."""

    def __init__(self, n_nodes: int, ready_rx: BudgetedPattern | None, fatal_rx: list[BudgetedPattern],
                 t_launch: float):
        self.ready_rx, self.fatal_rx, self.t_launch = ready_rx, fatal_rx, t_launch
        self.ready_line = ready_rx is None
        self.ready_line_s: float | None = None  # when the ready line came (s from the launch); None: not seen
        self.fatal_line: str | None = None
        self.fatal_at: float | None = None
        self.numbers = [0] * n_nodes
        self.tails = [b""] * n_nodes

    def read(self, nodes: list[Node], logs: list[LogMirror]) -> tuple[bool, bool]:
        """Read what each log gained; (whether any grew, whether more waits than one look reads)."""
        grew = behind = False
        for node, log in zip(nodes, logs, strict=True):
            lines, more = log.read()
            behind = behind or more
            if lines:
                grew = True
                self._lines(node, lines)
        return grew, behind

    def _lines(self, node: Node, lines: bytes) -> None:
        rank = node.rank
        self.tails[rank] = (self.tails[rank] + lines)[-TAIL_BYTES:]
        text = lines.decode("utf-8", errors="replace")
        # a block of lines is searched line by line only where a pattern may match in it (patterns.py)
        ready_rx = self.ready_rx
        look_ready = rank == 0 and not self.ready_line and ready_rx is not None and ready_rx.may_match(text)
        look_fatal = [rx for rx in self.fatal_rx if rx.may_match(text)] if self.fatal_line is None else []
        if not look_ready and not look_fatal:
            self.numbers[rank] += lines.count(b"\n") + lines.count(b"\r")  # bytes: str.count is 20x slower
            return
        for line in re.split(r"[\r\n]", text)[:-1]:
            self.numbers[rank] += 1
            at = (self.numbers[rank], node.log_name)
            if look_ready and not self.ready_line and ready_rx.search(line, *at):
                self.ready_line = True
                self.ready_line_s = round(time.monotonic() - self.t_launch, 2)
            if self.fatal_line is None and any(rx.search(line, *at) for rx in look_fatal):
                self.fatal_line = line.strip() if rank == 0 else f"{node.label}: {line.strip()}"
                self.fatal_at = time.monotonic()


def _exited(nodes: list[Node], logs: list[LogMirror], dead: list[Node], tails: list[bytes]) -> Outcome:
    """A node's server exited before it was ready: why, as its last line says (a scheduler's own reason, a time
    limit or a preemption, is asked once the job is gone: lifecycle._ended_by_scheduler)."""
    for node, log in zip(nodes, logs, strict=True):
        tails[node.rank] = (tails[node.rank] + log.read()[0])[-TAIL_BYTES:]
    where = "" if len(nodes) == 1 else f" on {', '.join(n.label for n in dead)}"
    said = _last_line(tails[dead[0].rank])
    return Outcome("failed", "process_exited", f"the server exited{where} before it was ready"
                   + (f"; its last line: {said}" if said else ""))


def smoke(spec: params.SmokeSpec, node: Node, url: str, ready: Outcome, *, result: RunRecord) -> Outcome:
    """One request to the ready server, from its own host; an unexpected answer makes the run `degraded`. A server
    already gone is sent none: it exited by itself after it was ready (runstatus), whereas one that fails the request
    and is then gone died of the request (an OOM as it served)."""
    if not node.host.group_alive(node.refs[-1].pgid):
        result.smoke_response = "not sent: the server had exited after it was ready"
        return ready
    tic = time.monotonic()
    status, text = node.host.http_post(url, spec.body, spec.timeout_s)
    result.smoke_status, result.smoke_s, result.smoke_response = status, round(time.monotonic() - tic, 2), text[:500]
    if status == spec.expect_status:
        return ready
    time.sleep(1.0)  # let the server log why before it is stopped
    answer = f"answered {status}" if status is not None else f"got no answer ({text[:200]})"
    return Outcome("degraded", "smoke_request_failed", f"ready, but the smoke request to {url} {answer}: {text[:300]}",
                    ready.ready_after_s)
