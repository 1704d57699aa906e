"""`launchlab import IMPORTS`: runs made by hand (a folder of server logs, maybe nvidia-smi captures) become a
run directory with the full report — the same frames → verdict → summary path as `launchlab report`.

    experiment: seed-by-hand
    question: …
    server: {kind: sglang}            # or auto: detected from each log
    factors: {…}                      # the same factor/level declarations as a params file
    baseline: {…}
    secrets: [DB_URL]                 # optional, as in a params file
    runs:
      - {levels: {…}, log: logs/a.log, smi: logs/a-smi.csv, command: "python3 -m sglang.launch_server …"}

Paths are relative to the imports file. Every file is read and checked before anything is written: a file
that cannot be read, a level no factor declares, a log of another server kind is named with the reason and
the run directory is not created. The files are copied (secrets masked in the copy, as a launched run's
collected log is), never edited. The kit did not watch these runs, so their records say `imported` and leave
what only watching shows (preflight GPU state, installed files, environment, startup time) unset; the outcome
is read from the log alone: its ready line, its failure, or unknown.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import shutil
from datetime import datetime
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from launchlab import __version__, logparse, masking, params, safefiles
from launchlab.errors import ImportFailed, ParamsError, ParseError
from launchlab.gpu import smitext, telemetry
from launchlab.logparse.kinds import KINDS
from launchlab.params import yamlfile
from launchlab.store import finding, records, rundir
from launchlab.store.manifest import Manifest, ManifestEntry
from launchlab.verdicts import levelchecks

HOST = "imported"
MAX_FILE_BYTES = 2**30  # an imported log or capture: a launch's log is MBs; a file larger is most likely not one
NOT_OBSERVED = ("preflight GPU state", "installed files and package versions", "environment", "startup time")
# how the phase a log ends in reads in "unknown: the log ends during …"
PHASE_WORDS = {"startup": "startup (before distributed init)", "dist_init": "distributed init",
               "weights": "weight loading", "kv_cache": "KV-cache sizing", "cuda_graph": "CUDA-graph capture",
               "warmup": "warm-up", "http": "HTTP server start (before the ready line)", "ready": "ready"}


class ImportedRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    levels: dict[str, str]
    log: str
    smi: str | None = None
    command: str | list[str] | None = None
    # the server's version as the user knows it (pip show, the image tag): most logs never print it, and a version
    # difference between hand-made runs is the first thing to rule out; a version the log states wins
    version: str | None = None


class ImportedServer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = "auto"  # a server kind (logparse/kinds.py) or auto: detected from the logs
    ready_pattern: str | None = None  # for kinds whose logs have no standard ready line


class ImportsFile(BaseModel):
    """An imports file: a params file's experiment, question, server kind, factors and baseline, and the runs."""

    model_config = ConfigDict(extra="forbid")

    experiment: str
    question: str = ""
    server: ImportedServer = ImportedServer()
    factors: dict[str, dict] = {}
    baseline: dict[str, str] | None = None
    secrets: list[str] = []
    runs: list[ImportedRun] = Field(min_length=1)


@dataclasses.dataclass
class Source:
    """One run's files as found, checked before anything is written."""

    n: int
    entry: ImportedRun
    log: Path  # the file itself (links resolved, once checked)
    smi: Path | None
    kind: str | None = None


