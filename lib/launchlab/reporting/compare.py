"""`launchlab compare RUN_A RUN_B`: two run directories read (each checked whole first), compared before and after
(verdicts/compare.py), and written as compare.json and compare.html; the same comparison as a section of the
summary notebook (its `compare_with` parameter)."""

from __future__ import annotations

from pathlib import Path

import nbformat

from launchlab import params, safefiles
from launchlab.errors import RunDirError
from launchlab.reporting import comparetext
from launchlab.store import records, rundir
from launchlab.store.comparerecord import BeforeAfter
from launchlab.store.verdictrecord import Verdict
from launchlab.verdicts import budget, compare, frames, ledger, levelchecks


def _checked(path: str | Path, label: str) -> rundir.RunDir:
    """The run directory at path, finished: every run its manifest plans has a final status."""
    if not Path(path).exists():
        raise RunDirError(f"{label} ({path}): no such folder; pass a run directory that `launchlab run` or `launchlab "
                          "import` printed (`launchlab ls` lists them)")
    try:
        directory = rundir.RunDir.check(path)
        manifest = directory.manifest()
    except RunDirError as exc:
        raise RunDirError(f"{label}: {exc}") from None
    unfinished = [r for r in manifest.run_ids if not records.done(directory.run(r))]
    if unfinished:
        raise RunDirError(f"{label} ({path}) is incomplete: {len(unfinished)} of {len(manifest.run_ids)} planned runs "
                          f"have not finished ({', '.join(unfinished[:3])}{' …' if len(unfinished) > 3 else ''}); "
                          f"finish it with `launchlab run PARAMS --resume {path}`, then compare")
    return directory


# what the comparison reads of telemetry.parquet: each run's card (the budget's card_totals), never its timeline
COMPARE_TELEMETRY_COLUMNS = ["run_id", "node", "gpu_index", "mem_total_mib"]


def load_side(path: str | Path, label: str) -> compare.Side:
    """One run directory as the comparison reads it: its frames, verdict, provenance and parsed logs, and its
    server kind's budget per run. RunDirError when it is missing, not a run directory, unfinished, or its frames or
    verdict.json are not written (or older than its runs)."""
    directory = _checked(path, label)
    manifest = directory.manifest()
    try:
        if any(not directory.frame(name).is_file() for name in rundir.FRAMES):
            # derived, never committed (a fresh clone's examples): built from the runs' raw files, as report does —
            # in memory, the run directory's own frames left to `launchlab report`
            tables = frames.build(directory.path, params.load(directory.experiment_file))
        else:
            tables = frames.load(directory.path, telemetry_columns=COMPARE_TELEMETRY_COLUMNS)
        data = rundir.read_json(directory.verdict_file)
        try:
            verdict = Verdict.from_json(data)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a verdict.json the kit did not write
            raise RunDirError(f"{directory.verdict_file} is not a verdict the kit wrote ({type(exc).__name__}: "
                              f"{str(exc)[:120]})") from None
    except RunDirError as exc:
        raise RunDirError(f"{label}: {exc} (`launchlab report {path}` writes the frames and verdict.json)") from None
    if set(tables.runs["run_id"]) != set(manifest.run_ids):
        raise RunDirError(f"{label} ({path}): runs.parquet does not hold every finished run; `launchlab report {path}` "
                          "rebuilds the frames from the runs' raw files")
    exp = params.load(directory.experiment_file)
    factors = (*exp.factors, *([exp.search.factor] if exp.search else []))
    per_run = {name: {r: rundir.read_json(p) for r in manifest.run_ids
                      if (p := getattr(directory.run(r), name)).is_file()} for name in ("provenance", "parsed")}
    evidence = ledger.build(tables.runs, list(factors), exp=exp, planned=manifest.runs, parsed=per_run["parsed"])
    return compare.Side(
        label=label, run_dir=str(directory.path), manifest=manifest, verdict=verdict, factors=factors,
        runs=tables.runs, events=tables.events, ledger=evidence,
        budget=budget.observed(exp.server.kind, evidence, tables.events, tables.runs, telemetry=tables.telemetry),
        facts=per_run["provenance"], parsed=per_run["parsed"],
        # resolved again by this kit, so a default an older kit left unwritten is not a difference
        settings=exp.model_dump(mode="json"),
        server_kind=exp.server.kind, declared_args=frozenset(levelchecks.declared_args(exp)))


def build(before: str | Path, after: str | Path) -> BeforeAfter:
    """The comparison of RUN_B (after) against RUN_A (before)."""
    return compare.compare(load_side(before, "before"), load_side(after, "after"))


def write(record: BeforeAfter, out: Path | None = None) -> rundir.CompareFolder:
    """compare.json and compare.html, in `out` (default: compare/<before> inside the after run directory)."""
    folder = rundir.CompareFolder(out) if out is not None else \
        rundir.RunDir(Path(record.after.run_dir)).comparison(rundir.RunDir(Path(record.before.run_dir)))
    # no more readable than the more private of the two run directories (an imported 0600 log's lines are in it)
    mode = safefiles.private_mode(*(rundir.RunDir(Path(side.run_dir)).share_mode()
                                    for side in (record.before, record.after)))
    rundir.write_json(folder.record, record.to_json(), mode=mode)
    page(record, folder.page, mode=mode)
    return folder


def page(record: BeforeAfter, path: Path, *, mode: int = 0o644) -> Path:
    """compare.html: the comparison's sections as outputs of a notebook held in memory (no kernel runs), exported
    with the summary's offline template, so it reads and opens as summary.html does."""
    from launchlab.reporting import export  # nbconvert: only for the page

    nb = nbformat.v4.new_notebook()
    for mime, text in comparetext.sections(record):
        cell = nbformat.v4.new_code_cell("")
        cell.outputs = [nbformat.v4.new_output("display_data", data={mime: text})]
        nb.cells.append(cell)
    return export.node_to_html(nb, path, title=f"{record.after.experiment} — before and after — launchlab",
                               name="compare", mode=mode)


def show(compare_with: str, run_dir: str | Path) -> None:
    """The summary notebook's comparison: this run directory (after) against `compare_with` (before); nothing
    when compare_with is empty."""
    if not compare_with:
        return
    from IPython.display import HTML, Markdown, display

    record = build(compare_with, run_dir)
    for mime, text in comparetext.sections(record, heading="##"):
        display(Markdown(text) if mime == "text/markdown" else HTML(text))
