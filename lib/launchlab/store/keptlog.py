"""What the kit keeps of a server log: its first HEAD_BYTES and its last TAIL_BYTES, every line cut at LINE_BYTES,
secrets masked; and how much of it was cut (LogCut, in the run record).

A server can write GBs (a flood of 130 MB/s for 20 s, one line of 500 MB: issue 23), and whatever it writes, the
kit's memory and time must stay bounded. The raw file on the host is the server's own, written once and never
edited; the cutting happens when the kit copies it into the run folder, and the copy says so: a line marks
where bytes were left out and how many, a cut line ends with a mark, and the run record (status.json `logs`)
carries the figures. The head is written as it comes; the tail is held in memory up to TAIL_BYTES until the end.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path

from launchlab import safefiles
from launchlab.logparse.common import LINE_BYTES
from launchlab.masking import Masker

# A launch's story (its arguments, weights, KV-cache sizing, graph capture) is in its first MBs: the real startup
# logs in tests/fixtures are under 1 MiB, so 8 MiB holds a startup with room for a chatty one.
HEAD_BYTES = 8 * 2**20
# How it ended (the traceback, the last progress lines before an exit or a stop) is in its last MBs; a traceback of
# every rank of an 8-GPU server is well under 1 MiB.
TAIL_BYTES = 8 * 2**20
# the tail is held as pieces of whole lines up to this size: what is dropped from its front goes by whole pieces
PIECE_BYTES = 256 * 1024


@dataclass(frozen=True)
class LogCut:
    """How much of a server log the kit kept: bytes the server wrote (as far as they were read), bytes of the copy
    in the run folder (its head and its tail), bytes of the server's output not in it, and lines cut at LINE_BYTES.
    `complete`: the whole log was read (False: a deadline or an error stopped the copy; `written_bytes` is then
    what the host's file held)."""

    name: str
    written_bytes: int
    kept_bytes: int
    head_bytes: int
    tail_bytes: int
    cut_bytes: int
    lines_cut: int
    complete: bool = True

    @property
    def cut(self) -> bool:
        return self.cut_bytes > 0 or self.lines_cut > 0

    def note(self) -> str:
        """`server.log: 2.4 GiB written, 16.0 MiB kept (head 8.0 MiB + tail 8.0 MiB), 2.4 GiB cut`."""
        text = (f"{self.name}: {size_text(self.written_bytes)} written, {size_text(self.kept_bytes)} kept (head "
                f"{size_text(self.head_bytes)} + tail {size_text(self.tail_bytes)}), {size_text(self.cut_bytes)} cut")
        if self.lines_cut:
            text += f"; {self.lines_cut} line(s) longer than {size_text(LINE_BYTES)} cut there"
        return text

    @classmethod
    def from_json(cls, data: dict) -> LogCut:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def to_json(self) -> dict:
        return {"name": self.name, "written_bytes": self.written_bytes, "kept_bytes": self.kept_bytes,
                "head_bytes": self.head_bytes, "tail_bytes": self.tail_bytes, "cut_bytes": self.cut_bytes,
                "lines_cut": self.lines_cut, "complete": self.complete}


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def line_mark(dropped: int | None) -> bytes:
    """What ends a line cut at LINE_BYTES in the kit's copy (dropped None: the line goes on into bytes left out)."""
    if dropped is None:
        return f" [launchlab: line cut at {size_text(LINE_BYTES)}; it goes on into the bytes not kept below]\n".encode()
    return f" [launchlab: line cut at {size_text(LINE_BYTES)}, {dropped:,} more bytes not kept]\n".encode()


def gap_mark(skipped: int) -> bytes:
    """The line that stands in the kit's copy where bytes of the server's log were left out."""
    return (f"[launchlab: {skipped:,} bytes of this server log not kept here; the kit keeps a log's first "
            f"{size_text(HEAD_BYTES)} and last {size_text(TAIL_BYTES)}, cut as it copies the log from the host]\n"
            ).encode()


class KeptLog:
    """Writes the kit's copy of a server log from its bytes in the order the server wrote them (`feed`), or from its
    head and its tail with the middle never read (`skip`). `feed` returns the complete lines it took (cut, not
    masked), for the watcher to search. Memory: the tail (TAIL_BYTES) and one unfinished line (LINE_BYTES and the
    longest secret, so a secret across the cut is masked whole)."""

    def __init__(self, path: Path, masker: Masker, head_bytes: int = HEAD_BYTES, tail_bytes: int = TAIL_BYTES):
        self.path, self.masker = path, masker
        self.fh = safefiles.create(path)  # in a folder of the user's own, never through a link (closed by close())
        self.head_room, self.head_bytes, self.tail_room = head_bytes, 0, tail_bytes
        self.tail: collections.deque[tuple[bytes, int]] = collections.deque()  # (masked piece, raw bytes it stands for)
        self.tail_len = 0
        self.in_tail = False
        self.window = LINE_BYTES + max((len(v.encode()) for v in masker.values), default=0)
        self.pending, self.pending_raw = b"", 0  # an unfinished line: its first `window` bytes, its length so far
        self.skip_partial = False  # after a skip: the first line read is the end of a line, not kept
        self.position = 0  # bytes of the server's log passed: read or skipped
        self.cut_bytes = self.lines_cut = 0
        self.gap_bytes = 0  # bytes left out between head and tail, not yet marked in the copy

    # -- taking bytes ------------------------------------------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        """The server's next bytes; returns the complete lines among them (and the one they complete), each cut."""
        self.position += len(data)
        if self.skip_partial:
            end = data.find(b"\n")
            if end < 0:
                self.cut_bytes += len(data)
                return b""
            self.cut_bytes += end + 1
            data, self.skip_partial = data[end + 1:], False
        out = []
        if self.pending_raw:
            end = data.find(b"\n")
            if end < 0:
                self._extend_pending(data)
                return b""
            self._extend_pending(data[:end + 1])
            out.append(self._finish_pending())
            data = data[end + 1:]
        cut = data.rfind(b"\n") + 1
        if cut:
            out.extend(self._take_block(data[:cut]))
        if cut < len(data):
            self._extend_pending(data[cut:])
        self.fh.flush()  # the head is on disk as it comes: the notebook's live view reads it, and a kernel can die
        return b"".join(out)

    def skip(self, n: int) -> None:
        """n bytes of the server's log (after what was fed) are left out unread; the next bytes fed start inside a
        line, which is left out too. An unfinished line is kept cut when the kit has read its first LINE_BYTES (and
        enough beyond them to mask a secret across the cut); a shorter one is left out (a secret in it could be cut
        in two)."""
        self.position += n
        if self.pending_raw >= self.window:
            self.lines_cut += 1
            self.cut_bytes += self.pending_raw - LINE_BYTES
            self._keep(self.masker.bytes(self.pending)[:LINE_BYTES] + line_mark(None), self.pending_raw)
        else:
            self.cut_bytes += self.pending_raw
            self.gap_bytes += self.pending_raw
        self.cut_bytes += n
        self.gap_bytes += n
        self.pending, self.pending_raw, self.skip_partial, self.in_tail = b"", 0, True, True

    def close(self, written: int | None = None, name: str | None = None, complete: bool = True) -> LogCut:
        """Write the tail (after a mark where bytes were left out) and say what was kept. `written`: the size of the
        server's log, when the kit knows more of it than it read (a deadline stopped the copy)."""
        if self.pending_raw:  # the log's last line, without its newline
            self._keep(self._cut_line(self.pending, self.pending_raw, newline=False), self.pending_raw)
            self.pending, self.pending_raw = b"", 0
        if written is not None and written > self.position:  # the end was never read
            self.cut_bytes += written - self.position
            self.gap_bytes += written - self.position
        if self.gap_bytes:
            self.fh.write(gap_mark(self.gap_bytes))
        tail_bytes = 0
        for piece, _raw in self.tail:
            self.fh.write(piece)
            tail_bytes += len(piece)
        kept = self.fh.tell()
        self.fh.close()
        self.tail.clear()
        return LogCut(name or self.path.name, max(written or 0, self.position), kept,
                      self.head_bytes, tail_bytes, self.cut_bytes, self.lines_cut, complete)

    def abandon(self) -> None:
        """Close without writing the tail (the copy is being thrown away)."""
        self.fh.close()

    # -- lines -------------------------------------------------------------------------------------------------

    def _extend_pending(self, data: bytes) -> None:
        room = self.window - len(self.pending)
        if room > 0:
            self.pending += data[:room]
        self.pending_raw += len(data)

    def _finish_pending(self) -> bytes:
        line, raw = self.pending, self.pending_raw
        self.pending, self.pending_raw = b"", 0
        if raw <= LINE_BYTES + 1:  # its newline included
            self._keep(self.masker.bytes(line), raw)
            return line
        return self._take_cut(line, raw)

    def _take_cut(self, start: bytes, raw: int) -> bytes:
        """A line longer than LINE_BYTES (start: its first bytes, `window` of them at least): kept cut and marked."""
        self._keep(self._cut_line(start, raw, newline=True), raw)
        return start[:LINE_BYTES] + b"\n"

    def _cut_line(self, start: bytes, raw: int, newline: bool) -> bytes:
        """The masked, cut form of a line of `raw` bytes whose first bytes are `start` (masked before the cut, so a
        secret that crosses LINE_BYTES goes whole)."""
        masked = self.masker.bytes(start[:self.window])
        body_raw = raw - (1 if newline else 0)
        if body_raw <= LINE_BYTES:
            return masked
        self.lines_cut += 1
        self.cut_bytes += body_raw - LINE_BYTES
        return masked[:LINE_BYTES] + line_mark(body_raw - LINE_BYTES)

    def _take_block(self, block: bytes) -> list[bytes]:
        """Complete lines: kept in pieces of whole lines, each line longer than LINE_BYTES cut; returns what the
        watcher sees of them."""
        out = []
        start = 0
        for line_start, line_end in _long_lines(block):
            if line_start > start:
                out.append(self._take_short(block[start:line_start]))
            out.append(self._take_cut(block[line_start:line_start + self.window], line_end + 1 - line_start))
            start = line_end + 1
        if start < len(block):
            out.append(self._take_short(block[start:]))
        return out

    def _take_short(self, block: bytes) -> bytes:
        """Lines none of which is longer than LINE_BYTES, kept in pieces of at most PIECE_BYTES (whole lines)."""
        start = 0
        while start < len(block):
            end = min(len(block), start + PIECE_BYTES)
            if end < len(block):
                end = block.rfind(b"\n", start, end) + 1 or block.find(b"\n", end) + 1
            piece = block[start:end]
            self._keep(self.masker.bytes(piece), len(piece))
            start = end
        return block

    # -- head and tail -----------------------------------------------------------------------------------------

    def _keep(self, piece: bytes, raw: int) -> None:
        """A masked piece of whole lines: into the head while it has room, else onto the tail (its front dropped)."""
        if not self.in_tail and len(piece) <= self.head_room:
            self.fh.write(piece)
            self.head_room -= len(piece)
            self.head_bytes += len(piece)
            return
        self.in_tail = True  # the head is over: what follows goes to the tail, even if a smaller piece would fit
        self.tail.append((piece, raw))
        self.tail_len += len(piece)
        while self.tail_len > self.tail_room and len(self.tail) > 1:
            dropped, dropped_raw = self.tail.popleft()
            self.tail_len -= len(dropped)
            self.cut_bytes += dropped_raw
            self.gap_bytes += dropped_raw


def _long_lines(block: bytes) -> list[tuple[int, int]]:
    """(start, index of its newline) of every line of a block of complete lines longer than LINE_BYTES. A line that
    long contains a whole window of LINE_BYTES // 2 aligned on that stride, so only windows without a newline are
    looked at closer: a few dozen `find`s per MB, whatever the lines."""
    found: list[tuple[int, int]] = []
    if len(block) <= LINE_BYTES:
        return found
    stride = LINE_BYTES // 2
    at = 0
    while at + stride <= len(block):
        if block.find(b"\n", at, at + stride) >= 0:
            at += stride
            continue
        start = block.rfind(b"\n", 0, at) + 1
        end = block.find(b"\n", at)
        if end - start > LINE_BYTES:
            found.append((start, end))
        at = max(at + stride, end + 1)
    return found
