"""nvidia-smi: parsers for what the sampler and snapshot commands print, and the fields those commands ask for
(the commands are built from them in hosts/commands/gpus.py: gpu_sampler, gpu_snapshot, gpu_apps).

The sampler runs `nvidia-smi --query-gpu=… --format=csv,nounits -lms N` with stdout redirected to a file on
the host; the run folder keeps it gzip-compressed (rundir.RunFolder.samples: a 5 ms trace is megabytes of
nearly identical lines and shrinks 30-fold), and both forms are read here (open_trace). Its CSV is read line
by line: the header maps columns by name (units stripped), a cell that is `N/A` or `[…]` becomes NaN, and a
line with the wrong number of cells (nvidia-smi prints its error messages on stdout) is skipped rather than
breaking the frame.
"""

from __future__ import annotations

import errno
import gzip
import io
import math
import re
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from launchlab import safefiles
from launchlab.errors import ParseError
from launchlab.fields import MAX_GPUS

if TYPE_CHECKING:  # pandas is imported where a frame is built: the run kernel needs none (half a second)
    import pandas as pd

_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]$")
_VALUE_UNIT = re.compile(r"^(-?[\d.]+)\s*(?:MiB|%|W|MHz)$")
_NOT_DATA = re.compile(r"\n[^0-9]")  # a line that does not start like a data line (or an empty one)
_BARE_COMMA = re.compile(r",[^ ]")  # a comma without the space nvidia-smi writes after each: inside a cell
# (two searches: one for either pattern takes ten times as long, its first character no longer a literal)
TIMESTAMP_FORMAT = "%Y/%m/%d %H:%M:%S.%f"
# a trace is read only up to this size, as written or once decompressed (a small .gz can hold a huge file)
MAX_TRACE_BYTES = 512 * 2**20
GZIP_MAGIC = b"\x1f\x8b"
# nvidia-smi column -> telemetry.parquet column
TIDY_COLUMNS = {"index": "gpu_index", "uuid": "gpu_uuid", "memory.used": "mem_used_mib",
                "memory.total": "mem_total_mib", "memory.free": "mem_free_mib", "utilization.gpu": "util_gpu_pct"}


# what nvidia-smi is asked for (hosts/commands/gpus.py builds the commands from these), in the order the parsers
# below read the columns: the sampler's trace, a snapshot of each GPU, the processes holding GPU memory
SAMPLER_FIELDS = ("timestamp", "index", "uuid", "memory.total", "memory.used", "memory.free", "utilization.gpu")
SNAPSHOT_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used", "memory.free")
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")


@dataclass(frozen=True)
class GpuState:
    index: int
    uuid: str
    name: str
    mem_total_mib: float
    mem_used_mib: float
    mem_free_mib: float | None = None  # None: not read (a snapshot of a kit before memory.free was asked for)


def _cell(text: str) -> float | str:
    text = text.strip()
    if text == "N/A" or (text.startswith("[") and text.endswith("]")):
        return math.nan
    m = _VALUE_UNIT.match(text)
    try:
        value = float(m.group(1) if m else text)
    except ValueError:
        return text
    return value if math.isfinite(value) else math.nan  # `inf`, 400 digits: no reading, never an axis to infinity


def parse_number(text: str) -> float:
    """A numeric cell (units allowed) as a float; NaN for `N/A`, `[…]` or anything else."""
    value = _cell(text)
    return value if isinstance(value, float) else math.nan


def _rows(text: str, n: int) -> list[list[str]]:
    return [cells for line in text.splitlines() if len(cells := line.split(", ")) == n]


def parse_snapshot(text: str) -> list[GpuState]:
    """Each GPU of a snapshot; memory.free is None where it was not printed or is not a number."""
    rows = _rows(text, len(SNAPSHOT_FIELDS)) or _rows(text, len(SNAPSHOT_FIELDS) - 1)
    return [GpuState(int(float(c[0])), c[1].strip(), c[2].strip(), _cell(c[3]), _cell(c[4]), _free(c[5:]))
            for c in rows if c[0].strip().isdigit()][:MAX_GPUS]  # no host has more: a listing past it is not one


