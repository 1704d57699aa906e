"""Variants and rendering: the product of factor levels, and each variant's launch (argv, env, URLs) with the
placeholders filled in."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from launchlab.params import template
from launchlab.params.schema import Experiment


@dataclass(frozen=True)
class Variant:
    """One combination of factor levels and what it changes relative to the baseline command."""

    name: str
    levels: dict[str, str]
    flags: dict[str, str | bool] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    patches: tuple[str, ...] = ()
    instrument: bool = False  # the kind's instrumentation patch, for the version on the host (hosts/patching.py)

    @property
    def slug(self) -> str:
        if not self.levels:
            return "baseline"
        return ".".join(f"{f}-{lv}" for f, lv in self.levels.items())


def variant_name(levels: dict[str, str]) -> str:
    return ", ".join(f"{f}={lv}" for f, lv in levels.items()) or "baseline"


def expand(exp: Experiment) -> list[Variant]:
    """Variants in a fixed order: the listed `variants:`, or the product of factor levels in file order."""
    if exp.variants is not None:
        combos = [dict(v) for v in exp.variants]
    else:
        names = list(exp.factors)
        combos = [dict(zip(names, c, strict=True)) for c in itertools.product(*(exp.factors[n] for n in names))]
    variants = []
    for levels in combos:
        ordered = {f: levels[f] for f in exp.factors}
        flags: dict[str, str | bool] = {}
        env: dict[str, str] = {}
        for factor, level in ordered.items():
            flags.update(exp.factors[factor][level].flags)
            env.update(exp.factors[factor][level].env)
        patches = tuple(p for factor, level in ordered.items() for p in exp.factors[factor][level].patches)
        instrument = any(exp.factors[factor][level].instrument for factor, level in ordered.items())
        variants.append(Variant(variant_name(ordered), ordered, flags, env, patches, instrument))
    return variants


def variant_of(exp: Experiment, levels: dict[str, str]) -> Variant:
    """The variant of a run's levels as a manifest records them: each factor's level as `expand` makes it, and for
    a search's probe the searched flag set to its value (a level of its own: `mem_fraction_static=0.744`)."""
    chosen = {f: levels.get(f) for f in exp.factors}
    base = next((v for v in expand(exp) if v.levels == chosen), None)
    if base is None:
        from launchlab.errors import ParamsError

        raise ParamsError(exp.experiment, [f"no variant of the params has the levels {chosen} (the file changed "
                                           "since the run directory was made?)"])
    if exp.search is None or exp.search.factor not in levels:
        return base
    value = levels[exp.search.factor]
    probed = {**base.levels, exp.search.factor: value}
    return Variant(variant_name(probed), probed, {**base.flags, exp.search.flag: value}, dict(base.env), base.patches,
                   base.instrument)


def baseline_variant(exp: Experiment) -> Variant:
    variants = expand(exp)
    if exp.baseline is None:
        return variants[0]
    wanted = {f: exp.baseline[f] for f in exp.factors}
    return next(v for v in variants if v.levels == wanted)


@dataclass(frozen=True)
class LaunchSpec:
    """The rendered server launch: argv and env exactly as the server process must see them."""

    argv: tuple[str, ...]
    env: dict[str, str]
    health_url: str | None
    smoke_url: str | None = None


def apply_flags(argv: list[str], flags: dict[str, str | bool]) -> list[str]:
    """Set flags on a command: a string sets `--flag value` (replacing a value already there), True adds the
    bare flag, False removes the flag (and its value) from the command."""
    out = list(argv)
    for flag, value in flags.items():
        if flag in out:
            i = out.index(flag)
            has_value = i + 1 < len(out) and not out[i + 1].startswith("-")
            del out[i : i + (2 if has_value else 1)]
            if value is not False:
                out[i:i] = [flag] if value is True else [flag, value]
        elif value is True:
            out.append(flag)
        elif value is not False:
            out += [flag, value]
    return out


def master_addr(exp: Experiment) -> str:
    """{master_addr}: as given, else the first node's default, which its transport decides (an SSH host's
    address; loopback for sim and local nodes)."""
    if exp.master_addr:
        return exp.master_addr
    return exp.hosts[exp.host_names[0]].default_master_addr()


def render(exp: Experiment, variant: Variant, *, port: int, run_id: str, host: str, node_rank: int = 0,
           nnodes: int = 1, gpus: list[int] | None = None, per_task: dict[str, str] | None = None) -> LaunchSpec:
    """The launch of a variant; `gpus` (a GPU slot of the host) becomes CUDA_VISIBLE_DEVICES. `per_task`: values
    only the host knows when each task starts (a Slurm job's {node_rank}, {nnodes}, {master_addr}), as markers
    the host replaces then; a `master_addr` given in the params is kept.

    Every template (command token, flag value, env value, URL) is filled exactly once, before the flags are
    applied: a filled value is never parsed again, so `{{`/`}}` and JSON values reach the server as written.
    """
    values = {"port": str(port), "run_id": run_id, "host": host, "node_rank": str(node_rank), "nnodes": str(nnodes),
              "master_addr": master_addr(exp)}
    values.update({k: v for k, v in (per_task or {}).items() if not (k == "master_addr" and exp.master_addr)})
    command = [template.fill(t, values) for t in exp.server.command]
    flags = {k: (template.fill(v, values) if isinstance(v, str) else v) for k, v in variant.flags.items()}
    env = {k: template.fill(v, values) for k, v in {**exp.server.env, **variant.env}.items()}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    url = template.fill(exp.server.ready.health_url, values) if exp.server.ready.health_url else None
    smoke = template.fill(exp.server.smoke.url, values) if exp.server.smoke else None
    return LaunchSpec(tuple(apply_flags(command, flags)), env, url, smoke)
