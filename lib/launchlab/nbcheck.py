"""Committed notebooks carry no outputs and are in the format JupyterLab saves: `python -m launchlab.nbcheck
notebooks/` (used by `make test`); `make lab`'s Jupyter server writes a template in that committed format when it
is saved (`pre_save_hook`, jupyter/jupyter_server_config.py), so a save that changed no code leaves the tracked
file byte-identical (a dirty checkout would mark every later run of a batch as running modified files)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def dirty_cells(path: Path) -> list[int]:
    """Indexes of code cells that carry outputs or an execution count."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [i for i, c in enumerate(nb.get("cells", []))
            if c.get("cell_type") == "code" and (c.get("outputs") or c.get("execution_count"))]


def strip(nb: dict) -> dict:
    """The notebook without outputs and execution counts (in place; returned for convenience)."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return nb


# What a template keeps of the metadata Lab edits as one works: the kernel it runs on, and each cell's tags
# (papermill's `parameters`). The rest changes with the machine and the session (language_info's Python version,
# a cell's execution timing, collapsed or scrolled outputs), not with the template.
KEPT_NOTEBOOK_METADATA = ("kernelspec", "language_info")
KEPT_CELL_METADATA = ("tags",)


def as_template(nb: dict) -> dict:
    """The notebook as a template is committed (in place; returned for convenience): no outputs or execution
    counts, only the metadata in KEPT_*_METADATA, language_info reduced to the language's name."""
    strip(nb)
    meta = nb.get("metadata") or {}
    nb["metadata"] = {k: meta[k] for k in KEPT_NOTEBOOK_METADATA if k in meta}
    if isinstance(nb["metadata"].get("language_info"), dict):
        nb["metadata"]["language_info"] = {"name": nb["metadata"]["language_info"].get("name", "python")}
    for cell in nb.get("cells", []):
        cell["metadata"] = {k: v for k, v in (cell.get("metadata") or {}).items() if k in KEPT_CELL_METADATA}
    return nb


def pre_save_hook(model: dict, path: str, **kwargs) -> None:
    """Jupyter's pre-save hook: a notebook saved in notebooks/ of the served folder (`make lab` serves the repository
    root), or at the top of a served notebooks/ itself, is one of the kit's templates and is written as a template
    is committed (as_template; Jupyter then writes it as nbformat does: sorted keys, one-space indent, sources as
    lists of lines, the format the templates are committed in); one anywhere else (a sub-folder, outputs/) is the
    user's own and is kept as it is."""
    parts = path.strip("/").split("/")
    if model.get("type") == "notebook" and (len(parts) == 1 or (len(parts) == 2 and parts[0] == "notebooks")):
        as_template(model["content"])


def committed_format(path: Path) -> bool:
    """Whether the file is byte for byte what a save from `make lab` writes for it (as_template, then nbformat)."""
    import nbformat  # only here: what `make test` runs, not what a batch imports

    text = path.read_text(encoding="utf-8")
    nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    written = nbformat.writes(nbformat.from_dict(as_template(nb)), version=nbformat.NO_CONVERT)
    return text == written + ("" if written.endswith("\n") else "\n")


def main(argv: list[str]) -> int:
    problems = []
    for folder in argv or ["notebooks"]:
        for path in sorted(Path(folder).glob("*.ipynb")):
            cells = dirty_cells(path)
            if cells:
                problems.append(f"{path}: cells {cells} carry outputs; clear them (Edit → Clear Outputs of All Cells)")
            elif not committed_format(path):
                problems.append(f"{path}: not in the format a save from `make lab` writes (nbformat's: sorted keys, "
                                "one-space indent, sources as lists of lines; only kernelspec, language_info's name "
                                "and cell tags as metadata); open it in `make lab` and save it")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
