"""nvidia-smi: parsers for what the sampler and snapshot commands print (the commands are built in
hosts/commands/gpus.py, and named here too, as `sampler_argv`, `snapshot_command`, `apps_command`).

The sampler runs `nvidia-smi --query-gpu=… --format=csv,nounits -lms N` with stdout redirected to a file on
the host. Its CSV is read line by line: the header maps columns by name (units stripped), a cell that is
`N/A` or `[…]` becomes NaN, and a line with the wrong number of cells (nvidia-smi prints its error messages
on stdout) is skipped rather than breaking the frame.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from launchlab.hosts import commands
from launchlab.hosts.commands import APP_FIELDS, SAMPLER_FIELDS, SNAPSHOT_FIELDS

if TYPE_CHECKING:  # pandas is imported where a frame is built: the run kernel needs none (half a second)
    import pandas as pd

_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]$")
_VALUE_UNIT = re.compile(r"^(-?[\d.]+)\s*(?:MiB|%|W|MHz)$")
TIMESTAMP_FORMAT = "%Y/%m/%d %H:%M:%S.%f"
# nvidia-smi column -> telemetry.parquet column
TIDY_COLUMNS = {"index": "gpu_index", "uuid": "gpu_uuid", "memory.used": "mem_used_mib",
                "memory.total": "mem_total_mib", "memory.free": "mem_free_mib", "utilization.gpu": "util_gpu_pct"}


# the commands whose output the parsers below read, under the names the lifecycle calls them by
sampler_argv = commands.gpu_sampler
snapshot_command = commands.gpu_snapshot
apps_command = commands.gpu_apps


@dataclass(frozen=True)
class GpuState:
    index: int
    uuid: str
    name: str
    mem_total_mib: float
    mem_used_mib: float


def _cell(text: str) -> float | str:
    text = text.strip()
    if text == "N/A" or (text.startswith("[") and text.endswith("]")):
        return math.nan
    m = _VALUE_UNIT.match(text)
    if m:
        return float(m.group(1))
    try:
        return float(text)
    except ValueError:
        return text


def parse_number(text: str) -> float:
    """A numeric cell (units allowed) as a float; NaN for `N/A`, `[…]` or anything else."""
    value = _cell(text)
    return value if isinstance(value, float) else math.nan


def _rows(text: str, n: int) -> list[list[str]]:
    return [cells for line in text.splitlines() if len(cells := line.split(", ")) == n]


def parse_snapshot(text: str) -> list[GpuState]:
    return [GpuState(int(float(c[0])), c[1].strip(), c[2].strip(), _cell(c[3]), _cell(c[4]))
            for c in _rows(text, len(SNAPSHOT_FIELDS)) if c[0].strip().isdigit()]


def parse_apps(text: str) -> list[dict]:
    return [{"gpu_uuid": c[0].strip(), "pid": int(c[1]), "process_name": c[2].strip(), "used_mib": _cell(c[3])}
            for c in _rows(text, len(APP_FIELDS)) if c[1].strip().isdigit()]


def read_query_csv(path: str | Path, fields: tuple[str, ...] | list[str] | None = None) -> pd.DataFrame:
    """A `--query-gpu` CSV → one column per field, numbers as floats, `N/A`/`[…]` as NaN.

    With a header (with or without units) the columns come from it; without one (`noheader`), from `fields`,
    the list the kit asked for. Lines with the wrong number of cells are skipped.
    """
    import pandas as pd

    columns, records = read_query_rows(path, fields)
    frame = pd.DataFrame(records, columns=columns)
    if "timestamp" in frame:
        frame["timestamp"] = pd.to_datetime(frame["timestamp"], format=TIMESTAMP_FORMAT, errors="coerce")
    return frame


def peak_memory_mib(path: str | Path) -> float | None:
    """The largest memory.used of a `--query-gpu` CSV (None without a sample of it): the run's peak, read
    without building a frame."""
    columns, records = read_query_rows(path)
    if "memory.used" not in columns:
        return None
    at = columns.index("memory.used")
    values = [v for row in records if isinstance(v := row[at], float) and not math.isnan(v)]
    return max(values) if values else None


def read_query_rows(path: str | Path, fields: tuple[str, ...] | list[str] | None = None
                    ) -> tuple[list[str], list[list[float | str]]]:
    """read_query_csv's columns and rows, as lists (see there)."""
    columns: list[str] | None = list(fields) if fields else None
    records = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            cells = line.rstrip("\n").split(", ")
            if _is_header(cells):
                columns = [_HEADER_UNIT.sub("", c).strip() for c in cells]
                continue
            if columns is None or len(cells) != len(columns):
                continue  # a prompt, an error message, or a line cut off when the sampler was stopped
            records.append([_cell(c) for c in cells])
    return columns or list(SAMPLER_FIELDS), records


def _is_header(cells: list[str]) -> bool:
    names = [_HEADER_UNIT.sub("", c).strip() for c in cells]
    return len(cells) > 1 and all(re.fullmatch(r"[a-z_]+(?:\.[a-z_]+)*", n) for n in names) and (
        "index" in names or "timestamp" in names or any(n.startswith(("memory.", "utilization.")) for n in names))


def tidy(frame: pd.DataFrame, run_id: str, t0: datetime | None) -> pd.DataFrame:
    """The telemetry.parquet rows of one run: t_s is seconds since the server was started (host clock)."""
    import pandas as pd

    out = frame.rename(columns=TIDY_COLUMNS)
    keep = [c for c in TIDY_COLUMNS.values() if c in out]
    out = out[["timestamp", *keep]].dropna(subset=["timestamp"]).copy()
    out.insert(0, "run_id", run_id)
    start = pd.Timestamp(t0) if t0 is not None else (out["timestamp"].min() if len(out) else pd.NaT)
    out.insert(1, "t_s", (out["timestamp"] - start).dt.total_seconds())
    out["gpu_index"] = out["gpu_index"].astype("int64")
    return out.drop(columns=["timestamp"]).reset_index(drop=True)
