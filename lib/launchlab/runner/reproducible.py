"""The executed summary notebook made reproducible: the same run directory and the same kit give the same bytes, so
re-rendering a committed example leaves the checkout clean (issue 49, point 5)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import nbformat

from launchlab.store import rundir

# papermill's clock readings, in the notebook's and each cell's metadata: they change at every execution and say
# nothing of the run directory (the run's own timings are in its records)
_CLOCK = ("start_time", "end_time", "duration")
# an object's default repr in an output's text/plain (a Styler shown as HTML: `<…Styler at 0x7ffb4e6e8e10>`): the
# address changes at every execution
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")


def cell_id(index: int, cell: nbformat.NotebookNode) -> str:
    """An id derived from the cell's place, kind and tags (nbformat's random ids, and papermill's for the cell it
    injects, differ at every execution). Not from its source: the injected parameters name the run directory's
    path, and the page exported from a copy elsewhere (an example re-rendered in a scratch folder) would differ."""
    tags = ",".join(cell.metadata.get("tags", []))
    return hashlib.sha256(f"{index}\0{cell.cell_type}\0{tags}".encode()).hexdigest()[:12]


def settle(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook without what only the moment of execution decided: papermill's timestamps and durations,
    the kernel's per-cell execution clock, random cell ids. Outputs, parameters and tags are kept as they are."""
    for key in _CLOCK:
        nb.metadata.get("papermill", {}).pop(key, None)
    for index, cell in enumerate(nb.cells):
        cell.id = cell_id(index, cell)
        cell.metadata.pop("execution", None)  # iopub.* / shell.execute_reply timestamps
        for output in cell.get("outputs", []):
            plain = output.get("data", {}).get("text/plain")
            if isinstance(plain, str):
                output.data["text/plain"] = _ADDRESS.sub(">", plain)
        for key in _CLOCK:
            cell.metadata.get("papermill", {}).pop(key, None)
    return nb


def settle_file(path: Path) -> None:
    """Rewrite an executed notebook settled (atomically, as every run-directory file is written)."""
    nb = nbformat.read(str(path), as_version=4)
    if "output_path" in nb.metadata.get("papermill", {}):  # the private file papermill wrote (/proc/self/fd/N)
        nb.metadata.papermill.output_path = path.name
    rundir.write_text(path, nbformat.writes(settle(nb)) + "\n", mode=path.stat().st_mode & 0o777)
