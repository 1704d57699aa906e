"""Finding run directories under an outputs root: where they go (default_root), the newest (latest), the newest
whose batch finished and why newer ones were passed over (newest_finished, for a summary with no run directory
named), every one (found, for `launchlab ls`) and how far each batch got (progress)."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from launchlab import config, safefiles
from launchlab.errors import RunDirError
from launchlab.store.manifest import Manifest
from launchlab.store.rundir import RunDir, read_json


def project_root(start: Path | None = None) -> Path | None:
    """The launchlab workspace or checkout (a folder holding params/ and notebooks/) containing `start`
    (default: the working directory), if any."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "params").is_dir() and (folder / "notebooks").is_dir():
            return folder
    return None


def default_root() -> Path:
    """Where run directories go: $LAUNCHLAB_OUTPUTS, else the checkout's outputs/, else ./outputs."""
    if (root := config.outputs_root()) is not None:
        return root
    checkout = project_root()
    return (checkout / "outputs") if checkout else Path("outputs")


def latest(root: Path) -> RunDir:
    """The newest run directory (one holding a manifest) under root."""
    candidates = [path for _, path in _manifests(root)]
    if not candidates:
        raise RunDirError(f"no run directory under {root}: run `make demo` or `launchlab run PARAMS` first")
    return RunDir(candidates[-1].parent.resolve())


@dataclass(frozen=True)
class Chosen:
    """The run directory a summary shows by default (`newest_finished`), and why the newer ones were passed over."""

    run_dir: RunDir
    finished: bool  # False: no batch under the root finished, and run_dir is the newest of all
    skipped: list[str]  # each newer run directory passed over: `<experiment>/<time>: why`
    why_not: str = ""  # finished=False: why run_dir is no finished batch either


def newest_finished(root: Path) -> Chosen:
    """The newest run directory under root whose batch finished — a batch's, not one run of run_variant.ipynb's,
    with every planned run's final status — and why each newer one was passed over; where none finished, the
    newest of all (finished=False), so a summary still shows what there is and can say why it is not a verdict."""
    newest = latest(root)  # raises, saying how to make one, when there is none at all
    skipped = []
    for _, manifest_path in reversed(_manifests(root)):
        run_dir = RunDir(manifest_path.parent.resolve())
        try:
            row, manifest = progress(run_dir), run_dir.manifest()
        except RunDirError as exc:
            skipped.append(f"{_short(run_dir)}: unreadable ({exc})")
            continue
        if manifest.single_run:
            skipped.append(f"{_short(run_dir)}: one run of run_variant.ipynb ({row.done} of {row.planned} "
                           "planned runs), not a batch")
        elif not row.finished:
            skipped.append(f"{_short(run_dir)}: its batch did not finish ({row.done} of {row.planned} "
                           "planned runs have a final status; `launchlab run PARAMS --resume RUN_DIR` finishes it)")
        else:
            return Chosen(run_dir, True, skipped)
    # none finished: the newest (the first passed over) is shown, said with why it is no finished batch either
    return Chosen(newest, False, skipped[1:], why_not=skipped[0].split(": ", 1)[1] if skipped else "")


def _short(run_dir: RunDir) -> str:
    return f"{run_dir.path.parent.name}/{run_dir.path.name}"


def found(root: Path) -> list[RunDir]:
    """Every run directory under root, oldest first, its manifest.json a regular file or something else that is no
    link (a FIFO, a folder: for `launchlab ls` to name, reporting/runindex.py)."""
    return [RunDir(path.parent) for _, path in _manifests(root, any_kind=True)]


def _manifests(root: Path, *, any_kind: bool = False) -> list[tuple[float, Path]]:
    """(mtime, path) of every <experiment>/<time>/manifest.json under root, oldest first: folders and files as they
    are (safefiles.entries: no link followed); one that is no regular file only with any_kind (for `ls` to name)."""
    found = []
    for experiment, st in safefiles.entries(root):
        if not stat.S_ISDIR(st.st_mode):
            continue
        for name, st in safefiles.entries(Path(root) / experiment):
            manifest = Path(root) / experiment / name / "manifest.json"
            if stat.S_ISDIR(st.st_mode) and (m := safefiles.lstat(manifest)) is not None and \
                    (stat.S_ISREG(m.st_mode) or any_kind and not stat.S_ISLNK(m.st_mode)):
                found.append((m.st_mtime, manifest))
    return sorted(found, key=lambda pair: pair[0])


LISTED_BYTES = 4 * 2**20  # what `launchlab ls` reads of one record (a manifest, a status, a verdict) at most


@dataclass(frozen=True)
class Progress:
    """How far a run directory's batch got: its manifest, and how many of its planned runs have a final status."""

    manifest: Manifest
    done: int
    planned: int

    @property
    def finished(self) -> bool:
        return bool(self.planned) and self.done >= self.planned


def progress(run_dir: RunDir) -> Progress:
    """The run directory's Progress, every record read within LISTED_BYTES (it may be someone else's); RunDirError
    where its manifest cannot be read as the kit writes it."""
    manifest = Manifest.from_json(read_json(run_dir.manifest_file, max_bytes=LISTED_BYTES), run_dir.manifest_file)
    done = 0
    for run_id in manifest.run_ids:
        try:
            status = read_json(run_dir.run(run_id).status, max_bytes=LISTED_BYTES)
        except RunDirError:
            continue  # not run yet (or unreadable: not done)
        done += isinstance(status, dict) and status.get("state") == "done"
    return Progress(manifest, done, len(manifest.run_ids))
