"""The kit's own cost per run: one run of a server that is ready at once, on the simulated host, against the floor
of one notebook per run — an empty parameterized notebook run by papermill — measured in the same process.

    .venv/bin/python bench/run_overhead.py [--repeat 7]

The floor is run_variant.ipynb cut down to its parameters cell, executed with the same parameters through the same
call (`notebooks.execute`: same kernel, working folder and kernel options). The kit's run is what `launchlab run`
does for each run (`notebooks.run_notebook`: the run notebook, its progress thread, the check of its status.json)
of `bench/ready_at_once.yaml` (a one-GPU simulated box whose server skips its startup pauses). The two alternate,
after one warm-up of each that is not counted, so load from other processes on the machine falls on both alike.
Prints the medians, where the kit's time goes (kernel start to the end of its setup cell, its other cells, the
kernel's shutdown) and the ratio. Target (issue 12): ratio ≤ 1.3. Exit status 1 when it is missed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import nbformat

from launchlab import batch, hosts, notebooks, params, records, rundir
from launchlab.hosts import sim

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "bench" / "ready_at_once.yaml"
TARGET = 1.3


def floor_notebook(folder: Path) -> Path:
    """run_variant.ipynb with nothing but its parameters cell: the floor every run pays."""
    nb = nbformat.read(notebooks.notebooks_dir() / "run_variant.ipynb", as_version=4)
    nb.cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    path = folder / "floor.ipynb"
    nbformat.write(nb, path)
    return path


def phases(executed: Path) -> dict[str, float]:
    """Where a run notebook's time went, from papermill's own timestamps in the executed notebook."""
    nb = json.loads(executed.read_text())
    meta = nb["metadata"]["papermill"]

    def at(text: str) -> float:
        return datetime.fromisoformat(text).timestamp()

    cells = [c["metadata"]["papermill"] for c in nb["cells"] if c["metadata"].get("papermill", {}).get("start_time")]
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    run_cell = next((c["metadata"]["papermill"]["duration"] for c in code if "run_variant(" in "".join(c["source"])), 0.0)
    return {"kernel start": at(cells[0]["start_time"]) - at(meta["start_time"]),
            "run cell": run_cell,
            "other cells": at(cells[-1]["end_time"]) - at(cells[0]["start_time"]) - run_cell,
            "kernel shutdown": at(meta["end_time"]) - at(cells[-1]["end_time"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="counted pairs (after one warm-up pair)")
    args = ap.parse_args()

    exp, plan = batch.planned(PARAMS, repetitions=args.repeat + 1)
    work = Path(tempfile.mkdtemp(prefix="launchlab-overhead-"))
    box = sim.new_box()
    try:
        # the run directory and simulated box a batch makes (batch.run_batch), without its locks and report
        run_dir, _ = batch._open_run_dir(exp, plan, PARAMS, work / "outputs", None, box)
        rundir.update_json(rundir.RunDir(run_dir).manifest_file, {"sim_box": str(box)})
        connected = {name: hosts.connect(exp, name, sim_box=box) for name in exp.host_names}
        floor_nb = floor_notebook(work)
        kit_s: list[float] = []
        floor_s: list[float] = []
        parts: list[dict[str, float]] = []
        floor_parts: list[dict[str, float]] = []
        for i, run in enumerate(plan):
            digest = params.digest(PARAMS)

            def floor(run=run, digest=digest) -> float:
                tic = time.perf_counter()
                notebooks.execute(str(floor_nb), work / "floor-out.ipynb",  # an absolute template: used as it is
                                  {"experiment": str(PARAMS), "run_id": run.run_id, "run_dir": str(run_dir),
                                   "gpus": "", "params_sha256": digest, "draw_trace": False})  # as run_notebook passes
                return time.perf_counter() - tic

            def kit(run=run) -> float:
                tic = time.perf_counter()
                notebooks.run_notebook(exp, run, run_dir, connected, len(plan), lambda line: None, PARAMS)
                return time.perf_counter() - tic

            order = (floor, kit) if i % 2 == 0 else (kit, floor)
            took = {f.__name__: f() for f in order}
            folder = rundir.RunDir(run_dir).run(run.run_id)
            status = records.read_status(folder).record.status
            if status != "ready":
                print(f"run {run.run_id} ended {status}, not ready: see {folder.status}", file=sys.stderr)
                return 1
            if i == 0:
                continue  # the warm-up pair (first kernel start, first server start on this box)
            kit_s.append(took["kit"])
            floor_s.append(took["floor"])
            floor_parts.append(phases(work / "floor-out.ipynb"))
            parts.append({**phases(folder.notebook), "kit outside the notebook": took["kit"]
                          - json.loads(folder.notebook.read_text())["metadata"]["papermill"]["duration"]})
            print(f"  pair {i}: floor {took['floor']:.2f} s, kit {took['kit']:.2f} s", flush=True)
    finally:
        shutil.rmtree(box, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)

    floor_med, kit_med = statistics.median(floor_s), statistics.median(kit_s)
    ratio = kit_med / floor_med
    print(f"floor (empty parameterized notebook through papermill): median {floor_med:.2f} s over {len(floor_s)}")
    print(f"kit (one run of a server ready at once, simulated host): median {kit_med:.2f} s over {len(kit_s)}")
    for label, split in (("the floor's", floor_parts), ("the kit's run", parts)):
        print(f"where {label} time goes (medians): " + ", ".join(
            f"{name} {statistics.median(p[name] for p in split):.2f} s" for name in split[0]))
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"ratio kit/floor: {ratio:.2f} (target ≤ {TARGET}: {verdict})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
