"""The notebook side of one run: what run_variant.ipynb calls (`run_variant`, with its live progress) and what
it shows of the run — its record, its GPU trace, its per-rank fields and the end of its log. The tables are
small HTML tables, not DataFrames, and the trace imports pandas and matplotlib only when it is drawn, after the
run: the run itself never waits for them (half a second and more of every run; bench/run_overhead.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from launchlab import hosts, params, safefiles, search, terminal
from launchlab.errors import ParamsError
from launchlab.escaping import html_text
from launchlab.gpu import telemetry
from launchlab.hosts import sim
from launchlab.run import lifecycle
from launchlab.runner import liveprogress
from launchlab.store import records, rundir
from launchlab.store.manifest import Manifest
from launchlab.store.records import Run, RunRecord


def ensure_run_dir(params_path: str | Path, run_dir: str | Path = "") -> Path:
    """The run directory a run notebook writes into: the given one (a batch's), or a new one for its params, said on
    the terminal that started the kernel (terminal.say: the notebook prints it itself, once)."""
    if run_dir:
        return rundir.RunDir.check(run_dir).path
    from launchlab.runner import batch  # only here: a batch's run kernels, which always name their directory, need none of it

    path = batch.new_run_dir(found_params(params_path))
    # and on the terminal that started the kernel (papermill's): where the run went, and how to run the rest
    manifest = rundir.RunDir(path).manifest()
    terminal.say(f"run_variant.ipynb: run directory {path} (1 of its {len(manifest.run_ids)} planned runs; "
                 f"`{manifest.resume_command(path)}` runs the rest)")
    return path


def found_params(params_path: str | Path) -> Path:
    """The notebook's params file, or ParamsError: a relative path is the notebook's folder's, where JupyterLab
    runs it but papermill only with `--cwd` (it runs a notebook in the folder it was started from)."""
    path = Path(params_path)
    if path.is_absolute() or path.exists():
        return path
    raise ParamsError(str(params_path), [f"no such file relative to {Path.cwd()}, where this notebook runs: the path is "
                                         "relative to the notebook's folder: use `--cwd notebooks` (papermill) or an "
                                         "absolute path"])


def run_variant(experiment: str | Path, run_id: str, run_dir: str | Path, gpus: str = "",
                params_sha256: str = "", live: bool | None = None) -> RunRecord:
    """Run one planned run of a params file into run_dir/runs/<run_id>/.
    gpus: "0,1" to give the run only those GPUs of its host (CUDA_VISIBLE_DEVICES), "" for all of them.
    params_sha256: the digest the batch validated; a params file edited since then is refused.
    live: show the run's progress in one display updated in place (default: inside a notebook's kernel)."""
    if params_sha256 and params.digest(experiment) != params_sha256:
        raise ParamsError(str(experiment), ["the file changed after the batch validated it; this run was not "
                                            "launched — rerun the batch (`launchlab run … --resume RUN_DIR`)"])
    exp = params.load(experiment)
    manifest = rundir.RunDir(run_dir).manifest()
    run = recorded_run(exp, manifest, run_id)
    slot = [int(g) for g in gpus.split(",")] if gpus else None
    box = manifest.sim_box  # the batch's simulated machine
    own_box = box is None and any(exp.hosts[h].simulated for h in run.hosts)
    if own_box:  # a run notebook executed by hand: a simulated machine of its own, gone when the run is
        box = sim.new_box()
    folder = rundir.RunDir(run_dir).run(run.run_id)
    live = _in_kernel() if live is None else live
    show = liveprogress.LiveProgress(folder, exp.server.kind, exp.server.rules()) if live else contextlib.nullcontext()
    try:
        with show:
            return lifecycle.run_one(exp, run, Path(run_dir), {name: hosts.connect(name, exp.hosts[name], sim_box=box)
                                                                for name in run.hosts}, gpus=slot)
    finally:
        if own_box:
            shutil.rmtree(box, ignore_errors=True)


def recorded_run(exp: params.Experiment, manifest: Manifest, run_id: str) -> Run:
    """The run as its run directory's manifest lists it — a batch lists every run there before it runs one, a search
    each probe as it chooses it — with its variant rendered from the params; "" is the first. The plan is the
    batch's: one run's notebook never plans again."""
    entry = manifest.listed(run_id)
    probe = None
    if exp.search is not None and entry.stratum is not None:
        probe = search.Probe(entry.stratum, entry.levels[exp.search.factor], entry.why)
    return Run.from_entry(entry, params.variant_of(exp, entry.levels), nodes=tuple(exp.nodes or ()), probe=probe)


def _in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (JupyterLab or papermill), where a display can be updated."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


@dataclass(frozen=True)
class Table:
    """A table a notebook shows: HTML in Jupyter (every cell escaped, long texts wrapped), aligned text elsewhere."""

    index_name: str
    columns: list[str]
    rows: list[tuple[str, list[str]]]  # (index, cells)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html_text(c)}</th>" for c in [self.index_name, *self.columns])
        body = "".join("<tr><th>" + html_text(index) + "</th>" + "".join(
            f'<td style="text-align: left; white-space: pre-wrap">{html_text(c)}</td>' for c in cells)
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
    """The run's result as a two-column table for a notebook, the outcome line first, long texts in full."""
    rows = {"outcome": liveprogress.outcome_line(result)}
    rows |= {k: v for k, v in dataclasses.asdict(result).items() if v not in (None, [], {})}
    return Table("", ["value"], [(k, [str(v)]) for k, v in rows.items()])