def _free(cells: list[str]) -> float | None:
    value = parse_number(cells[0]) if cells else math.nan
    return None if math.isnan(value) else value


def parse_apps(text: str) -> list[dict]:
    return [{"gpu_uuid": c[0].strip(), "pid": int(c[1]), "process_name": c[2].strip(), "used_mib": _cell(c[3])}
            for c in _rows(text, len(APP_FIELDS)) if c[1].strip().isdigit()]


def read_query_csv(path: str | Path, fields: tuple[str, ...] | list[str] | None = None, *,
                   limit: int | None = None, max_rows: int | None = None) -> pd.DataFrame:
    """A `--query-gpu` CSV → one column per field, numbers as floats, `N/A`/`[…]` as NaN.

    With a header (with or without units) the columns come from it; without one (`noheader`), from `fields`,
    the list the kit asked for. A header in mid-file that names other fields (a second query appended to the
    file) starts a new block, whose rows are placed by field name, NaN where its header lacks a field. Lines with
    the wrong number of cells are skipped. Read up to `limit` bytes (open_trace), in chunks: memory holds a
    chunk and the rows kept, never the whole text (a 1 MB .gz can hold 300 MiB of lines). At most `max_rows`
    rows are kept (MAX_TRACE_ROWS): past them the trace is thinned evenly per GPU (every 2nd, 4th, … sample of
    each); `attrs` says so — `samples` (rows read), `every` (the thinning) and `peak_mem_used_mib`, the largest
    memory.used of every row read.
    """
    import pandas as pd

    kept = Thinner(MAX_TRACE_ROWS if max_rows is None else max_rows)
    columns: list[str] | None = list(fields) if fields else None
    with open_trace(path, limit=limit) as fh:
        for chunk in _chunks(fh):
            columns, frames = _parse_chunk(chunk, columns)
            for frame in frames:
                kept.add(frame)
    frame = kept.frame(columns or list(SAMPLER_FIELDS))
    if "timestamp" in frame:
        frame["timestamp"] = pd.to_datetime(frame["timestamp"], format=TIMESTAMP_FORMAT, errors="coerce")
    return frame


def peak_memory_mib(path: str | Path) -> float | None:
    """The largest memory.used of a `--query-gpu` CSV (None without a sample of it): the run's peak, as read_query_csv
    reads its lines (a header maps the columns, a line of another width is skipped, `N/A` is no number), in chunks,
    without pandas: the run's kernel reads it as the run ends, and importing pandas there was a quarter of the
    kernel's CPU (py-spy over the demo's 16 runs)."""
    peak, columns, at = math.nan, None, None
    with open_trace(path) as fh:
        for chunk in _chunks(fh):
            for line in chunk.split("\n"):
                cells = line.split(", ")
                if _is_header(cells):
                    columns = [_HEADER_UNIT.sub("", c).strip() for c in cells]
                    at = columns.index("memory.used") if "memory.used" in columns else None
                elif at is not None and len(cells) == len(columns) and isinstance(value := _cell(cells[at]), float):
                    peak = value if math.isnan(peak) else max(peak, value)  # a NaN value leaves it as it is
    return None if math.isnan(peak) else peak


CHUNK_CHARS = 4 * 2**20  # a trace is parsed this much text at a time: ~40,000 lines of 8 GPUs' samples
MAX_TRACE_ROWS = 400_000  # rows of one trace kept (50,000 samples of 8 GPUs: 83 minutes at 100 ms); thinned past it


def _chunks(fh: io.TextIOWrapper):
    """The text in pieces of about CHUNK_CHARS, each of whole lines (the last as it ends)."""
    carry = ""
    while block := fh.read(CHUNK_CHARS):
        text = carry + block
        cut = text.rfind("\n") + 1
        if cut:
            yield text[:cut]
        carry = text[cut:]
    if carry:
        yield carry


