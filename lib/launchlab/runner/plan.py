"""The run plan: variants × repetitions in interleaved order (A B A B …) with stable run ids; for a threshold
search, a plan that grows: the probes search.py asks for, appended round by round and recorded in the manifest.
And the plan as `launchlab run` selects it (--only, --repetitions) and shows it (--dry-run: nothing launched)."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from launchlab import masking, params, search
from launchlab.errors import ParamsError
from launchlab.params import MAX_RUNS, Experiment, Variant, baseline_variant, expand, plan_size, variant_of
from launchlab.store.manifest import Manifest
from launchlab.store.records import Run


def make_plan(exp: Experiment) -> list[Run]:
    """Every repetition round runs every variant once, so drift over time (thermal state, caches, other users
    of the box) spreads over all variants instead of landing on one. With several hosts, each repetition
    round runs on one host, so no variant sees one host more than another."""
    if exp.search is not None:  # the warm-ups and the first round of the search; the rest follows from its outcomes
        prior = {s: exp.search.prior for s in strata(exp)} if exp.search.prior is not None else None
        first = [p for r in search.step(exp.search.bounds, strata(exp), [], guides=prior) for p in r.next]
        return warmup_runs(exp) + probe_runs(exp, first, 1)
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
    return warmup_runs(exp) + runs


def warmup_runs(exp: Experiment) -> list[Run]:
    """`warmup: N`: the baseline launched N times on each host the plan uses, before any run of the plan (each
    host's runs go in plan order, so they are that host's first). They take no place in the plan's numbering
    (seq 0; repetition: which warm-up), so the compared runs keep the run ids they have without them."""
    baseline = baseline_variant(exp)
    if exp.warmup_levels is not None:  # a launch that starts where the baseline fails by design (a diagnosed one)
        baseline = variant_of(exp, {**baseline.levels, **exp.warmup_levels})
    if exp.search is not None:  # a search's baseline stratum at the high end of its range: a launch that starts
        baseline = probe_variant(exp, baseline.name, exp.search.high)
    nodes = tuple(exp.nodes or ())
    hosts = exp.host_names[:1] if nodes else exp.host_names
    return [Run(warmup_id(n, host, baseline.slug, len(hosts) > 1), 0, baseline, n, host, nodes, warmup=True)
            for host in hosts for n in range(1, exp.warmup + 1)]


def warmup_id(n: int, host: str, slug: str, several_hosts: bool) -> str:
    """A warm-up's run id: `warmup1_<baseline>`, with the host where the plan uses several (`warmup1-a_…`)."""
    return f"warmup{n}{f'-{host}' if several_hosts else ''}_{slug}"


def strata(exp: Experiment) -> list[str]:
    """The strata of a threshold search: every combination of the factors' levels, by variant name."""
    return [v.name for v in expand(exp)]


def probe_variant(exp: Experiment, stratum: str, value: str) -> Variant:
    """A stratum's variant with the searched flag set to value; the flag's value is a level of its own
    (`mem_fraction_static=0.744`), so it is a column of runs.parquet and part of the run id."""
    assert exp.search is not None
    base = next(v for v in expand(exp) if v.name == stratum)
    return variant_of(exp, {**base.levels, exp.search.factor: value})


def probe_runs(exp: Experiment, probes: list[search.Probe], first_seq: int) -> list[Run]:
    """The runs of one round of probes: every probe once per repetition, repetition by repetition, so the
    strata take turns (drift of the host affects them alike); repetition r runs on host r mod n."""
    assert exp.search is not None
    hosts = exp.host_names
    nodes = tuple(exp.nodes or ())
    runs: list[Run] = []
    for rep in range(1, exp.search.repetitions + 1):
        host = hosts[0] if nodes else hosts[(rep - 1) % len(hosts)]
        for probe in probes:
            variant = probe_variant(exp, probe.stratum, probe.value)
            seq = first_seq + len(runs)
            runs.append(Run(f"{seq:02d}_{variant.slug}_rep{rep}", seq, variant, rep, host, nodes, probe))
    return runs


def recorded_runs(exp: Experiment, manifest: Manifest) -> list[Run]:
    """The probes so far of a search, as its run directory's manifest lists them (searchbatch resumes from them)."""
    assert exp.search is not None
    return [Run.from_entry(entry, variant_of(exp, entry.levels), nodes=tuple(exp.nodes or ()),
                           probe=search.Probe(entry.stratum, entry.levels[exp.search.factor], entry.why))
            for entry in manifest.runs]


