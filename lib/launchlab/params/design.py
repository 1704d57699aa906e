"""Checks across the fields of an experiment: names, references between hosts, nodes, factors, variants and the
baseline, placeholders, and the size of the plan — computed from the counts, never by building the plan.

Each problem carries the field path it is about, so the loader can point at its line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launchlab import fields, search
from launchlab.params import template

if TYPE_CHECKING:
    from launchlab.params.schema import Experiment

FieldPath = tuple[str | int, ...]

MAX_NAME_CHARS = fields.MAX_NAME_CHARS
MAX_RUNS = 10_000  # one params file; a week of 1-minute launches
MAX_RUN_ID_CHARS = 200  # a run id is a folder name (255 bytes at most on common file systems)


class DesignError(ValueError):
    """The experiment's fields do not fit together; `problems` lists (field path, message) pairs."""

    def __init__(self, problems: list[tuple[FieldPath, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{dotted(path)}: {message}" for path, message in problems))


def dotted(path: FieldPath) -> str:
    """A field path as the user reads it: `factors.mem.0.9.flags`, `variants[2]`."""
    return ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in path).replace(".[", "[") or "(top level)"


def slug_problem(what: str, value: str, limit: int = MAX_NAME_CHARS) -> str | None:
    """Why `value` cannot be the slug `what` names (it becomes a folder name or part of a run id), or None."""
    return fields.SLUG.problem(what, value, limit)


@dataclass(frozen=True)
class PlanSize:
    """How many runs a plan has: variants × repetitions; for a threshold search, the most it can take:
    strata (variants) × probed values per stratum (probes) × runs per probe (repetitions)."""

    variants: int
    repetitions: int
    probes: int = 1

    @property
    def runs(self) -> int:
        return self.variants * self.probes * self.repetitions


def plan_size(exp: Experiment) -> PlanSize:
    """The size of the plan, from the number of levels; nothing is expanded."""
    variants = len(exp.variants) if exp.variants is not None else math.prod(len(lv) for lv in exp.factors.values())
    if exp.search is not None:
        return PlanSize(variants, exp.search.repetitions,
                        search.max_probes(exp.search.bounds, guided=exp.server.predicts(exp.search.factor),
                                          prior=exp.search.predicted is not None))
    return PlanSize(variants, exp.repetitions)


def problems(exp: Experiment) -> list[tuple[FieldPath, str]]:
    """Every cross-field problem of an experiment whose fields each validated."""
    return (_host_problems(exp) + _design_problems(exp) + _placeholder_problems(exp) + _search_problems(exp)
            + _size_problems(exp))


def _host_problems(exp: Experiment) -> list[tuple[FieldPath, str]]:
    found: list[tuple[FieldPath, str]] = []
    defined = ", ".join(exp.hosts)
    if exp.host is None and exp.nodes is None and len(exp.hosts) > 1:
        found.append((("host",), f"several hosts are defined ({defined}): say which to use with `host:` "
                                 "(a name, or a list: repetitions are spread over them)"))
    if isinstance(exp.host, list) and not exp.host:
        found.append((("host",), f"is an empty list; name the host(s) to use, e.g. [{next(iter(exp.hosts))}]"))
    for field, names in (("host", [exp.host] if isinstance(exp.host, str) else exp.host or []),
                         ("nodes", exp.nodes or [])):
        for name in names:
            if problem := slug_problem("host name", name):
                found.append(((field,), problem))
            elif name not in exp.hosts:
                found.append(((field,), f"host `{name}` is not defined under hosts: ({defined})"))
    for name, spec in exp.hosts.items():
        slots = spec.gpu_slots or []
        used = [g for slot in slots for g in slot]
        if any(not slot for slot in slots) or len(used) != len(set(used)):
            found.append((("hosts", name, "gpu_slots"), "every slot needs its own GPUs (no GPU in two slots)"))
        if slots and exp.nodes is not None:
            found.append((("hosts", name, "gpu_slots"), "not supported for multi-node servers"))
        if slots and spec.gpus is not None and (beyond := sorted({g for g in used if g >= spec.gpus})):
            # the run would start with CUDA_VISIBLE_DEVICES naming a GPU that is not there, and fail as a kit error
            found.append((("hosts", name, "gpu_slots"), f"names GPU(s) {', '.join(map(str, beyond))}, but host "
                          f"`{name}` has {spec.gpus} GPU(s) (0–{spec.gpus - 1}, its `gpus:`); use GPUs of the host, "
                          "or raise `gpus:` if it has more" if spec.gpus else
                          f"names GPU(s) {', '.join(map(str, beyond))}, but host `{name}` has no GPU (`gpus: 0`)"))
    if exp.nodes is not None:
        if exp.host is not None:
            found.append((("nodes",), "`nodes:` (one server over several hosts) and `host:` exclude each other"))
        if len(exp.nodes) < 2 or len(set(exp.nodes)) != len(exp.nodes):
            found.append((("nodes",), "list two or more different hosts, node rank 0 first"))
    return found


def _design_problems(exp: Experiment) -> list[tuple[FieldPath, str]]:
    found: list[tuple[FieldPath, str]] = []
    for i, variant in enumerate(exp.variants or []):
        found += [(("variants", i), p) for p in _level_problems(exp, variant)]
    if exp.warmup_levels is not None:  # the baseline's levels, these changed
        levels = {**(exp.baseline or {}), **exp.warmup_levels}
        found += [(("warmup_levels",), p) for p in _level_problems(exp, levels)]
        if exp.variants is not None and levels not in exp.variants:
            found.append((("warmup_levels",), "is not one of the listed variants"))
    if exp.baseline is not None:
        found += [(("baseline",), p) for p in _level_problems(exp, exp.baseline)]
        if exp.variants is not None and exp.baseline not in exp.variants:
            found.append((("baseline",), "is not one of the listed variants"))
    elif exp.factors:
        found.append((("baseline",), "is required when factors are given, e.g. {" + ", ".join(
            f"{f}: {next(iter(levels))!r}" for f, levels in exp.factors.items()) + "}"))
    return found


def _level_problems(exp: Experiment, levels: dict[str, str]) -> list[str]:
    found = []
    for factor, level in levels.items():
        if factor not in exp.factors:
            found.append(f"unknown factor `{factor}` (factors: {', '.join(exp.factors) or 'none'})")
        elif level not in exp.factors[factor]:
            found.append(f"factor `{factor}` has no level `{level}` (levels: {', '.join(exp.factors[factor])})")
    missing = [f for f in exp.factors if f not in levels]
    if missing:
        found.append(f"names no level for factor(s) {', '.join(missing)}")
    return found


def _placeholder_problems(exp: Experiment) -> list[tuple[FieldPath, str]]:
    """Every template the renderer fills, parsed by the renderer's own parser."""
    texts: list[tuple[FieldPath, str]] = [(("server", "command", i), t) for i, t in enumerate(exp.server.command)]
    texts += [(("server", "env", k), v) for k, v in exp.server.env.items()]
    if exp.server.ready.health_url:
        texts.append((("server", "ready", "health_url"), exp.server.ready.health_url))
    if exp.server.smoke:
        texts.append((("server", "smoke", "url"), exp.server.smoke.url))
    for factor, levels in exp.factors.items():
        for name, level in levels.items():
            texts += [(("factors", factor, name, "flags", k), v) for k, v in level.flags.items() if isinstance(v, str)]
            texts += [(("factors", factor, name, "env", k), v) for k, v in level.env.items()]
    return [(path, problem) for path, text in texts for problem in template.problems(text)]


def _search_problems(exp: Experiment) -> list[tuple[FieldPath, str]]:
    """The searched flag is the search's alone, and numeric where the command already sets it."""
    spec = exp.search
    if spec is None:
        return []
    found: list[tuple[FieldPath, str]] = []
    for factor, levels in exp.factors.items():
        if factor == spec.factor:
            found.append((("factors", factor), f"is the name the searched flag {spec.flag} gets in runs.parquet and "
                                               "run ids; rename the factor"))
        for name, level in levels.items():
            if spec.flag in level.flags:
                found.append((("factors", factor, name, "flags", spec.flag),
                              "is the searched flag: the search sets it on every probe; remove it from this level"))
    command = list(exp.server.command)
    if spec.flag in command:
        i = command.index(spec.flag)
        value = command[i + 1] if i + 1 < len(command) else ""
        try:
            float(value)
        except ValueError:
            found.append((("server", "command", i), f"sets {spec.flag} to {value[:40]!r}, which is not a number; "
                                                    "the searched flag must be numeric"))
    if exp.repetitions != 1:
        found.append((("repetitions",), "with `search:`, the runs per probed value are `search.repetitions`; "
                                        "remove the top-level `repetitions`"))
    return found


def _size_problems(exp: Experiment) -> list[tuple[FieldPath, str]]:
    size = plan_size(exp)
    found: list[tuple[FieldPath, str]] = []
    if size.runs > MAX_RUNS and exp.search is not None:
        found.append((("search",), f"the search can take {size.variants:,} strata × {size.probes} probes × "
                                   f"{size.repetitions} repetition(s) = {size.runs:,} runs, more than the limit of "
                                   f"{MAX_RUNS:,}; fewer factors, a coarser resolution or fewer repetitions"))
        return found
    if size.runs > MAX_RUNS:
        found.append((("repetitions",) if size.variants <= MAX_RUNS else ("factors",),
                      f"the plan has {size.variants:,} variant(s) × {size.repetitions:,} repetition(s) = "
                      f"{size.runs:,} runs, more than the limit of {MAX_RUNS:,} runs per params file; list the "
                      "combinations you need under `variants:`, drop factors or levels, or lower `repetitions`"))
        return found  # the run ids below would be counted over a plan that is refused anyway
    slug = _longest_slug(exp)
    if exp.search is not None:  # a probe's run id adds the flag's value: `.mem_fraction_static-0.7438`
        slug += f".{exp.search.factor}-{exp.search.high}{exp.search.resolution}"
    longest = len(f"{max(size.runs, 10)}_{slug}_rep{size.repetitions}")
    if exp.warmup:  # plan.warmup_id: the baseline's slug is at most the longest
        longest = max(longest, len(f"warmup{exp.warmup}-{max(exp.host_names, key=len)}_{slug}"))
    if longest > MAX_RUN_ID_CHARS:
        found.append((("factors",), f"run ids would be up to {longest} characters (factor and level names joined), "
                                    f"more than {MAX_RUN_ID_CHARS}; a run id names a folder — shorten factor or "
                                    "level names"))
    return found


def _longest_slug(exp: Experiment) -> str:
    """The longest Variant.slug of the plan (`factor-level.factor-level`), without expanding the product."""
    if not exp.factors:
        return "baseline"
    if exp.variants is not None:
        combos = [{f: v.get(f, "") for f in exp.factors} for v in exp.variants]
        return max((".".join(f"{f}-{lv}" for f, lv in c.items()) for c in combos), key=len, default="baseline")
    return ".".join(f"{f}-{max(levels, key=len)}" for f, levels in exp.factors.items())
