"""The run directory: its layout, atomic writes, and finding run directories.

    <root>/<experiment>/<YYYYmmdd-HHMMSS>/
        experiment.yaml  manifest.json  runs.parquet  events.parquet  telemetry.parquet
        summary.ipynb  summary.html
        runs/<run_id>/   run_variant.ipynb  status.json  processes.json  server.log  nvidia-smi.csv
                         provenance.json  parsed.json

Raw files (server.log, nvidia-smi.csv) are written once and never edited; every other file can be rebuilt
from them with `launchlab report RUN_DIR`. Every write goes to a temporary file first and is renamed into
place, so a crash never leaves a half-written file behind.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from datetime import datetime
from pathlib import Path

import pandas as pd

from launchlab.errors import RunDirError

OUTPUTS_ENV = "LAUNCHLAB_OUTPUTS"
EXPERIMENT_FILE = "experiment.yaml"
MANIFEST = "manifest.json"
STATUS = "status.json"
PROCESSES = "processes.json"
PROVENANCE = "provenance.json"
PARSED = "parsed.json"
SERVER_LOG = "server.log"
TELEMETRY_CSV = "nvidia-smi.csv"
RUN_NOTEBOOK = "run_variant.ipynb"
SUMMARY_NOTEBOOK = "summary.ipynb"
SUMMARY_HTML = "summary.html"
VERDICT = "verdict.json"


def project_root(start: Path | None = None) -> Path | None:
    """The launchlab checkout containing `start` (default: the working directory), if any."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "params").is_dir() and (folder / "notebooks").is_dir():
            return folder
    return None


def default_root() -> Path:
    """Where run directories go: $LAUNCHLAB_OUTPUTS, else the checkout's outputs/, else ./outputs."""
    if os.environ.get(OUTPUTS_ENV):
        return Path(os.environ[OUTPUTS_ENV])
    root = project_root()
    return (root / "outputs") if root else Path("outputs")


def new_run_dir(root: Path, experiment: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = root / experiment
    base.mkdir(parents=True, exist_ok=True)
    path = base / stamp
    n = 2
    while True:
        try:
            path.mkdir()
            return path
        except FileExistsError:
            path = base / f"{stamp}-{n}"
            n += 1


def run_folder(run_dir: Path, run_id: str) -> Path:
    return Path(run_dir) / "runs" / run_id


ATTEMPTS = "attempts"


def archive_attempt(folder: Path) -> Path | None:
    """Move what an earlier attempt of a run left in its folder to attempts/<n>/ (raw files are never
    overwritten); return where, or None when the folder held nothing."""
    old = [p for p in folder.iterdir() if p.name != ATTEMPTS] if folder.is_dir() else []
    if not old:
        return None
    n = 1
    while (folder / ATTEMPTS / str(n)).exists():
        n += 1
    target = folder / ATTEMPTS / str(n)
    target.mkdir(parents=True)
    for path in old:
        path.rename(target / path.name)
    return target


def list_run_dirs(root: Path) -> list[dict]:
    """Every run directory under root, oldest first: experiment, date, runs done/planned, verdict headline."""
    rows = []
    for manifest_path in sorted(Path(root).glob(f"*/*/{MANIFEST}"), key=lambda p: p.stat().st_mtime):
        run_dir = manifest_path.parent
        try:
            manifest = read_json(manifest_path)
        except RunDirError:
            continue
        planned = manifest.get("run_ids") or []
        done = 0
        for run_id in planned:
            try:
                done += read_json(run_folder(run_dir, run_id) / STATUS).get("state") == "done"
            except RunDirError:
                pass
        rows.append({"path": str(run_dir), "experiment": manifest.get("experiment", "?"),
                     "created_at": manifest.get("created_at", "?"), "done": done, "planned": len(planned),
                     "headline": _headline(run_dir)})
    return rows


def _headline(run_dir: Path) -> str:
    try:
        v = read_json(run_dir / VERDICT)
    except RunDirError:
        return "no verdict yet (`launchlab report RUN_DIR`)"
    if not v.get("conclusive", True):
        return "INCONCLUSIVE: " + (v.get("inconclusive_reasons") or ["?"])[0][:120]
    control = "controlled" if v.get("controlled") else "NOT controlled"
    return f"{control}; decides the launch: {', '.join(v.get('outcome_factors') or []) or 'no factor'}"


def latest_run_dir(root: Path) -> Path:
    """The newest run directory (one holding a manifest) under root."""
    candidates = sorted(root.glob(f"*/*/{MANIFEST}"), key=lambda p: p.stat().st_mtime)
    if not candidates:
        raise RunDirError(f"no run directory under {root}: run `make demo` or `launchlab run PARAMS` first")
    return candidates[-1].parent


def check_run_dir(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    if not (run_dir / MANIFEST).is_file():
        raise RunDirError(f"{run_dir} is not a launchlab run directory (it has no {MANIFEST}); "
                          "pass the folder `launchlab run` printed")
    return run_dir


def write_text(path: Path, text: str) -> None:
    """Write a file atomically (temporary file, then rename). On a full disk, a small record that exists
    already (status.json) is rewritten in place instead — it fits in the block it holds — so a run can still
    be marked; anything else raises RunDirError saying what to do."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise _disk_error(path, exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; run directories are meant to be shared
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.errno in _FULL and path.is_file() and len(text.encode()) <= _IN_PLACE_MAX:
            try:
                with open(path, "r+", encoding="utf-8") as fh:
                    fh.write(text)
                    fh.truncate()
                return
            except OSError:
                pass
        raise _disk_error(path, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_FULL = (errno.ENOSPC, errno.EDQUOT)
_IN_PLACE_MAX = 4096  # one block: rewriting it in place needs no new space


def _disk_error(path: Path, exc: OSError) -> RunDirError:
    what = "the disk is full" if exc.errno in _FULL else exc.strerror or str(exc)
    return RunDirError(f"cannot write {path}: {what} ([Errno {exc.errno}]). Free space (or fix the folder's "
                       "permissions), then continue with `launchlab run PARAMS --resume RUN_DIR`")


def write_json(path: Path, obj: object) -> None:
    write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def update_json(path: Path, changes: dict) -> None:
    """Rewrite a JSON record with some keys changed (atomically, like every write)."""
    write_json(path, {**read_json(path), **changes})


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirError(f"{path} is missing") from None
    except ValueError as exc:
        raise RunDirError(f"{path} is not valid JSON ({exc}); rebuild it with `launchlab report`") from None


def write_frame(path: Path, frame: pd.DataFrame) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _disk_error(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