# -- the plan as `launchlab run` selects it (--only, --repetitions) and shows it (--dry-run)

def planned(params_path: str | Path, only: tuple[str, ...] = (), repetitions: int | None = None
            ) -> tuple[params.Experiment, list[Run]]:
    """The experiment and its plan, optionally with other repetitions and only some variants: `only` holds
    levels (`0.85`), factor=level pairs (`mem_fraction=0.85`) or variant names; a run is kept when each of
    its factors that `only` mentions is at one of the levels given."""
    exp = params.load(params_path)
    if exp.search is not None and (only or repetitions is not None):
        raise ParamsError(str(params_path), ["--only and --repetitions do not apply to a threshold search (`search:`); "
                                             "its repetitions are `search.repetitions`, its strata every combination "
                                             "of the factors' levels"])
    if repetitions is not None:
        exp = exp.model_copy(update={"repetitions": repetitions})
    plan = make_plan(exp)
    if not only:
        return exp, plan
    wanted: dict[str, set[str]] = {}
    for token in only:
        factor, _, level = token.partition("=") if "=" in token else ("", "", token)
        matches = [(f, lv) for f, levels in exp.factors.items() for lv in levels
                   if lv == level and (not factor or f == factor)]
        variants = [v for v in params.expand(exp) if token in (v.name, v.slug)]
        for v in variants:
            for f, lv in v.levels.items():
                wanted.setdefault(f, set()).add(lv)
        if not matches and not variants:
            known = ", ".join(f"{f}={lv}" for f, levels in exp.factors.items() for lv in levels)
            one = params.expand(exp)[0]
            raise ParamsError(str(params_path), [f"--only {token}: no such level or variant (levels: {known}; a "
                                                 f"variant: '{one.name}' or {one.slug})"])
        for f, lv in matches:
            wanted.setdefault(f, set()).add(lv)
    # warm-ups stay: they warm the host for whatever runs follow, and are never compared
    kept = [r for r in plan if r.warmup or all(r.variant.levels.get(f) in lvs for f, lvs in wanted.items())]
    # numbered in the selection, so its progress reads [1/2], [2/2] (the run ids keep their places in the full plan)
    seqs = iter(range(1, len(kept) + 1))
    return exp, [r if r.warmup else dataclasses.replace(r, seq=next(seqs)) for r in kept]


def compared(plan: list[Run]) -> list[Run]:
    """The runs of a plan that are compared: all but the warm-ups."""
    return [r for r in plan if not r.warmup]


def dry_run(params_path: str | Path, only: tuple[str, ...] = (), repetitions: int | None = None) -> str:
    """The plan as text: every run in order, and each variant's exact command and environment (secrets
    masked). Nothing is connected to or launched."""
    exp, plan = planned(params_path, only, repetitions)
    masker = masking.for_run(exp)
    extra = exp.secrets
    what = (f"threshold search over {exp.search.flag}, its first round of {len(plan)} runs (both ends of every "
            f"stratum; the next probes follow from their outcomes, at most {params.plan_size(exp).runs} runs in all)"
            if exp.search else f"{len(compared(plan))} runs, interleaved")
    warmups = [r for r in plan if r.warmup]
    if warmups:  # params `warmup_levels:` may warm up at another variant than the baseline: named as it is
        at = warmups[0].variant.name
        what += (f", after {len(warmups)} warm-up run(s) of "
                 f"{'the baseline' if at == params.baseline_variant(exp).name else at} (never compared)")
    lines = [f"{exp.experiment}: {what}, on host(s) {', '.join(exp.host_names)}"
             f"{' (SIMULATED)' if exp.simulated else ''} — nothing is launched (--dry-run)", ""]
    lines += [f"  [{'warm-up' if r.warmup else r.seq}] {r.run_id}  host {r.host}" for r in plan]
    for variant in {r.variant.name: r.variant for r in plan}.values():
        launch = params.render(exp, variant, port=0, run_id="RUN_ID", host=exp.host_name)
        lines += ["", f"{variant.name}:", "  argv: " + shlex.join(masker.argv(launch.argv, extra))]
        lines += [f"  env:  {k}={v}" for k, v in masker.env(launch.env, extra).items()]
        lines += [f"  patch: {p}" for p in variant.patches]
    lines += ["", "({port} is chosen per run; shown as 0)"]
    return "\n".join(lines)