def _read_file(path: Path) -> tuple[ImportsFile, str]:
    try:  # bounded, and a FIFO or device refused at once (an imports file is short hand-written YAML, as params are)
        with safefiles.open_regular(path, max_bytes=yamlfile.MAX_FILE_BYTES) as fh:
            text = fh.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ParamsError(str(path), [f"cannot read the imports file: {getattr(exc, 'strerror', None) or exc}"]) from None
    try:
        data, surprises = yamlfile.load_strict(text)
    except yaml.YAMLError as exc:
        raise ParamsError(str(path), [f"not valid YAML: {exc}"]) from None
    problems = [f"line {p.line}: {p.message}" for p in surprises]
    try:
        imports = ImportsFile.model_validate(data)
    except ValidationError as exc:
        problems += [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    if problems:
        raise ParamsError(str(path), problems)
    return imports, text


def _check_sources(imports: ImportsFile, base: Path, follow_symlinks: bool) -> list[Source]:
    """Every run's files regular, readable and within MAX_FILE_BYTES, or ImportFailed naming each one that is not
    and why. A link leading out of the imports file's folder is refused unless follow_symlinks: a shared folder of
    logs could hold a link to someone's private file, which the import would copy into a report."""
    sources, problems = [], []
    for n, entry in enumerate(imports.runs, 1):
        found = {}
        for what, name in (("log", entry.log), ("smi", entry.smi)):
            if name is None:
                continue
            try:
                found[what] = _source_file(base, name, follow_symlinks)
            except OSError as exc:
                problems.append(f"run {n} ({what}: {base / name}): {exc.strerror or exc}")
        sources.append(Source(n, entry, found.get("log", base / entry.log), found.get("smi")))
    if problems:
        raise ImportFailed(imports.experiment, problems)
    return sources


def _source_file(base: Path, name: str, follow_symlinks: bool) -> Path:
    """The file an imports entry names, checked (see _check_sources); OSError saying why it cannot be used."""
    given = Path(os.path.abspath(base / name))
    real = given.resolve()
    if real != given and not follow_symlinks and not real.is_relative_to(base.resolve()):
        raise OSError(f"a symbolic link to {real}, outside the imports file's folder: copy the file there, or pass "
                      "--follow-symlinks to import what links point to")
    with _open(real) as fh:
        fh.read(1)
    return real


def _open(path: Path):
    """A checked source file opened for reading (links are resolved by then: a link now is one swapped in)."""
    return safefiles.open_regular(path, follow_symlinks=False, max_bytes=MAX_FILE_BYTES)


def _server_kind(imports: ImportsFile, sources: list[Source]) -> str:
    """The declared kind, or the one every log shows (`auto`); logs of different servers cannot be compared."""
    declared = imports.server.kind
    if declared != "auto" and declared not in KINDS:
        raise ImportFailed(imports.experiment, [f"server kind {declared!r} is not one of auto, {', '.join(KINDS)}"])
    for s in sources:
        s.kind = logparse.detect(s.log) if declared == "auto" else declared
    kinds = sorted({s.kind for s in sources})
    if len(kinds) > 1:
        raise ImportFailed(imports.experiment, [
            "the logs were written by different servers (" + "; ".join(
                f"{k}: runs {', '.join(str(s.n) for s in sources if s.kind == k)}" for k in kinds)
            + "): import each server's logs separately, or name `server: {kind: …}`"])
    return kinds[0]


def experiment_of(imports: ImportsFile, kind: str, repetitions: int, source: str) -> params.Experiment:
    """The params Experiment the report reads: the imports file's design, a host named `imported`, and a
    command that is only the factors' flags (the runs' own commands are kept per run, in provenance.json)."""
    data = {"experiment": imports.experiment, "question": imports.question,
            "hosts": {HOST: {"transport": "local"}},
            "server": {"kind": kind, "command": ["(imported: the command is per run)"]},
            "factors": imports.factors, "repetitions": repetitions, "secrets": imports.secrets}
    if KINDS[kind].ready_pattern is None:  # its logs have no standard ready line: the user names theirs
        if imports.server.ready_pattern is None:
            raise ImportFailed(imports.experiment, [
                f"the logs are {kind} logs, which have no standard ready line: give the line that says the server is "
                "ready as `server: {kind: " + kind + ", ready_pattern: REGEX}`"])
        data["server"]["ready"] = {"log_pattern": imports.server.ready_pattern}
    if imports.baseline is not None:
        data["baseline"] = imports.baseline
    return params.loads(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), source)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with _open(path) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _copy_masked(src: Path, dst: Path, masker: masking.Masker) -> None:
    """A copy of a file with every secret value masked (in bounded memory, whatever its lines), 0600 like the
    run's other files, renamed into place when whole."""
    rundir.make_folder(dst.parent)
    with safefiles.replacing(dst, mode=0o600) as tmp, _open(src) as fin, open(tmp, "wb") as fout:
        masker.stream(fin, fout)


