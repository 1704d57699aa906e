"""What run_variant.ipynb shows of one run: its result, its per-rank fields and the end of its log."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from launchlab import outputs
from launchlab.lifecycle import RunResult


def summary_table(result: RunResult) -> pd.DataFrame:
    """The run's result as a two-column table for a notebook."""
    rows = {k: v for k, v in dataclasses.asdict(result).items() if v not in (None, [], {})}
    return pd.DataFrame({"value": [str(v) for v in rows.values()]}, index=list(rows))


def rank_table(run_dir: str | Path, run_id: str) -> pd.DataFrame:
    """Per-rank fields parsed from a run's server log (one row per TP rank)."""
    parsed = outputs.read_json(outputs.run_folder(Path(run_dir), run_id) / outputs.PARSED)
    return pd.DataFrame.from_dict(parsed["ranks"], orient="index").rename_axis("rank")


def log_tail(run_dir: str | Path, run_id: str, lines: int = 15) -> str:
    path = outputs.run_folder(Path(run_dir), run_id) / outputs.SERVER_LOG
    if not path.exists():
        return "(no server log was collected)"
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - 64 * 1024))
        return "\n".join(fh.read().decode("utf-8", errors="replace").splitlines()[-lines:])
