"""The live progress of one run in a notebook: one display, updated in place while the run goes, with its state,
the phase its log has reached, the time since it started, the memory of its GPUs as last sampled and the log's
last lines. Everything is read from the files the lifecycle keeps current in the run folder (status.json and the
mirrored server log and nvidia-smi samples), so the display cannot disturb the run it shows."""

from __future__ import annotations

import collections
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from launchlab import logparse, safefiles
from launchlab.errors import LaunchlabError
from launchlab.escaping import html_text
from launchlab.gpu import telemetry
from launchlab.logparse.common import LINE_BYTES, clean
from launchlab.store import records, rundir

TAIL_LINES = 8
TAIL_BYTES = 32 * 1024  # enough for the newest sample of every GPU of a node
FOLLOW_BYTES = 2 * 2**20  # what one tick reads of the mirrored log (twice a second)
_UNIT = re.compile(r"\s*\[[^\]]*\]$")  # `memory.used [MiB]` → `memory.used`


@dataclass
class Snapshot:
    """What the display shows at one moment."""

    run_id: str
    state: str = "kernel starting"
    elapsed_s: float = 0.0
    phase: str = "startup"
    gpus: list[tuple[int, float, float]] = field(default_factory=list)  # (index, used MiB, total MiB)
    peaks: dict[int, float] = field(default_factory=dict)  # the most each GPU held in any sample seen, MiB
    tail: list[str] = field(default_factory=list)
    outcome: str | None = None  # the final line, once the run is done


class LogFollower:
    """Feeds the new complete lines of the mirrored server log to the kind's parser (for the phase reached) and
    keeps the last few for the display. One tick reads at most FOLLOW_BYTES, and feeds the parser only a piece
    where a line can matter to it (its anchors, as logparse.common.scan_file): this thread shares the interpreter
    with the run it shows, whose watcher must keep up with a server that floods its log."""

    def __init__(self, path: Path, parser: logparse.LineParser):
        self.path, self.parser, self.offset, self.partial, self.number = path, parser, 0, b"", 0
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    def poll(self) -> str:
        if self.path.exists():
            with safefiles.open_regular(self.path) as fh:
                fh.seek(self.offset)
                chunk = fh.read(FOLLOW_BYTES)
            self.offset += len(chunk)
            data = self.partial + chunk
            cut = data.rfind(b"\n") + 1
            complete, self.partial = data[:cut], data[cut:]
            if len(self.partial) > LINE_BYTES:  # the mirror cuts its lines; this is not one of its lines
                self.partial = b""
            if self.parser.wants_every_line or self.parser.anchors.search(complete):
                for raw in complete.decode("utf-8", errors="replace").splitlines():
                    self.number += 1
                    for segment in clean(raw):
                        self.parser.feed(self.number, segment)
            else:
                self.number += complete.count(b"\n")
            last = complete[-TAIL_BYTES:].decode("utf-8", errors="replace").splitlines()[-TAIL_LINES:]
            self.tail.extend(segment for raw in last for segment in clean(raw))
        return self.parser.result().phase_reached


def latest_memory(path: Path) -> list[tuple[int, float, float]]:
    """The newest sample of each GPU in an nvidia-smi CSV being written: [(index, used MiB, total MiB)]."""
    if not path.exists():
        return []
    with safefiles.open_regular(path) as fh:
        header = fh.readline().decode("utf-8", errors="replace").rstrip("\n").split(", ")
        fh.seek(max(0, os.fstat(fh.fileno()).st_size - TAIL_BYTES))
        lines = fh.read().decode("utf-8", errors="replace").split("\n")[1:-1]  # whole lines only
    names = [_UNIT.sub("", c).strip() for c in header]
    if not {"index", "memory.used", "memory.total"} <= set(names):
        return []
    newest: dict[int, tuple[float, float]] = {}
    for line in lines:
        cells = line.split(", ")
        if len(cells) != len(names):
            continue
        row = dict(zip(names, cells, strict=True))
        try:
            newest[int(row["index"])] = (telemetry.parse_number(row["memory.used"]),
                                         telemetry.parse_number(row["memory.total"]))
        except ValueError:
            continue  # the header again, or a line cut off
    return [(i, *newest[i]) for i in sorted(newest)]


