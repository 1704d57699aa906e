"""Committed notebooks carry no outputs: `python -m launchlab.nbcheck notebooks/` (used by `make test`), and
`make lab`'s Jupyter server strips them when a template is saved (`pre_save_hook`, jupyter/jupyter_server_config.py)."""

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


def pre_save_hook(model: dict, path: str, **kwargs) -> None:
    """Jupyter's pre-save hook: a notebook saved at the top of the served folder (the kit's templates) is written
    without outputs; one in a sub-folder is the user's own copy and is kept as it is."""
    if model.get("type") == "notebook" and "/" not in path.strip("/"):
        strip(model["content"])


def main(argv: list[str]) -> int:
    problems = []
    for folder in argv or ["notebooks"]:
        for path in sorted(Path(folder).glob("*.ipynb")):
            cells = dirty_cells(path)
            if cells:
                problems.append(f"{path}: cells {cells} carry outputs; clear them (Edit → Clear Outputs of All Cells)")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
