"""`launchlab ls`: what each run directory under a folder holds — experiment, date, runs done of planned, the verdict
in one line and its strength, the command that finishes an unfinished batch — as rows for the terminal and for the
HTML index (indexpage.py).

Every run directory may be someone else's (a shared outputs/): its records are read within a size limit through
the store's safe readers, a record that is a symbolic link is not followed at all (the user's own `outputs ->
/data/outputs` above the run directories still is), and one unreadable directory is a row saying why, never an
end to the listing. Strings read here are untrusted: the terminal shows each row on one line through `one_line`
(control and bidirectional characters shown as escapes), the page escapes them.
"""

from __future__ import annotations

import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path

from launchlab import safefiles
from launchlab.errors import RunDirError
from launchlab.escaping import one_line
from launchlab.reporting import headline
from launchlab.store import finding, rundir
from launchlab.store.verdictrecord import Verdict

HEADLINE_WIDTH = 160  # the terminal's line: the verdict is cut at a word there; a command to copy never is


@dataclass(frozen=True)
class Listed:
    """One run directory as the index shows it."""

    path: Path  # the run directory, as found under the root (no link resolved)
    experiment: str = ""
    question: str = ""
    created_at: str = ""  # ISO 8601, as the manifest has it ("" where it does not)
    done: int = 0  # planned runs with a final status
    planned: int = 0
    headline: str = ""  # the verdict in one line, or why there is none yet
    strength: str = ""  # how strongly the runs back it, in words and its p-value
    p_value: float | None = None  # the weakest p-value of the deciding factors (None: none, or not said)
    next_step: str = ""  # the whole command that finishes or renders it, for the user to copy ("" where none is due)
    report: Path | None = None  # summary.html (else report.md) where it is a regular file in the run directory
    unreadable: str = ""  # why the run directory cannot be listed ("" where it can)


def index(root: Path) -> list[Listed]:
    """Every run directory under root, oldest first."""
    return [listed(run_dir) for run_dir in finding.found(root)]


def listed(run_dir: rundir.RunDir) -> Listed:
    try:
        _no_link(run_dir.manifest_file)
        got = finding.progress(run_dir)
    except RunDirError as exc:
        return Listed(run_dir.path, unreadable=str(exc))
    manifest = got.manifest
    headline, strength, p_value, why_again = _verdict(run_dir, planned=got.planned)
    if not got.finished and not manifest.imported:
        headline = (f"unfinished: {got.done} of {got.planned} planned runs ended"
                    + (" (one run of run_variant.ipynb)" if manifest.single_run else "")
                    + (f" (stopped: {manifest.stopped})" if manifest.stopped else "")
                    + (f"; its verdict so far: {headline}" if strength else ""))
        next_step = manifest.resume_command(run_dir.path)
    else:
        next_step = f"launchlab report {shlex.quote(os.path.abspath(run_dir.path))}" if why_again else ""
    return Listed(run_dir.path, experiment=manifest.experiment, question=manifest.question or "",
                  created_at=manifest.created_at or "", done=got.done, planned=got.planned, headline=headline,
                  strength=strength, p_value=p_value, next_step=next_step, report=_report(run_dir))


def _verdict(run_dir: rundir.RunDir, *, planned: int) -> tuple[str, str, float | None, bool]:
    """(the report's headline: its lead, its strength, the p-value of that strength; whether `launchlab report`
    should write the verdict again)."""
    if safefiles.lstat(run_dir.verdict_file) is None:
        return "no verdict yet", "", None, True
    try:
        _no_link(run_dir.verdict_file)
        data = rundir.read_json(run_dir.verdict_file, max_bytes=finding.LISTED_BYTES)
    except RunDirError as exc:
        return f"verdict.json unreadable ({exc})", "", None, True
    try:
        verdict = Verdict.from_json(data)
        said = headline.of(verdict, planned=planned)  # the unfinished batch's command is the row's own next step
        strength = said.strength + (f"; {said.settle}" if said.settle else "")
        return said.lead, strength, headline.weakest_p(verdict), False
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a verdict.json the kit did not write
        return f"verdict.json unreadable ({type(exc).__name__})", "", None, True


def _no_link(path: Path) -> None:
    """RunDirError where a record of the run directory is a symbolic link: the index follows none out of it."""
    if safefiles.is_link(path):
        raise RunDirError(f"{path} is a symbolic link; the index does not follow it")


def _report(run_dir: rundir.RunDir) -> Path | None:
    for page in (run_dir.summary_html, run_dir.report_md):
        found = safefiles.lstat(page)
        if found is not None and stat.S_ISREG(found.st_mode) and not safefiles.is_link(page):
            return page
    return None


def text(row: Listed, width: int = HEADLINE_WIDTH) -> str:
    """The row as `launchlab ls` prints it: the verdict cut at a word past `width`, the command after it whole."""
    # one line a row, whatever a field holds: a newline in a manifest's `experiment` printed a forged second row
    if row.unreadable:
        return one_line(f"{row.path}  UNREADABLE: {row.unreadable}")
    # a verdict's line is cut (the page and report.md hold it whole); why there is none, never
    line = row.headline if len(row.headline) <= width or not row.strength else _cut(row.headline, width)
    step = f"; next: {row.next_step}" if row.next_step else ""
    return one_line(f"{row.path}  {row.experiment}  {row.created_at or '?'}  {row.done}/{row.planned} runs  "
                    f"{line}{step}")


def _cut(line: str, width: int) -> str:
    cut = line[:width - 1]
    return (cut[:cut.rfind(" ")] if " " in cut else cut).rstrip(",;:") + " …"  # at a word, not mid-word
