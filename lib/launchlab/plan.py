"""The run plan: variants × repetitions in interleaved order (A B A B …) with stable run ids."""

from __future__ import annotations

from dataclasses import dataclass

from launchlab.errors import ParamsError, RunDirError
from launchlab.params import MAX_RUNS, Experiment, Variant, expand, plan_size


@dataclass(frozen=True)
class Run:
    """One launch of one variant: the unit papermill executes and the row of runs.parquet."""

    run_id: str
    seq: int
    variant: Variant
    repetition: int
    host: str
    nodes: tuple[str, ...] = ()  # a multi-node run: its hosts in node-rank order (host is nodes[0])

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.nodes or (self.host,)


def make_plan(exp: Experiment) -> list[Run]:
    """Every repetition round runs every variant once, so drift over time (thermal state, caches, other users
    of the box) spreads over all variants instead of landing on one. With several hosts, each repetition
    round runs on one host, so no variant sees one host more than another."""
    size = plan_size(exp)
    if size.runs > MAX_RUNS:  # validation refuses these; an Experiment changed after it (model_copy) is not
        raise ParamsError(exp.experiment, [f"the plan has {size.variants:,} variant(s) × {size.repetitions:,} "
                                           f"repetition(s) = {size.runs:,} runs, more than the limit of {MAX_RUNS:,}"])
    variants = expand(exp)
    hosts = exp.host_names
    nodes = tuple(exp.nodes or ())
    runs = []
    for rep in range(1, exp.repetitions + 1):
        host = hosts[0] if nodes else hosts[(rep - 1) % len(hosts)]  # a whole replicate per host: balanced
        for variant in variants:
            seq = len(runs) + 1
            runs.append(Run(f"{seq:02d}_{variant.slug}_rep{rep}", seq, variant, rep, host, nodes))
    return runs


def find_run(plan: list[Run], run_id: str) -> Run:
    for run in plan:
        if run.run_id == run_id:
            return run
    known = ", ".join(r.run_id for r in plan)
    raise RunDirError(f"run id {run_id!r} is not in the plan of this params file (runs: {known}); pass one of "
                      "those, or an empty run_id for the first")
