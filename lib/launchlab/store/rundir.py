"""The run directory: every path of a run directory and of a run folder, and atomic writes (its manifest is in
manifest.py, finding run directories under a root in finding.py).

    <root>/<experiment>/<YYYYmmdd-HHMMSS>/              RunDir
        experiment.yaml  (imports.yaml)  manifest.json  runs.parquet  events.parquet  telemetry.parquet
        summary.ipynb  summary.html  verdict.json  report.md
        compare/<experiment>-<name>/                    CompareFolder (`launchlab compare` against that one)
            compare.json  compare.html
        runs/<run_id>/                                  RunFolder
            run_variant.ipynb  status.json  processes.json  provenance.json  parsed.json
            server.log  nvidia-smi.csv.gz  (server.node1.log  nvidia-smi.node1.csv.gz … for multi-node servers;
                nvidia-smi.csv while the run goes, and in run directories of earlier kits)
            nvidia-smi.txt  (an imported run's capture in nvidia-smi's default table format)
            attempts/<n>/   an earlier attempt of the run, kept whole

Raw files (server logs, nvidia-smi CSVs — kept gzip-compressed: byte for byte what the sampler wrote once
`zcat`-ed) are written once and never edited; every other file can be rebuilt
from them with `launchlab report RUN_DIR`. Every write goes to a temporary file first and is renamed into
place, so a crash never leaves a half-written file behind. No other module joins file names of a run
directory: they ask a RunDir or a RunFolder.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import shutil
import stat
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from launchlab import safefiles
from launchlab.errors import NotYours, RunDirError
from launchlab.fields import RUN_ID
from launchlab.store.manifest import Manifest

if TYPE_CHECKING:  # pandas costs the run kernel half a second; only the report writes frames
    import pandas as pd

FRAMES = ("runs", "events", "telemetry")


class RunFolder:
    """One run's folder: its raw files, the kit's records of it, and earlier attempts."""

    ATTEMPTS = "attempts"

    def __init__(self, path: Path):
        self.path = Path(path)
        safefiles.seal(self.path)  # the kit writes no link in it: it follows none there (safefiles.seal)

    @property
    def run_id(self) -> str:
        return self.path.name

    status = property(lambda self: self.path / "status.json")
    processes = property(lambda self: self.path / "processes.json")
    provenance = property(lambda self: self.path / "provenance.json")
    parsed = property(lambda self: self.path / "parsed.json")
    notebook = property(lambda self: self.path / "run_variant.ipynb")
    samples_table = property(lambda self: self.path / "nvidia-smi.txt")

    @staticmethod
    def log_name(node: int = 0) -> str:
        """The server log of a node (also its name in the run's folder on the host)."""
        return "server.log" if node == 0 else f"server.node{node}.log"

    @staticmethod
    def samples_name(node: int = 0) -> str:
        """The GPU trace of a node as the sampler writes it (also its name in the run's folder on the host)."""
        return "nvidia-smi.csv" if node == 0 else f"nvidia-smi.node{node}.csv"

    def log(self, node: int = 0) -> Path:
        return self.path / self.log_name(node)

    def live_samples(self, node: int = 0) -> Path:
        """The plain copy of a node's GPU trace mirrored while its run goes (what the live display reads)."""
        return self.path / self.samples_name(node)

    def kept_samples(self, node: int = 0) -> Path:
        """A node's GPU trace as the run folder keeps it once collected: gzip-compressed (telemetry.open_trace
        reads it), since a 5 ms trace is megabytes of nearly identical lines and gzip shrinks it 30-fold — a
        compressed copy of the raw CSV rather than a parquet of it, so it stays the sampler's bytes (zcat gives
        them back) and every tool that reads a CSV reads it."""
        return self.path / (self.samples_name(node) + ".gz")

    def samples(self, node: int = 0) -> Path:
        """A node's GPU trace to read: the kept .csv.gz, else a plain .csv (a run still going or cut short before
        its trace was collected, an import, a run directory of an earlier kit). The kept name when neither is
        there."""
        kept, plain = self.kept_samples(node), self.live_samples(node)
        return plain if plain.exists() and not kept.exists() else kept

    def keep_samples(self, node: int = 0) -> None:
        """The plain trace of a node compressed into its kept name (same mode; the same bytes for the same trace:
        no name or time in the gzip header), then the plain one removed. OSError (a full disk) leaves the plain
        one, which is read as well."""
        plain, kept = self.live_samples(node), self.kept_samples(node)
        with safefiles.replacing(kept, mode=plain.stat().st_mode & 0o777) as tmp, \
                safefiles.open_regular(plain, follow_symlinks=False) as src, safefiles.create(tmp) as out, \
                gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        plain.unlink()

    def archive_attempt(self) -> Path | None:
        """Move what an earlier attempt left here to attempts/<n>/ (raw files are never overwritten); return
        where, or None when the folder held nothing. Done by descriptor in the run folder, which must be this
        user's: a name in it is moved, never followed."""
        old = [name for name, _ in safefiles.entries(self.path) if name != self.ATTEMPTS]
        if not old:
            return None
        with _checked(self.path), safefiles.folder(self.path, mine=True) as fd:
            if not any(name == self.ATTEMPTS for name, _ in safefiles.entries(self.path)):
                os.mkdir(self.ATTEMPTS, 0o755, dir_fd=fd)
            taken = {name for name, _ in safefiles.entries(self.path / self.ATTEMPTS)}
            n = 1
            while str(n) in taken:
                n += 1
            os.mkdir(f"{self.ATTEMPTS}/{n}", 0o755, dir_fd=fd)
            for name in old:
                os.rename(name, f"{self.ATTEMPTS}/{n}/{name}", src_dir_fd=fd, dst_dir_fd=fd)
        return self.path / self.ATTEMPTS / str(n)


class CompareFolder:
    """What `launchlab compare` writes: compare.json (the typed record, comparerecord.BeforeAfter) and compare.html."""

    def __init__(self, path: Path):
        self.path = Path(path)

    record = property(lambda self: self.path / "compare.json")
    page = property(lambda self: self.path / "compare.html")


class RunDir:
    """A run directory: its files, its manifest, its run folders."""

    def __init__(self, path: Path):
        self.path = Path(path)
        safefiles.seal(self.path)  # the kit writes no link in it: it follows none there (safefiles.seal)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def name(self) -> str:
        return self.path.name

    experiment_file = property(lambda self: self.path / "experiment.yaml")
    imports_file = property(lambda self: self.path / "imports.yaml")  # `launchlab import`: the file, masked
    manifest_file = property(lambda self: self.path / "manifest.json")
    summary_notebook = property(lambda self: self.path / "summary.ipynb")
    summary_html = property(lambda self: self.path / "summary.html")
    verdict_file = property(lambda self: self.path / "verdict.json")
    report_md = property(lambda self: self.path / "report.md")
    thresholds_frame = property(lambda self: self.path / "thresholds.parquet")  # a threshold search's result

    def frame(self, name: str) -> Path:
        """runs.parquet, events.parquet or telemetry.parquet."""
        if name not in FRAMES:
            raise ValueError(name)
        return self.path / f"{name}.parquet"

    def run(self, run_id: str) -> RunFolder:
        if problem := RUN_ID.problem("run id", run_id):
            raise RunDirError(f"{self.path}: {problem}")
        return RunFolder(self.path / "runs" / run_id)

    def comparison(self, before: RunDir) -> CompareFolder:
        """Where `launchlab compare BEFORE THIS` writes by default: compare/<experiment>-<name> of the before run
        directory, in this (the after) one — derived, like summary.html, and rebuilt by the next compare."""
        return CompareFolder(self.path / "compare" / f"{before.path.parent.name}-{before.name}")

    def share_mode(self) -> int:
        """What the kit writes from this run directory may be read by: 0644, or less (rundir.derived_mode)."""
        return derived_mode(self.verdict_file)

    def run_folders(self) -> list[RunFolder]:
        """Every run folder there is now, in no particular order."""
        runs = self.path / "runs"
        return [RunFolder(runs / name) for name, st in safefiles.entries(runs) if stat.S_ISDIR(st.st_mode)]

    def manifest(self) -> Manifest:
        return Manifest.from_json(read_json(self.manifest_file), self.manifest_file)

    def write_manifest(self, manifest: Manifest) -> None:
        write_json(self.manifest_file, manifest.to_json())

    def update_manifest(self, **changes) -> Manifest:
        """The manifest with some fields changed, written back (a field that is not one is a TypeError)."""
        manifest = self.manifest()
        for name, value in changes.items():
            if not hasattr(manifest, name):
                raise TypeError(f"Manifest has no field {name!r}")
            setattr(manifest, name, value)
        self.write_manifest(manifest)
        return manifest

    @classmethod
    def check(cls, path: str | Path) -> RunDir:
        """An existing run directory (absolute), or RunDirError saying what to pass instead. It is reached through no
        link another user made (safefiles), and its manifest.json is a regular file, not a link."""
        try:
            with safefiles.folder(path):
                pass
        except OSError as exc:
            raise RunDirError(f"{path} cannot be used as a run directory: {exc.strerror or exc}; pass the folder "
                              "`launchlab run` printed") from None
        run_dir = cls(Path(path).resolve())
        found = safefiles.lstat(run_dir.manifest_file)
        if found is None or not stat.S_ISREG(found.st_mode):
            raise RunDirError(f"{path} is not a launchlab run directory (it has no manifest.json); "
                              "pass the folder `launchlab run` printed")
        return run_dir

    @classmethod
    def create(cls, root: Path, experiment: str) -> RunDir:
        """A new, empty run directory <root>/<experiment>/<timestamp> (a suffix when the second is taken). The
        outputs root may be shared; the experiment folder must be this user's and writable by no one else (another
        user could swap the run directory made in it mid-batch), and neither is reached through another's link."""
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        base = Path(root) / experiment
        try:
            with safefiles.folder(root, create=True):
                pass
            with safefiles.folder(base, create=True, mode=0o755) as fd:
                _check_experiment_folder(base, os.fstat(fd))
                name, n = stamp, 2
                while True:
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                        return cls((base / name).resolve())
                    except FileExistsError:
                        name, n = f"{stamp}-{n}", n + 1
        except OSError as exc:
            raise RunDirError(f"cannot make a run directory in {base}: {exc.strerror or exc}; pass --out DIR, a "
                              "folder of your own") from None


def _check_experiment_folder(base: Path, st: os.stat_result) -> None:
    if st.st_uid != os.getuid():
        raise RunDirError(f"{base} belongs to {safefiles._user(st.st_uid)}, not to you: a run directory made in "
                          "another user's experiment folder is theirs to swap or read mid-batch. Pass --out DIR, a "
                          "folder of your own (or another experiment name)")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise RunDirError(f"{base} is writable by other users (mode {stat.filemode(st.st_mode)}): they could swap "
                          f"a run directory made in it mid-batch; `chmod go-w {base}`, or pass --out DIR")


def make_folder(path: Path) -> Path:
    """A folder of a run directory (a run's folder, a comparison's), made 0755 where missing, only inside folders of
    this user's own and through no link (safefiles.folder); RunDirError when it cannot be."""
    with _checked(path):
        return safefiles.make_folders(path, mode=0o755)


class _checked:
    """OSError and NotYours of a run directory's file operations as RunDirError naming the path."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> None:
        if isinstance(exc, NotYours):
            raise RunDirError(str(exc)) from None
        if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError):
            raise _disk_error(Path(self.path), exc) from None


# ---------------------------------------------------------------------------------------------------------
# Writes and reads (safefiles: whole files renamed into place, in folders of this user's own; no link followed that
# another user made; every read bounded)

MAX_JSON_BYTES = 64 * 2**20  # a record of a run directory (provenance with every package, a search's manifest)


RAW_FILE = re.compile(r"server(?:\.node\d+)?\.log|nvidia-smi(?:\.node\d+)?\.(?:csv(?:\.gz)?|txt)")


def derived_mode(path: Path, mode: int = 0o644) -> int:
    """The mode of a file the kit writes at `path` from a run directory's raw files: `mode`, no more readable than
    the least readable of them (an imported 0600 log makes its parsed.json, the frames, verdict.json, report.md
    and summary.html 0600 too) — a run folder's own for a file in it, every run's for the run directory's. A path
    outside any run directory keeps `mode`."""
    folder = Path(path).parent
    if folder.parent.name == "runs":  # a run's folder: its own raw files
        root, folders = folder.parent.parent, [folder]
    else:  # the run directory's own files, a comparison's (compare/<name>/ in it): every run's
        root = folder.parent.parent if folder.parent.name == "compare" else folder
        if safefiles.lstat(root / "runs") is None and safefiles.lstat(root / "manifest.json") is None:
            return mode
        folders = [f.path for f in RunDir(root).run_folders()]
    modes = [st.st_mode for f in folders for name, st in safefiles.entries(f)
             if RAW_FILE.fullmatch(name) and stat.S_ISREG(st.st_mode)]
    if (imports := safefiles.lstat(root / "imports.yaml")) is not None:
        modes.append(imports.st_mode)
    return safefiles.private_mode(*modes, mode=mode)


def write_text(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Write a file whole (an unnamed file, named when complete: safefiles.replacing), `mode` or less where the
    run directory's raw files are less readable (derived_mode). On a full disk, a small record that exists already
    (status.json) is rewritten in place instead — it fits in the block it holds — so a run can still be marked;
    anything else raises RunDirError saying what to do."""
    path = Path(path)
    data = text.encode("utf-8")
    try:
        safefiles.make_folders(path.parent, mode=0o755)
        with safefiles.replacing(path, mode=derived_mode(path, mode)) as tmp, open(tmp, "wb") as fh:
            fh.write(data)
    except NotYours as exc:
        raise RunDirError(str(exc)) from None
    except OSError as exc:
        if not (exc.errno in _FULL and len(data) <= _IN_PLACE_MAX and _rewritten_in_place(path, data)):
            raise _disk_error(path, exc) from None


def _rewritten_in_place(path: Path, data: bytes) -> bool:
    """`data` over the regular file `path` (opened by descriptor in a folder of this user's, not through a link)."""
    try:
        with safefiles.folder(path.parent, mine=True) as fd:
            out = os.open(path.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        with os.fdopen(out, "wb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return False
            fh.write(data)
            fh.truncate()
        return True
    except (OSError, NotYours):
        return False


_FULL = (errno.ENOSPC, errno.EDQUOT)
_IN_PLACE_MAX = 4096  # one block: rewriting it in place needs no new space


def _disk_error(path: Path, exc: OSError) -> RunDirError:
    what = "the disk is full" if exc.errno in _FULL else exc.strerror or str(exc)
    return RunDirError(f"cannot write {path}: {what} ([Errno {exc.errno}]). Free space (or fix the folder's "
                       "permissions), then continue with `launchlab run PARAMS --resume RUN_DIR`")


def write_json(path: Path, obj: object, *, mode: int = 0o644) -> None:
    # one line, no indentation: run directories travel (the examples ride along to the GPU machine within 64 MiB,
    # and indentation was a fifth of their records); `python -m json.tool FILE` shows one indented
    write_text(path, json.dumps(obj, separators=(",", ":"), default=str) + "\n", mode=mode)


def update_json(path: Path, changes: dict) -> None:
    """Rewrite a JSON record with some keys changed (atomically, like every write)."""
    write_json(path, {**read_json(path), **changes})


def read_bytes(path: Path, *, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """A file of a run directory, which others may have written: a regular file (not a FIFO, folder or device),
    reached through no link another user made, at most max_bytes; RunDirError naming it and why otherwise
    (FileNotFoundError when it is not there)."""
    try:
        return safefiles.read_bytes(path, max_bytes=max_bytes)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise RunDirError(f"{path} cannot be read: {exc.strerror or exc}; it was not written by this kit — "
                          "`launchlab report RUN_DIR` writes it again, or remove it") from None


def read_text(path: Path, *, max_bytes: int = MAX_JSON_BYTES) -> str:
    """read_bytes() as text (undecodable bytes replaced)."""
    return read_bytes(path, max_bytes=max_bytes).decode("utf-8", errors="replace")


def read_json(path: Path, *, expect: type = dict, max_bytes: int = MAX_JSON_BYTES) -> dict:
    """A JSON file of a run directory, which must hold what the kit writes there: an object (a list for
    processes.json) — a run directory others wrote is untrusted input (read as read_bytes reads it); RunDirError
    naming the file otherwise."""
    try:
        data = json.loads(read_bytes(path, max_bytes=max_bytes).decode("utf-8"))
    except FileNotFoundError:
        raise RunDirError(f"{path} is missing") from None
    except (ValueError, RecursionError) as exc:
        raise RunDirError(f"{path} is not valid JSON ({str(exc)[:200]}); rebuild it with `launchlab report`") from None
    if not isinstance(data, expect):
        raise RunDirError(f"{path} holds a JSON {type(data).__name__} where the kit writes a "
                          f"{'list' if expect is list else 'JSON object'}: it was not written by this kit")
    return data


def write_frame(path: Path, frame: pd.DataFrame, *, mode: int = 0o644) -> None:
    """A frame as parquet: zstd (40 % smaller than snappy on a GPU trace), and without pandas' own schema metadata —
    a JSON copy of every column's description, about 6 KB of a runs.parquet's 13 (the tidy frames' plain columns,
    strings, numbers and booleans, read back the same without it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    table = pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)
    with _checked(path), safefiles.replacing(path, mode=derived_mode(path, mode)) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_frame(path: Path, columns: list[str] | None = None, *, max_rows: int | None = None,
               thin: tuple[str, str] | None = None) -> pd.DataFrame:
    """A frame of a run directory (runs.parquet …), opened as read_bytes opens files; RunDirError when it cannot be
    read as one. Its rows are counted from the parquet metadata before anything is read: past `max_rows`, a frame is
    refused, naming the file (a few bytes can hold millions of identical rows) — or, with `thin` (its GPU-index and
    memory column), read batch by batch and kept thinned to `max_rows` (telemetry.Thinner; `attrs` say so)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with safefiles.open_regular(path, max_bytes=MAX_FRAME_BYTES) as fh:
            table = pq.ParquetFile(fh)
            rows = table.metadata.num_rows
            if max_rows is None or rows <= max_rows:
                return table.read(columns=columns).to_pandas()
            group = max(table.metadata.row_group(i).num_rows for i in range(table.metadata.num_row_groups))
            if thin is None or group > MAX_ROW_GROUP:  # a row group is decoded whole, however few rows are kept
                raise RunDirError(f"{path} holds {rows:,} rows (row groups of up to {group:,}), more than the kit "
                                  f"reads of it ({max_rows:,}; row groups of {MAX_ROW_GROUP:,}: docs/reference/"
                                  "bounds.md): not a frame of a run the kit made; `launchlab report RUN_DIR` writes it "
                                  "again from the runs' raw files")
            return _thinned(table, columns, max_rows, thin)
    except pa.ArrowException as exc:  # cut short, or not parquet at all: the file named, never a traceback
        raise RunDirError(f"{path} is not a whole parquet file ({str(exc)[:160]}): `launchlab report RUN_DIR` "
                          "writes it again from the runs' raw files") from None
    except FileNotFoundError:
        raise RunDirError(f"{path} is missing: `launchlab report RUN_DIR` writes it") from None
    except OSError as exc:
        raise RunDirError(f"{path} cannot be read: {exc.strerror or exc}; `launchlab report RUN_DIR` writes it "
                          "again") from None


def _thinned(table, columns: list[str] | None, max_rows: int, thin: tuple[str, str]) -> pd.DataFrame:
    """A parquet file's rows read in batches of 65,536, kept thinned to `max_rows` per GPU (thin: the GPU-index and
    memory columns)."""
    from launchlab.gpu import telemetry

    kept = telemetry.Thinner(max_rows, key=thin[0], peak=thin[1])
    for batch in table.iter_batches(batch_size=65_536, columns=columns):
        kept.add(batch.to_pandas())
    return kept.frame(columns or table.schema_arrow.names)


# the rows of each frame the kit reads at most (counted before reading; telemetry's: frames.MAX_TELEMETRY_ROWS, kept
# thinned): 200 runs are 200 rows of runs.parquet and some 100,000 of events.parquet
MAX_FRAME_ROWS = {"runs": 100_000, "events": 10_000_000}
MAX_ROW_GROUP = 2**20  # pyarrow's own row group when the kit writes a frame: one larger is no frame the kit wrote
MAX_FRAME_BYTES = 4 * 2**30  # a frame of a large search's telemetry; past it, not one the kit wrote
