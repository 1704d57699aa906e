"""A run directory's manifest (manifest.json): the plan a batch made — each run (ManifestEntry), the warm-ups, a
threshold search's spec (ManifestSearch) — and how to resume it. A value of the store: RunDir reads and writes it."""

from __future__ import annotations

import os
import shlex
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from launchlab.errors import RunDirError
from launchlab.fields import RUN_ID


@dataclass(frozen=True)
class ManifestEntry:
    """One run as the manifest lists it (records.Run.manifest_entry, an imported run): its id, place in the plan
    (seq), variant and levels, repetition and host; a search's probe also its stratum and why it was chosen."""

    run_id: str
    seq: int
    variant: str
    levels: dict[str, str]
    repetition: int
    host: str
    stratum: str | None = None  # a probe of a threshold search: the combination of the other factors' levels
    why: str | None = None  # … and why the search chose its value
    warmup: bool = False  # a warm-up launch of the baseline (`warmup:`), never compared
    imported: bool = False  # made by `launchlab import` from a log run by hand

    @classmethod
    def from_json(cls, data: dict, path: Path | str = "manifest.json") -> ManifestEntry:
        from launchlab.store import jsontypes  # a sibling module that imports nothing of the store

        return cls(**jsontypes.checked(cls, data, path))

    def to_json(self) -> dict:
        """The entry as manifest.json holds it: a key only where it says something (a probe's stratum and why, a
        warm-up, an imported run), as the kit always wrote it."""
        entry = {"run_id": self.run_id, "seq": self.seq, "variant": self.variant, "levels": self.levels,
                 "repetition": self.repetition, "host": self.host}
        if self.stratum is not None:
            entry.update({"stratum": self.stratum, "why": self.why})
        if self.warmup:
            entry["warmup"] = True
        if self.imported:
            entry["imported"] = True
        return entry


def _check_run_ids(manifest: Manifest, path: Path | str) -> None:
    """A manifest read back is untrusted (a shared outputs/): its run ids must be a list of plain names, each a folder
    under runs/ — never a path (`/abs`, `../x`) that would make the report read or write elsewhere."""
    where = {"run_ids": manifest.run_ids, "runs": [e.run_id for e in manifest.runs],
             "warmup_runs": [e.run_id for e in manifest.warmup_runs]}
    if not isinstance(manifest.run_ids, list):
        raise RunDirError(f"{path}: `run_ids` must be a list of run ids, not a {type(manifest.run_ids).__name__}")
    for key, ids in where.items():
        for i, run_id in enumerate(ids):
            if problem := RUN_ID.problem("run id", run_id):
                raise RunDirError(f"{path}: {key}[{i}]: {problem}")


@dataclass(frozen=True)
class ManifestSearch:
    """A threshold search as the manifest records it: the params' `search:` (params/searchspec.py SearchSpec),
    which a resumed batch must be given again."""

    flag: str
    low: str
    high: str
    resolution: str
    outcome: str = "ready"
    repetitions: int = 1
    predicted: str | None = None  # a break-even given before any probe (a diagnosed log's)

    @classmethod
    def from_json(cls, data: dict) -> ManifestSearch:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_json(self) -> dict:
        """The search as manifest.json holds it: `predicted` only where one was given (older manifests lack it)."""
        data = asdict(self)
        if self.predicted is None:
            del data["predicted"]
        return data