def _parse_chunk(text: str, columns: list[str] | None) -> tuple[list[str] | None, list[pd.DataFrame]]:
    """One chunk of whole lines → (the columns in force after it, its frames: one a block of one header's
    rows). The usual chunk — data lines only, or a header first — at C speed (_convert: a report of 200 runs spent
    over a minute reading cells in Python, bench/report_scale.py); any other, line by line."""
    first, _, rest = text.partition("\n")
    if _is_header(cells := first.split(", ")):
        columns, text = [_HEADER_UNIT.sub("", c).strip() for c in cells], rest
    body = text if text.endswith("\n") or not text else text + "\n"
    framed = "\n" + body
    if columns is not None and body and not _NOT_DATA.search(framed) and not _BARE_COMMA.search(framed) and \
            body.count(",") == body.count("\n") * (len(columns) - 1):
        return columns, [_convert(body[:-1], columns)]  # every line the cells of a data line: no loop over them
    return _parse_lines(text.split("\n"), columns)


def _parse_lines(lines: list[str], columns: list[str] | None) -> tuple[list[str] | None, list[pd.DataFrame]]:
    """Lines one by one: a header starts a block of its own columns; a line with another number of cells (a
    prompt, an error message, a line cut off when the sampler was stopped) is skipped."""
    import pandas as pd

    blocks: list[tuple[list[str], list[list[float | str]]]] = []
    records: list[list[float | str]] = []
    for line in lines:
        cells = line.split(", ")
        if _is_header(cells):
            names = [_HEADER_UNIT.sub("", c).strip() for c in cells]
            if names != columns:
                if records and columns is not None:
                    blocks.append((columns, records))
                columns, records = names, []
            continue
        if columns is None or len(cells) != len(columns) or not line:
            continue
        records.append([_cell(c) for c in cells])
    if records and columns is not None:
        blocks.append((columns, records))
    return columns, [pd.DataFrame(rows, columns=names) for names, rows in blocks]


def _convert(text: str, columns: list[str]) -> pd.DataFrame:
    """Lines of cells (checked by _parse_chunk) → read_query_csv's frame."""
    import csv
    import io

    import pandas as pd

    frame = pd.read_csv(io.StringIO(text), sep=",", header=None, names=columns,
                        dtype={"timestamp": str} if "timestamp" in columns else None, na_values=["N/A"],
                        keep_default_na=False, skipinitialspace=True, quoting=csv.QUOTE_NONE, engine="c")
    for name in columns:
        column = frame[name]
        if name == "timestamp":
            continue
        if pd.api.types.is_numeric_dtype(column):  # every cell a number or N/A (a non-finite one: none, as _cell)
            numbers = column.astype("float64")
            frame[name] = numbers.where(numbers.abs() != math.inf)
            continue
        cells = {c: _cell(c) if isinstance(c, str) else c for c in column.unique()}  # each distinct cell once
        if all(value is cell or isinstance(value, str) and value == cell for cell, value in cells.items()):
            continue  # a text column of names and ids, as written
        frame[name] = column.map(cells)  # numbers with a few odd cells (N/A, [Not Supported])
        if all(isinstance(v, float) for v in frame[name].unique()):
            frame[name] = frame[name].astype("float64")
    return frame


