"""The notebook side of one run: what run_variant.ipynb calls (`run_variant`, with its live progress) and what
it shows of the run — its record, its GPU trace, its per-rank fields and the end of its log."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd
from pandas.io.formats.style import Styler

from launchlab import hosts, lifecycle, liveprogress, params, plots, records, rundir, telemetry
from launchlab.errors import ParamsError
from launchlab.hosts import sim
from launchlab.plan import find_run, make_plan
from launchlab.records import RunRecord


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
    plan = make_plan(exp)
    run = find_run(plan, run_id) if run_id else plan[0]
    slot = [int(g) for g in gpus.split(",")] if gpus else None
    box = rundir.RunDir(run_dir).manifest().get("sim_box")  # the batch's simulated machine
    own_box = box is None and any(exp.hosts[h].transport == "sim" for h in run.hosts)
    if own_box:  # a run notebook executed by hand: a simulated machine of its own, gone when the run is
        box = sim.new_box()
    folder = rundir.RunDir(run_dir).run(run.run_id)
    live = _in_kernel() if live is None else live
    show = liveprogress.LiveProgress(folder, exp.server.kind, exp.server.rules()) if live else contextlib.nullcontext()
    try:
        with show:
            return lifecycle.run_one(exp, run, Path(run_dir), {name: hosts.connect(exp, name, sim_box=box)
                                                                for name in run.hosts}, gpus=slot)
    finally:
        if own_box:
            shutil.rmtree(box, ignore_errors=True)


def _in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (JupyterLab or papermill), where a display can be updated."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def summary_table(result: RunRecord) -> Styler:
    """The run's result as a two-column table for a notebook, the outcome line first, long texts in full."""
    rows = {"outcome": liveprogress.outcome_line(result)}
    rows |= {k: v for k, v in dataclasses.asdict(result).items() if v not in (None, [], {})}
    frame = pd.DataFrame({"value": [str(v) for v in rows.values()]}, index=list(rows))
    return frame.style.format(escape="html").set_properties(**{"text-align": "left", "white-space": "pre-wrap"})


def gpu_trace(run_dir: str | Path, run_id: str):
    """The run's GPU memory over time from its nvidia-smi samples (the fullest GPU at each sample), or None
    with a line saying why there is none."""
    folder = rundir.RunDir(run_dir).run(run_id)
    status = records.read_status(folder)
    if status is None or not status.done or not folder.samples().exists():
        print(f"No GPU trace: {folder.samples()} was not written (the run was not sampled, or never started).")
        return None
    record = status.record
    samples = telemetry.tidy(telemetry.read_query_csv(folder.samples()), run_id, _started(record))
    if samples.empty:
        print(f"No GPU trace: {folder.samples()} holds no sample.")
        return None
    runs = pd.DataFrame([{"run_id": run_id, "variant": record.variant, "repetition": record.repetition,
                          "status": record.status}])
    return plots.memory_timeline(samples, runs, simulated=record.simulated)


def _started(record: RunRecord) -> datetime | None:
    """When the server was started, on the host's clock (what telemetry.parquet's t_s counts from)."""
    return datetime.fromisoformat(record.server_started_at[:26]) if record.server_started_at else None


def rank_table(run_dir: str | Path, run_id: str) -> pd.DataFrame:
    """Per-rank fields parsed from a run's server log: one row per field, one column per TP rank (ranks are
    few and fields many, so the table fits the notebook's width)."""
    parsed = rundir.read_json(rundir.RunDir(run_dir).run(run_id).parsed)
    return pd.DataFrame.from_dict(parsed["ranks"], orient="columns").rename_axis("field").rename(
        columns=lambda r: f"rank {r}")


def log_tail(run_dir: str | Path, run_id: str, lines: int = 15) -> str:
    path = rundir.RunDir(run_dir).run(run_id).log()
    if not path.exists():
        return "(no server log was collected)"
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - 64 * 1024))
        return "\n".join(fh.read().decode("utf-8", errors="replace").splitlines()[-lines:])
