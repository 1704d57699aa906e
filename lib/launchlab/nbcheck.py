"""Committed notebooks carry no outputs: `python -m launchlab.nbcheck notebooks/` (used by `make test`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def dirty_cells(path: Path) -> list[int]:
    """Indexes of code cells that carry outputs or an execution count."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [i for i, c in enumerate(nb.get("cells", []))
            if c.get("cell_type") == "code" and (c.get("outputs") or c.get("execution_count"))]


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