@dataclass
class Manifest:
    """manifest.json: what a batch (or `launchlab import`) set out to do — the experiment, its factors and
    baseline, the compared runs in plan order, and who runs it now. Written when the run directory is made;
    a search appends its probes (`run_ids`, `runs`) and a batch names itself (`batch`, `sim_box`)."""

    experiment: str
    baseline: str  # the baseline variant's name
    factors: dict[str, list[str]]
    host: str
    run_ids: list[str]  # the compared runs, in plan order; warm-ups apart (never an observation)
    hosts: list[str] = field(default_factory=list)
    question: str | None = None
    created_at: str | None = None
    kit_version: str | None = None
    simulated: bool = False
    order: str = "interleaved"  # interleaved | search | imported (as listed)
    search: ManifestSearch | None = None  # the params' `search:` of a threshold search
    strata: list[str] | None = None  # a search's strata (variant names of the other factors)
    repetitions: int | None = None  # a fixed plan's, as the batch ran it (--repetitions overrides the file's)
    runs: list[ManifestEntry] = field(default_factory=list)  # each compared run (a probe with its stratum and why)
    warmup_runs: list[ManifestEntry] = field(default_factory=list)
    imported: bool = False  # made by `launchlab import` from logs run by hand
    # the params file the batch was run from, relative to the run directory (an older kit's: absolute) — never a
    # path of the disk that made it, in a run directory that travels (params_path resolves it)
    params_file: str | None = None
    params_sha256: str | None = None
    imports_file: str | None = None
    imports_sha256: str | None = None
    batch: str | None = None  # the batch running it now (its lock owner id)
    sim_box: str | None = None  # the simulated machine of that batch
    # made by run_variant.ipynb for its own one run (papermill or JupyterLab, no batch): the rest of the plan is
    # listed but was never meant to run here
    single_run: bool = False
    # why the batch stopped before its plan ended, where something said so (the kit: what interrupted it, and when;
    # cleared when a batch resumes it): `launchlab ls` says it beside the runs that ended
    stopped: str | None = None

    def resume_command(self, run_dir: Path | str, *, shared: bool = False) -> str:
        """`launchlab run PARAMS --resume RUN_DIR`, with the options that give the plan the batch was made with (the
        levels it was narrowed to, its repetitions): --resume refuses another plan. PARAMS is the file the batch
        was run from, where the manifest names one. The one command every listing and report prints. `shared`
        (a report, made to be passed on): both paths said from the folder that holds them both (the workspace:
        `params/x.yaml`, `outputs/x/<date>`), so a report does not carry where that folder lay on the disk of
        whoever rendered it; absolute where they share no folder but the root."""
        again: list[str] = []
        if self.search is None and self.runs:
            ran = {factor: {e.levels.get(factor) for e in self.runs} for factor in self.factors}
            only = [f"{factor}={level}" for factor, levels in self.factors.items()
                    for level in levels if ran[factor] < set(levels) and level in ran[factor]]
            again += ["--only", *only] if only else []
        if self.search is None and self.repetitions:
            again += ["--repetitions", str(self.repetitions)]
        params, folder = self.params_path(run_dir) or "PARAMS", os.path.abspath(run_dir)
        if shared and self.params_file:
            params, folder = _from_common_folder(params, folder)
        return shlex.join(["launchlab", "run", params, "--resume", folder, *again])

    def params_path(self, run_dir: Path | str) -> str | None:
        """The params file the batch was run from, as an absolute path (params_file is relative to the run
        directory; an older kit's manifest holds it absolute)."""
        if not self.params_file:
            return None
        return os.path.normpath(os.path.join(os.path.abspath(run_dir), self.params_file))

    def resume_relative(self, run_dir: Path | str) -> bool:
        """Whether a shared resume_command says its paths from the folder that holds them both (it then runs from
        there, not from wherever the reader is), rather than absolute."""
        return bool(self.params_file) and not os.path.isabs(
            _from_common_folder(self.params_path(run_dir), os.path.abspath(run_dir))[0])

    @classmethod
    def from_json(cls, data: dict, path: Path | str = "manifest.json") -> Manifest:
        """A manifest read back; keys a newer kit added are ignored, a missing required one is a RunDirError."""
        if not isinstance(data, dict):
            raise RunDirError(f"{path} is not a launchlab manifest (a JSON {type(data).__name__}, not an object)")
        known = {f.name for f in fields(cls)}
        try:
            manifest = cls(**{k: v for k, v in data.items() if k in known})
        except TypeError as exc:
            raise RunDirError(f"{path} is not a launchlab manifest ({exc})") from None
        manifest.hosts = manifest.hosts or [manifest.host]
        try:
            manifest.runs = [ManifestEntry.from_json(e) for e in manifest.runs or []]
            manifest.warmup_runs = [ManifestEntry.from_json(e) for e in manifest.warmup_runs or []]
            manifest.search = ManifestSearch.from_json(manifest.search) if manifest.search else None
        except (TypeError, AttributeError) as exc:
            raise RunDirError(f"{path} is not a launchlab manifest ({exc})") from None
        _check_run_ids(manifest, path)
        return manifest

    def to_json(self) -> dict:
        """manifest.json, with the keys the kit always wrote."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(runs=[e.to_json() for e in self.runs], warmup_runs=[e.to_json() for e in self.warmup_runs],
                    search=self.search.to_json() if self.search else None)
        return data

    def listed(self, run_id: str) -> ManifestEntry:
        """A run as the manifest lists it (Run.manifest_entry), warm-ups included; "" is the first in plan order
        (the warm-ups come first). RunDirError when it lists no such run."""
        entries = [*self.warmup_runs, *self.runs]
        found = next((e for e in entries if e.run_id == run_id), None) if run_id else next(iter(entries), None)
        if found is None:
            known = ", ".join(e.run_id for e in entries) or "none yet"
            raise RunDirError(f"run id {run_id!r} is not in the run directory's manifest (runs: {known}); pass one "
                              "of those, or an empty run_id for the first (a run directory made by an older kit lists "
                              "them once resumed: `launchlab run PARAMS --resume RUN_DIR`)")
        return found


def _from_common_folder(*paths: str) -> list[str]:
    """`paths` relative to the deepest folder that holds them all, unless that is the file system's root."""
    absolute = [os.path.abspath(p) for p in paths]
    common = os.path.commonpath(absolute)
    if os.path.dirname(common) == common:  # the root: nothing shared worth leaving out
        return absolute
    return [os.path.relpath(p, common) for p in absolute]
