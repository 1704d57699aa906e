"""The notebook side of one run: what run_variant.ipynb calls (`run_variant`) and what it shows of the run —
its record, its per-rank fields and the end of its log. The tables are small HTML tables, not DataFrames: the
run kernel never imports pandas (half a second of every run; bench/run_overhead.py)."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path

from launchlab import hosts, lifecycle, params, rundir
from launchlab.errors import ParamsError
from launchlab.escaping import html_text
from launchlab.hosts import sim
from launchlab.plan import find_run, recorded_runs
from launchlab.records import RunRecord


def run_variant(experiment: str | Path, run_id: str, run_dir: str | Path, gpus: str = "",
                params_sha256: str = "") -> RunRecord:
    """Run one planned run of a params file into run_dir/runs/<run_id>/.
    gpus: "0,1" to give the run only those GPUs of its host (CUDA_VISIBLE_DEVICES), "" for all of them.
    params_sha256: the digest the batch validated; a params file edited since then is refused."""
    if params_sha256 and params.digest(experiment) != params_sha256:
        raise ParamsError(str(experiment), ["the file changed after the batch validated it; this run was not "
                                            "launched — rerun the batch (`launchlab run … --resume RUN_DIR`)"])
    exp = params.load(experiment)
    manifest = rundir.RunDir(run_dir).manifest()
    plan = recorded_runs(exp, manifest)  # a search's probes so far are in the manifest only
    run = find_run(plan, run_id) if run_id else plan[0]
    slot = [int(g) for g in gpus.split(",")] if gpus else None
    box = manifest.get("sim_box")  # the batch's simulated machine
    own_box = box is None and any(exp.hosts[h].simulated for h in run.hosts)
    if own_box:  # a run notebook executed by hand: a simulated machine of its own, gone when the run is
        box = sim.new_box()
    try:
        return lifecycle.run_one(exp, run, Path(run_dir), {name: hosts.connect(exp, name, sim_box=box)
                                                            for name in run.hosts}, gpus=slot)
    finally:
        if own_box:
            shutil.rmtree(box, ignore_errors=True)


@dataclass(frozen=True)
class Table:
    """A table a notebook shows: HTML in Jupyter (every cell escaped), aligned text elsewhere."""

    index_name: str
    columns: list[str]
    rows: list[tuple[str, list[str]]]  # (index, cells)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html_text(c)}</th>" for c in [self.index_name, *self.columns])
        body = "".join("<tr><th>" + html_text(index) + "</th>" + "".join(f"<td>{html_text(c)}</td>" for c in cells)
                       + "</tr>" for index, cells in self.rows)
        return f'<table class="dataframe"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

    def __repr__(self) -> str:
        lines = [[self.index_name, *self.columns], *([index, *cells] for index, cells in self.rows)]
        widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
        return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                         for line in lines)


def _text(value: object) -> str:
    return "" if value is None else str(value)


def summary_table(result: RunRecord) -> Table:
    """The run's result as a two-column table for a notebook."""
    rows = {k: v for k, v in dataclasses.asdict(result).items() if v not in (None, [], {})}
    return Table("", ["value"], [(k, [str(v)]) for k, v in rows.items()])


def rank_table(run_dir: str | Path, run_id: str) -> Table:
    """Per-rank fields parsed from a run's server log (one row per TP rank)."""
    ranks = rundir.read_json(rundir.RunDir(run_dir).run(run_id).parsed)["ranks"]
    columns = list(dict.fromkeys(field for fields in ranks.values() for field in fields))
    return Table("rank", columns, [(rank, [_text(fields.get(c)) for c in columns]) for rank, fields in ranks.items()])


def log_tail(run_dir: str | Path, run_id: str, lines: int = 15) -> str:
    path = rundir.RunDir(run_dir).run(run_id).log()
    if not path.exists():
        return "(no server log was collected)"
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - 64 * 1024))
        return "\n".join(fh.read().decode("utf-8", errors="replace").splitlines()[-lines:])
