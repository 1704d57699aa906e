"""The notebook side of one run: what run_variant.ipynb calls (`run_variant`) and what it shows of the run —
its record, its per-rank fields and the end of its log."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pandas as pd

from launchlab import hosts, lifecycle, params, rundir
from launchlab.errors import ParamsError
from launchlab.hosts import sim
from launchlab.plan import find_run, make_plan
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
    plan = make_plan(exp)
    run = find_run(plan, run_id) if run_id else plan[0]
    slot = [int(g) for g in gpus.split(",")] if gpus else None
    box = rundir.RunDir(run_dir).manifest().get("sim_box")  # the batch's simulated machine
    own_box = box is None and any(exp.hosts[h].simulated for h in run.hosts)
    if own_box:  # a run notebook executed by hand: a simulated machine of its own, gone when the run is
        box = sim.new_box()
    try:
        return lifecycle.run_one(exp, run, Path(run_dir), {name: hosts.connect(exp, name, sim_box=box)
                                                            for name in run.hosts}, gpus=slot)
    finally:
        if own_box:
            shutil.rmtree(box, ignore_errors=True)


def summary_table(result: RunRecord) -> pd.DataFrame:
    """The run's result as a two-column table for a notebook."""
    rows = {k: v for k, v in dataclasses.asdict(result).items() if v not in (None, [], {})}
    return pd.DataFrame({"value": [str(v) for v in rows.values()]}, index=list(rows))


def rank_table(run_dir: str | Path, run_id: str) -> pd.DataFrame:
    """Per-rank fields parsed from a run's server log (one row per TP rank)."""
    parsed = rundir.read_json(rundir.RunDir(run_dir).run(run_id).parsed)
    return pd.DataFrame.from_dict(parsed["ranks"], orient="index").rename_axis("rank")


def log_tail(run_dir: str | Path, run_id: str, lines: int = 15) -> str:
    path = rundir.RunDir(run_dir).run(run_id).log()
    if not path.exists():
        return "(no server log was collected)"
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - 64 * 1024))
        return "\n".join(fh.read().decode("utf-8", errors="replace").splitlines()[-lines:])
