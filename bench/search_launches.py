"""Launches per stratum of every shipped threshold search (params/*.yaml with `search:`), guided by the server's own
numbers (issue 30) against bisection alone — figures only, nothing asserted.

    .venv/bin/python bench/search_launches.py

A search whose hosts are all simulated runs twice on the simulated host, through the kit as `launchlab run --no-html`
runs it (batch.run_batch, in this process): guided, as shipped, then blind — the same kit with `searchbatch.guides`
answering nothing, which is the search before issue 30. Each prints its launches, the interval, the prediction and
what became of it, and the wall time of the whole search. A search that needs a real server (vLLM on a GPU) cannot
run here: it is replayed over the runs of its committed example (examples/: vLLM's made by bisection alone,
SGLang's by the guided search),
asking search.step with the guides its runs' logs give (thresholds.guides over the runs made so far) for each next
probe, and taking that probe's recorded outcome — while every value it asks for was recorded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import yaml

from launchlab import params, search
from launchlab.reporting import report
from launchlab.runner import batch, searchbatch
from launchlab.store import rundir
from launchlab.verdicts import frames, thresholds

ROOT = Path(__file__).resolve().parents[1]


def shipped() -> list[Path]:
    """The params files with a `search:` block (read as YAML first: an import's params file is no experiment)."""
    return [p for p in sorted((ROOT / "params").glob("*.yaml")) if "search" in (yaml.safe_load(p.read_text()) or {})]


def simulated(exp: params.Experiment) -> bool:
    return all(h.transport == "sim" for h in exp.hosts.values())


def run(path: Path, work: Path, *, guided: bool) -> tuple[list[dict], float]:
    """One whole search by the kit; its strata (verdict.json's thresholds) and its wall time."""
    keep = searchbatch.guides
    if not guided:
        searchbatch.guides = lambda exp, directory: {}  # the kit before issue 30: no prediction to follow
    try:
        tic = time.perf_counter()
        run_dir = batch.run_batch(path, out_root=work / ("guided" if guided else "blind"), html=False,
                                  say=lambda text: None)
        wall = time.perf_counter() - tic
    finally:
        searchbatch.guides = keep
    return rundir.read_json(rundir.RunDir(run_dir).verdict_file)["thresholds"]["strata"], wall


def interval(row: dict) -> str:
    return f"({row['interval_low']:g}, {row['interval_high']:g}]" if row["state"] == "converged" else row["state"]


def prediction(row: dict) -> str:
    if row.get("predicted_break_even") is None:
        return "none"
    held = {True: "held", False: "FAILED"}.get(row.get("prediction_held"), "not followed")
    return f"{row['predicted_break_even']:.4g}, {held}"


def bench_simulated(path: Path, work: Path) -> None:
    (guided, guided_s), (blind, blind_s) = run(path, work, guided=True), run(path, work, guided=False)
    print(f"{path.relative_to(ROOT)}: simulated host, each search run by the kit")
    print(f"  {'stratum':<16} {'guided':>6} {'blind':>6} {'blind computed':>15}  {'interval guided':<16} "
          f"{'interval blind':<16} prediction")
    for g, b in zip(guided, blind, strict=True):
        print(f"  {g['stratum']:<16} {g['launches']:>6} {b['launches']:>6} {g['blind_launches'] or '-':>15}  "
              f"{interval(g):<16} {interval(b):<16} {prediction(g)}")
    total_g, total_b = sum(r["launches"] for r in guided), sum(r["launches"] for r in blind)
    print(f"  {'all strata':<16} {total_g:>6} {total_b:>6}  — {total_g / total_b:.2f}× the launches; whole search "
          f"{guided_s:.0f} s guided, {blind_s:.0f} s blind on this machine (load {os.getloadavg()[0]:.1f})")


def replay(run_dir: Path) -> dict[str, tuple[int, str]]:
    """The guided search over a committed run directory's recorded outcomes: per stratum its launches, or where it
    asked for a value that was not recorded."""
    directory = rundir.RunDir.check(run_dir)
    exp = params.load(directory.experiment_file)
    rep = report.Report(directory.path, exp, directory.manifest(), frames.build(directory.path, exp))
    spec = exp.search
    recorded = thresholds.observations(rep.frames.runs, rep.planned, spec.factor)
    strata = directory.manifest().strata
    made: list[search.Observation] = []
    missing: dict[str, str] = {}
    while True:
        ids = {o.run_id for o in made}
        runs = rep.frames.runs[rep.frames.runs["run_id"].isin(ids)]
        budget = rep.budget[rep.budget["run_id"].isin(ids)] if len(rep.budget) else rep.budget
        guides = thresholds.guides(strata, runs, rep.planned, factor=spec.factor, budget=budget,
                                   resolution=spec.bounds.resolution, facts=rep.facts,
                                   tolerance_mib=exp.drain.tolerance_mib)
        results = search.step(spec.bounds, strata, made, spec.repetitions, guides=guides)
        asked = [p for r in results for p in r.next if p.stratum not in missing]
        if not asked:
            return {r.stratum: (len(r.runs), missing.get(r.stratum, f"{interval_of(r)}, prediction {r.prediction}"))
                    for r in results}
        for probe in asked:
            found = [o for o in recorded if o.stratum == probe.stratum and o.value == Decimal(probe.value)]
            if found:
                made += found
            else:
                missing[probe.stratum] = f"asked for {probe.value}, which the example did not record"


def interval_of(result: search.StratumResult) -> str:
    return f"({result.low}, {result.high}]" if result.state == search.CONVERGED else result.state


def bench_replayed(path: Path, work: Path) -> None:
    exp = params.load(path)
    examples = [d for d in sorted(ROOT.glob("examples/*/2*")) if (d / "experiment.yaml").is_file()
                and params.load(d / "experiment.yaml").experiment == exp.experiment]
    if not examples:
        print(f"{path.relative_to(ROOT)}: needs a real server and has no committed example to replay: not measured")
        return
    example = examples[-1]
    run_dir = work / "replayed" / example.name  # a copy: reading the frames again writes each run's parsed.json
    shutil.copytree(example, run_dir)
    guided = replay(run_dir)
    blind = {r["stratum"]: r for r in rundir.read_json(run_dir / "verdict.json")["thresholds"]["strata"]}
    print(f"{path.relative_to(ROOT)}: a real server ({exp.server.kind}), not runnable here — replayed over "
          f"{example.relative_to(ROOT)} (its recorded outcomes on a real GPU; blind: what bisection alone takes on "
          "them, search.blind_probes)")
    print(f"  {'stratum':<16} {'guided':>6} {'blind':>6}  guided search")
    for stratum, (launches, said) in guided.items():
        print(f"  {stratum:<16} {launches:>6} {blind[stratum]['blind_launches']:>6}  {said}")


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="launchlab-search-bench-"))
    os.environ["LAUNCHLAB_SIM_ROOT"] = str(work / "sim")
    try:
        print("Launches per stratum: guided by the server's own numbers (issue 30) against bisection alone")
        for path in shipped():
            exp = params.load(path)
            if simulated(exp):
                bench_simulated(path, work)
            else:
                bench_replayed(path, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