class Thinner:
    """At most `limit` rows of a trace read in pieces (a CSV's chunks, a telemetry.parquet's batches), evenly per GPU
    (`key`: its index column): every row until full, then every 2nd, 4th, … sample of each GPU (each halving keeps
    every other row kept), whatever the trace's length; and the largest `peak` (memory used) of every row seen."""

    def __init__(self, limit: int, *, key: str = "index", peak: str = "memory.used"):
        self.limit, self.every, self.samples = max(1, limit), 1, 0
        self.key, self.peak_column = key, peak
        self.seen: dict[object, int] = {}  # per GPU index: its rows so far
        self.frames: list[pd.DataFrame] = []
        self.peak = math.nan

    def add(self, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        self.samples += len(frame)
        if self.peak_column in frame and (top := float(frame[self.peak_column].max())) == top:  # NaN: no number
            self.peak = top if math.isnan(self.peak) else max(self.peak, top)
        key = frame[self.key] if self.key in frame else frame.assign(_gpu=0)["_gpu"]
        start = key.map(self.seen).fillna(0).astype("int64").values
        frame = frame.assign(_nth=start + frame.groupby(key.values).cumcount().values)
        for g, n in key.value_counts().items():
            self.seen[g] = self.seen.get(g, 0) + int(n)
        self.frames.append(frame[frame["_nth"] % self.every == 0])
        # past the limit, halve — down to one row a GPU (its first), which no limit goes below
        while sum(len(f) for f in self.frames) > self.limit and self.every <= max(self.seen.values()):
            self.every *= 2
            self.frames = [f[f["_nth"] % self.every == 0] for f in self.frames]

    def frame(self, columns: list[str]) -> pd.DataFrame:
        import pandas as pd

        frame = (pd.concat(self.frames, ignore_index=True, sort=False).drop(columns="_nth") if self.frames
                 else pd.DataFrame([], columns=columns))
        frame.attrs.update(samples=self.samples, every=self.every, peak_mem_used_mib=self.peak)
        return frame


class _Bounded(io.RawIOBase):
    """A binary stream that raises OSError (EFBIG) once more than `limit` bytes were read from it."""

    def __init__(self, stream, limit: int, path: str, *, underlying=None):
        self.stream, self.left, self.limit, self.path = stream, limit, limit, path
        self.underlying = underlying  # the file a GzipFile reads from: GzipFile.close leaves it open

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            data = self.stream.read(min(len(buffer), self.left + 1))
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # a .gz cut short, or not gzip past its header
            raise OSError(errno.EIO, f"it is a broken gzip file, cut short or not gzip past its header "
                                     f"({type(exc).__name__}: {str(exc)[:120]})", self.path) from None
        if len(data) > self.left:
            raise OSError(errno.EFBIG, f"it is larger than the limit of {safefiles.size_text(self.limit)} once "
                                       "decompressed", self.path)
        self.left -= len(data)
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self.stream.close()
        if self.underlying is not None:
            self.underlying.close()
        super().close()


def open_trace(path: str | Path, *, limit: int | None = None) -> io.TextIOWrapper:
    """A GPU trace opened as text, whether nvidia-smi's CSV as written or the kit's gzip of it (told by its first
    bytes, not its name). A regular file only (safefiles.open_regular), read up to `limit` bytes (MAX_TRACE_BYTES),
    counted after decompression: OSError past it, or for a .gz that is not whole."""
    limit = MAX_TRACE_BYTES if limit is None else limit
    raw = safefiles.open_regular(path, max_bytes=limit)
    try:
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if raw.peek(2)[:2] == GZIP_MAGIC else raw
    except BaseException:
        raw.close()
        raise
    bounded = _Bounded(stream, limit, str(path), underlying=raw if stream is not raw else None)
    return io.TextIOWrapper(io.BufferedReader(bounded), encoding="utf-8", errors="replace")


def _is_header(cells: list[str]) -> bool:
    names = [_HEADER_UNIT.sub("", c).strip() for c in cells]
    return len(cells) > 1 and all(re.fullmatch(r"[a-z_]+(?:\.[a-z_]+)*", n) for n in names) and (
        "index" in names or "timestamp" in names or any(n.startswith(("memory.", "utilization.")) for n in names))


def tidy(frame: pd.DataFrame, run_id: str, t0: datetime | None) -> pd.DataFrame:
    """The telemetry.parquet rows of one run: t_s is seconds since the server was started (host clock). ParseError
    when the capture has no `timestamp` or `index` column (a sampler of another version, a file edited by hand):
    no sample of it can be placed in time or on a GPU."""
    import pandas as pd

    if missing := [c for c in ("timestamp", "index") if c not in frame]:
        raise ParseError(f"its header has no {' or '.join(missing)} column (it has: "
                         f"{', '.join(map(str, frame.columns[:12])) or 'none'})")
    out = frame.rename(columns=TIDY_COLUMNS)
    keep = [c for c in TIDY_COLUMNS.values() if c in out]
    out = out[["timestamp", *keep]].dropna(subset=["timestamp"]).copy()
    out.insert(0, "run_id", run_id)
    start = pd.Timestamp(t0) if t0 is not None else (out["timestamp"].min() if len(out) else pd.NaT)
    out.insert(1, "t_s", (out["timestamp"] - start).dt.total_seconds())
    out["gpu_index"] = out["gpu_index"].astype("int64")
    return out.drop(columns=["timestamp"]).reset_index(drop=True)
