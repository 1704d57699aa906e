"""A threshold search run as a batch: round after round, the probes search.py asks for, each recorded in the
manifest before it is launched, until every stratum is decided.

The search's state is the finished runs of its run directory alone, so `--resume` first repeats the probes
that did not finish (an interruption, a kit error), then asks search.py again: no decided probe is repeated.
Before each round the finished probes' logs are read again for the break-even their server kind predicts
(`guides`: the report's own reading), which guides the next probes while it holds (search.py).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from launchlab import params, search
from launchlab.logparse.kinds import KINDS
from launchlab.params.searchspec import SearchSpec
from launchlab.runner import notebooks
from launchlab.runner import plan as plans
from launchlab.store import records, rundir
from launchlab.store.records import Run

RunAll = Callable[[list[Run], int], None]  # runs the given runs (of a plan of at most n runs) on the batch's hosts


def run_search(exp: params.Experiment, run_dir: Path, say: notebooks.Say, run_all: RunAll) -> list[search.StratumResult]:
    """Run the search to its end; return each stratum's result."""
    assert exp.search is not None
    directory = rundir.RunDir(run_dir)
    total = params.plan_size(exp).runs
    known = plans.recorded_runs(exp, directory.manifest())
    redo = [r for r in known if not records.finished(directory.run(r.run_id))]
    for run in known:
        if run not in redo:
            say(f"[{run.seq}/{total}] {run.run_id}  already done, skipped")
    run_all(redo, total)
    while True:
        followed = guides(exp, directory)
        results = search.step(exp.search.bounds, plans.strata(exp), observations(directory, known),
                              exp.search.repetitions, guides=followed)
        probes = [p for r in results for p in r.next]
        if not probes:
            for r in results:
                say(f"launchlab: {r.stratum}: {r.state}" + (f" in ({r.low}, {r.high}]" if r.state == search.CONVERGED
                                                            else f" — {r.note}" if r.note else "")
                    + cost(exp.search, r, followed.get(r.stratum)))
            return results
        new = plans.probe_runs(exp, probes, len(known) + 1)
        record_probes(directory, new)
        for probe in probes:
            say(f"launchlab: {probe.stratum}: probe {exp.search.flag} {probe.value} ({probe.why})")
        run_all(new, total)
        known += new


def observations(directory: rundir.RunDir, runs: list[Run]) -> list[search.Observation]:
    """The finished probes as the search sees them: ready or not, and None for a run that is no observation of
    the server (a kit error, an interruption)."""
    found = []
    for run in runs:
        status = records.read_status(directory.run(run.run_id))
        if status is None or not status.done or run.probe is None:
            continue
        record = status.record
        found.append(search.Observation(run.probe.stratum, Decimal(run.probe.value), run.run_id,
                                        search.success(record.status, record.failure_reason)))
    return found


def guides(exp: params.Experiment, directory: rundir.RunDir) -> dict[str, search.Guide]:
    """Each stratum's predicted break-even from the finished probes' logs, read as the report reads them (the
    frames, the kind's budget of the valid runs, thresholds.guides); none without a finished probe, or where the
    server kind predicts no break-even of the searched flag (its log is then not read between rounds)."""
    from launchlab.verdicts import analysis, budget, frames, thresholds  # pandas: loaded for a search only

    assert exp.search is not None
    if exp.search.prior is not None:  # the params' prediction guides every stratum (as thresholds.guides has the report
        # re-judge it): the runs' own figures are not read between rounds
        return {s: exp.search.prior for s in plans.strata(exp)}
    predicts = KINDS[exp.server.kind].break_even
    if predicts is None or predicts.arg != exp.search.factor or not directory.manifest().run_ids:
        return {}
    built = frames.build(directory.path, exp)
    planned = directory.manifest().runs
    checked = analysis.observations(built.runs, [*exp.factors, exp.search.factor], planned)
    valid = built.runs[built.runs["run_id"].isin(set(checked.loc[checked["valid"], "run_id"]))]
    facts = {r: rundir.read_json(directory.run(r).provenance) for r in built.runs["run_id"]
             if directory.run(r).provenance.exists()}
    return thresholds.guides(plans.strata(exp), built.runs, planned, factor=exp.search.factor,
                             budget=budget.recompute(exp.server.kind, built.events, valid, built.telemetry),
                             resolution=exp.search.bounds.resolution, facts=facts,
                             tolerance_mib=exp.drain.tolerance_mib)


def cost(spec: SearchSpec, result: search.StratumResult, guide: search.Guide | None = None) -> str:
    """What a stratum's answer cost, said at the end of the search: its launches, bisection's alone on the same
    outcomes, and what became of the prediction it followed (`guide`, named by value and source)."""
    text = f" — {len(result.runs)} launches"
    if result.state == search.CONVERGED and result.high is not None:
        text += f", bisection alone {search.blind_probes(spec.bounds, result.high) * spec.repetitions}"
    which = search.named(guide.prediction, guide.prior) if guide is not None else "the prediction"
    return text + {search.HELD: f"; {which} held", search.FAILED: f"; {which} failed",
                   search.NOT_FOLLOWED: "; the prediction was not followed"}.get(result.prediction, "")


def record_probes(directory: rundir.RunDir, runs: list[Run]) -> None:
    """The manifest lists every probe before it is launched: its run, stratum, value and why it was chosen."""
    manifest = directory.manifest()
    directory.update_manifest(run_ids=manifest.run_ids + [r.run_id for r in runs],
                              runs=manifest.runs + [r.manifest_entry() for r in runs])