def gpu_trace(run_dir: str | Path, run_id: str, draw: bool = True):
    """The run's GPU memory over time from its nvidia-smi samples (the fullest GPU at each sample), or None
    with a line saying why there is none. draw=False (what `launchlab run` passes) says where the trace is
    instead: the batch's summary draws every run's trace with the same figure, and drawing it here first cost
    each run of a batch about 1.5 s of pandas and matplotlib (bench/run_overhead.py)."""
    folder = rundir.RunDir(run_dir).run(run_id)
    if not draw:
        print(f"The GPU trace of this run is drawn in the batch's summary ({Path(run_dir) / 'summary.html'}, "
              f"GPU memory over time); to draw it here: runview.gpu_trace(run_dir, {run_id!r})")
        return None
    status = records.read_status(folder)
    if status is None or not status.done or not folder.samples().exists():
        print(f"No GPU trace: {folder.samples()} was not written (the run was not sampled, or never started).")
        return None
    import pandas as pd  # here: the run is over, and the kernel need not load these before it (see above)

    from launchlab.reporting import plots

    record = status.record
    samples = telemetry.tidy(telemetry.read_query_csv(folder.samples()), run_id, record.started)
    if samples.empty:
        print(f"No GPU trace: {folder.samples()} holds no sample.")
        return None
    runs = pd.DataFrame([{"run_id": run_id, "variant": record.variant, "repetition": record.repetition,
                          "status": record.status}])
    return plots.memory_timeline(samples, runs, simulated=record.simulated)


def rank_table(run_dir: str | Path, run_id: str) -> Table:
    """Per-rank fields parsed from a run's server log: one row per field, one column per TP rank (ranks are
    few and fields many, so the table fits the notebook's width)."""
    ranks = rundir.read_json(rundir.RunDir(run_dir).run(run_id).parsed)["ranks"]
    fields = list(dict.fromkeys(field for values in ranks.values() for field in values))
    return Table("field", [f"rank {r}" for r in ranks],
                 [(field, [_text(values.get(field)) for values in ranks.values()]) for field in fields])


def log_tail(run_dir: str | Path, run_id: str, lines: int = 15) -> str:
    path = rundir.RunDir(run_dir).run(run_id).log()
    if not path.exists():
        return "(no server log was collected)"
    with safefiles.open_regular(path) as fh:  # no link another user made, no FIFO waited on
        fh.seek(max(0, os.fstat(fh.fileno()).st_size - 64 * 1024))
        return "\n".join(fh.read().decode("utf-8", errors="replace").splitlines()[-lines:])