def render(snap: Snapshot) -> str:
    """The display as HTML (every string from the log escaped)."""
    head = snap.outcome or f"{snap.state} · log reached {snap.phase} · {snap.elapsed_s:.1f} s"
    if snap.gpus:
        mem = " · ".join(f"GPU {i} {used / 1024:.1f}/{total / 1024:.0f} GiB (peak {snap.peaks.get(i, used) / 1024:.1f})"
                         for i, used, total in snap.gpus)
    else:
        mem = "no nvidia-smi sample yet"
    tail = "\n".join(snap.tail) or "(the server has written nothing yet)"
    return (f'<div class="launchlab-progress"><b>{html_text(snap.run_id)}</b>: {html_text(head)}<br>'
            f"<small>GPU memory used: {html_text(mem)}</small>"
            f'<pre style="max-height:12em;overflow:auto;white-space:pre-wrap;font-size:85%">{html_text(tail)}</pre>'
            "</div>")


class LiveProgress:
    """A display handle updated every `interval_s` from a background thread while the run goes (the run itself
    stays in the notebook's main thread, so Ctrl-C still reaches its cleanup)."""

    def __init__(self, folder: rundir.RunFolder, kind: str, rules: logparse.ReadyRules, interval_s: float = 0.5):
        self.folder, self.interval_s = folder, interval_s
        self.snap = Snapshot(folder.run_id)
        self.log = LogFollower(folder.log(), logparse.parser_for(kind, rules))
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.handle = None
        self.t0 = time.monotonic()

    def __enter__(self) -> LiveProgress:
        from IPython.display import HTML, display  # only where a notebook shows it

        self.handle = display(HTML(render(self.snap)), display_id=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.thread.join(timeout=10)
        self.update()

    def _loop(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            self.update()

    def update(self) -> None:
        try:
            self.snap = self.read()
        except (OSError, LaunchlabError):  # a file being replaced: the next tick reads it
            return
        if self.handle is not None:
            from IPython.display import HTML

            self.handle.update(HTML(render(self.snap)))

    def read(self) -> Snapshot:
        status = records.read_status(self.folder)
        snap = Snapshot(self.folder.run_id, elapsed_s=time.monotonic() - self.t0)
        if status is not None:
            snap.state = status.state
            if status.done:
                snap.outcome = outcome_line(status.record)
        snap.phase = self.log.poll()
        snap.gpus = latest_memory(self.folder.live_samples())
        snap.peaks = {**self.snap.peaks}
        for index, used, _ in snap.gpus:
            snap.peaks[index] = max(used, snap.peaks.get(index, 0.0))
        snap.tail = list(self.log.tail)
        return snap


STOPPED = {"TERM": "stopped by the kit", "KILL": "killed by the kit (SIGTERM was not enough)",
           "gone": "had exited by itself"}


def outcome_line(record: records.RunRecord) -> str:
    """How a run ended and when it got there, then how it was stopped: "ready at 6.3 s, stopped by the kit" — never
    the order of the kit's steps ("stopping 6.5 s" then "ready 7.6 s" reads as ready after the stop)."""
    if record.status in ("ready", "degraded") and record.startup_s is not None:
        line = f"{record.status} at {record.startup_s:.1f} s"
    elif record.failure_reason == records.READY_SIGNALS:  # not the server's doing: say both signals
        line = (f"ready line at {record.ready_line_s:.1f} s, but the probe never got 200 ({record.probe_answers}): "
                "check ready: health_url" if record.ready_line_s is not None else
                f"the probe got 200 ({record.probe_answers}), but no ready line came: check ready: log_pattern")
    else:
        line = record.status + (f" ({record.failure_reason})" if record.failure_reason else "")
        if record.failure_phase:
            line += f" in {record.failure_phase}"
    if record.stopped_with:
        line += ", " + STOPPED.get(record.stopped_with, f"stopped with {record.stopped_with}")
    return line