def _import_run(directory: rundir.RunDir, s: Source, parsed: logparse.ParsedLog, *, exp: params.Experiment,
                variant: params.Variant, rep: int, masker: masking.Masker) -> tuple[ManifestEntry, masking.Masker]:
    """One imported run: its log (and nvidia-smi capture) copied masked into its folder, its record and provenance
    written; returns its manifest entry and the masks of its secrets."""
    run_id = f"{s.n:02d}_{variant.slug}_imported{rep}"
    argv = shlex.split(s.entry.command) if isinstance(s.entry.command, str) else s.entry.command
    run_masker = masker.merge(masking.Masker.collect({}, argv or [], exp.secrets, _secret_args(parsed, exp.secrets)))
    folder = directory.run(run_id)
    _copy_masked(s.log, folder.log(), run_masker)
    if s.smi is not None and _is_table(s.smi):
        _copy_masked(s.smi, folder.samples_table, run_masker)
    elif s.smi is not None:  # a sampler's CSV: kept compressed, as a run's own trace is
        _copy_masked(s.smi, folder.live_samples(), run_masker)
        folder.keep_samples()
    parsed = logparse.parse_file(folder.log(), exp.server.kind, exp.server.rules())  # the copy, as reported
    gpus, driver = _gpus(folder)
    record = records.RunRecord(run_id, variant.name, rep, HOST, dict(variant.levels), imported=True,
                               server_started_at=_first_time(parsed),
                               notes=[f"imported from {s.log.name}: not observed (imported): " + ", ".join(NOT_OBSERVED)])
    _outcome(record, parsed)
    record.misfiled = _misfiled(exp, run_id, variant.levels, parsed)
    records.write_final(folder, record)
    rundir.write_json(folder.provenance, run_masker.record({
        "imported": True, "not_observed": list(NOT_OBSERVED),
        "source": {"log": str(s.log), "log_sha256": _sha256(s.log),
                   "smi": str(s.smi) if s.smi else None, "smi_sha256": _sha256(s.smi) if s.smi else None},
        "command": run_masker.argv(argv, exp.secrets) if argv else None,
        "gpus": gpus, "driver": driver,
        "declared": {"server_version": s.entry.version} if s.entry.version else {}}))
    entry = ManifestEntry(run_id, s.n, variant.name, variant.levels, rep, HOST, imported=True)
    return entry, run_masker


def _secret_args(parsed: logparse.ParsedLog, extra: list[str]) -> list[str]:
    """Secret values the server printed among its own arguments (`api_key='sk-…'`), found by the flag rule
    (`--api-key`); the environment-variable rule would take `tokenizer_path` for a token."""
    return [str(v).strip("'\"") for k, v in parsed.args.items()
            if masking.secret_flag(f"--{k.replace('_', '-')}", extra) and str(v).strip("'\"") not in ("", "None")]


def _is_table(path: Path) -> bool:
    with _open(path) as fh:
        head = fh.read(4096).decode("utf-8", errors="replace")
    return "NVIDIA-SMI" in head or head.lstrip().startswith("+---")


def _gpus(folder: rundir.RunFolder) -> tuple[list[dict], str | None]:
    """GPU names and totals (and the driver) an nvidia-smi capture shows; empty when it shows none."""
    if folder.samples_table.exists():
        table = smitext.parse_table(folder.samples_table.read_text(encoding="utf-8", errors="replace"))
        return [{k: g[k] for k in ("index", "name", "mem_total_mib")} for g in table["gpus"]], table["driver"]
    if folder.samples().exists():
        frame = telemetry.read_query_csv(folder.samples())
        if "index" in frame and ("name" in frame or "memory.total" in frame):
            cols = [c for c in ("index", "name", "memory.total") if c in frame]
            first = frame[cols].drop_duplicates("index")
            return [{"index": int(r["index"]), "name": r.get("name"), "mem_total_mib": r.get("memory.total")}
                    for r in first.to_dict("records")], None
    return [], None


def _outcome(record: records.RunRecord, parsed: logparse.ParsedLog) -> None:
    """The outcome as the log alone shows it: the ready line, the server's own failure, or unknown."""
    record.phase_reached = parsed.phase_reached
    if parsed.failure is not None:
        record.status = "failed"
        record.failure_reason, record.failure_phase = parsed.failure.reason, parsed.failure.phase
        record.failure_message = parsed.failure.message
    elif parsed.ready:
        record.status = "ready"
    else:
        record.status = "unknown"
        record.failure_message = (f"unknown: the log ends during {PHASE_WORDS.get(parsed.phase_reached, parsed.phase_reached)}"
                                  " (no ready line, no failure line)")


def _misfiled(exp: params.Experiment, run_id: str, levels: dict[str, str], parsed: logparse.ParsedLog) -> str | None:
    """What the log shows against the levels the user filed it under (the level checks), or None."""
    checks = levelchecks.level_checks(exp, [{"run_id": run_id, "levels": levels}], {run_id: parsed.to_json()})
    wrong = [c["detail"] for c in checks if c["runs_contradicted"]]
    return "; ".join(wrong) or None


def _first_time(parsed: logparse.ParsedLog) -> str | None:
    times = [e.t for e in parsed.events if e.t is not None]
    return min(times).isoformat() if times else None


def import_runs(imports_path: str | Path, out_root: Path | None = None, summarize: bool = True, *,
                follow_symlinks: bool = False) -> Path:
    """Build a run directory from an imports file and render its report; return the run directory."""
    imports_path = Path(imports_path).resolve()
    imports, text = _read_file(imports_path)
    sources = _check_sources(imports, imports_path.parent, follow_symlinks)
    kind = _server_kind(imports, sources)
    counts: dict[tuple, int] = {}
    for s in sources:
        counts[tuple(sorted(s.entry.levels.items()))] = counts.get(tuple(sorted(s.entry.levels.items())), 0) + 1
    exp = experiment_of(imports, kind, max(counts.values()), str(imports_path))
    variants = {tuple(sorted(v.levels.items())): v for v in params.expand(exp)}
    unknown = [f"run {s.n} ({s.log.name}): levels {s.entry.levels} are not a variant of the factors (variants: "
               + "; ".join(", ".join(f"{f}={lv}" for f, lv in k) for k in variants) + ")"
               for s in sources if tuple(sorted(s.entry.levels.items())) not in variants]
    if unknown:
        raise ImportFailed(imports.experiment, unknown)
    masker = masking.for_run(exp)
    parsed_sources = []
    for s in sources:  # parse every log before writing anything: a log that cannot be read stops the import
        try:
            parsed_sources.append(logparse.parse_file(s.log, kind, exp.server.rules()))
        except (ParseError, OSError) as exc:
            raise ImportFailed(imports.experiment, [f"run {s.n} ({s.log}): {exc}"]) from None
    directory = rundir.RunDir.create(Path(out_root) if out_root else finding.default_root(), exp.experiment)
    try:
        _write(directory, imports_path, text, exp, sources=sources, parsed_sources=parsed_sources, masker=masker)
    except BaseException:
        shutil.rmtree(directory.path, ignore_errors=True)  # ours, just made: no half-written run directory
        raise
    if summarize:
        from launchlab.runner import notebooks

        notebooks.summarize(directory.path)
    return directory.path


def _write(directory: rundir.RunDir, imports_path: Path, text: str, exp: params.Experiment, *, sources: list[Source],
           parsed_sources: list[logparse.ParsedLog], masker: masking.Masker) -> None:
    """Every imported run into the new run directory (_import_run), then the imports file (masked with every run's
    secrets), the resolved params and the manifest."""
    variants = {tuple(sorted(v.levels.items())): v for v in params.expand(exp)}
    runs, reps, every_secret = [], {}, masker
    for s, parsed in zip(sources, parsed_sources, strict=True):
        variant = variants[tuple(sorted(s.entry.levels.items()))]
        reps[variant.name] = rep = reps.get(variant.name, 0) + 1
        entry, run_masker = _import_run(directory, s, parsed, exp=exp, variant=variant, rep=rep, masker=masker)
        every_secret = every_secret.merge(run_masker)
        runs.append(entry)
    rundir.write_text(directory.imports_file, every_secret.text(text))  # it holds the runs' commands
    rundir.write_text(directory.experiment_file, params.dump_resolved(exp, masked=True))
    directory.write_manifest(Manifest(
        experiment=exp.experiment, question=exp.question, imported=True,
        imports_file=str(imports_path), imports_sha256=hashlib.sha256(text.encode()).hexdigest(),
        created_at=datetime.now().isoformat(timespec="seconds"), kit_version=__version__,
        simulated=False, host=HOST, hosts=[HOST],
        factors={f: list(levels) for f, levels in exp.factors.items()},
        baseline=params.baseline_variant(exp).name, order="imported (as listed)",
        run_ids=[r.run_id for r in runs], runs=runs))
