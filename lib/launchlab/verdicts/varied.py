"""The manipulation check: did a factor's levels vary anything the runs show?

A factor counts as varied where some run shows one of its levels taking effect (a level check confirmed, or its own
code failing: ledger.CONFIRMED, ledger.FAILED_IN_OWN_CODE), or where, holding the other factors, the runs at two of
its levels differ in something their logs give: the server's arguments (a value it announced it replaced counts as
the value it used), its custom all-reduce state, the memory each startup phase took, the KV pool, the GPU memory at
its peak (nvidia-smi; only where the server stood ready: a failed launch's sampled peak is a lower bound), how the
launch ended, an environment variable the server kind is known to read, or the time to ready (exact Mann-Whitney
per stratum, Fisher's method over the strata, Bonferroni over the pairs of levels: _startup_apart). Otherwise it
was **not shown to vary**: what it did to the launch is not known — never "does not change the launch outcome" —
and the check says what would show it.

Pure: the ledger's records (each run's `observed`) and the params in; a Varied record out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from launchlab.logparse.kinds import KINDS
from launchlab.logparse.kindstates import CUSTOM_AR as CUSTOM_AR_STATE
from launchlab.params import Experiment
from launchlab.store.records import STOOD_READY
from launchlab.verdicts import levelchecks

# what a run's `observed` holds (RunEvidence.observed), in the words the verdict names them
ARGS, CUSTOM_AR, OUTCOME, ENV, STARTUP, PEAK = ("argument dump", "custom all-reduce state", "outcome",
                                                "environment the server reads", "time to ready", "peak GPU memory")
PEAK_GAP_MIB, PEAK_GAP_SHARE = 256, 0.01  # two levels' peaks (nvidia-smi) told apart beyond both: a sampler's noise
# per-rank figures of a startup phase's memory and of the pool (their mean over ranks), and how far apart two levels'
# values must lie to be told apart (GiB; tokens and blocks: a share) — the drift of a log's figures between launches
MEMORY = {"dist_init_mem_gib": 0.05, "weights_mem_gib": 0.05, "graph_mem_gib": 0.05, "kv_gib": 0.05,
          "kv_avail_gib": 0.05, "kv_tokens": 0.01, "kv_blocks": 0.01, "max_total_num_tokens": 0.01}
SHARE_FIELDS = ("kv_tokens", "kv_blocks", "max_total_num_tokens")
GENERIC_SHOWN_BY = "a flag the server records in its argument dump, or a line of its log that states the level"


@dataclass(frozen=True)
class Varied:
    """A factor's manipulation check: `shown` (some run shows a level taking effect, or the levels' runs differ in
    `where`); else `why` says what was compared and what would show it."""

    factor: str
    shown: bool
    where: tuple[str, ...] = ()  # what told its levels apart (empty: a level check, or nothing)
    why: str = ""


def observed(row: dict, log: dict, *, outcome: str, env: dict[str, str], kind: str) -> dict[str, object]:
    """What one run's log and record give that could tell two levels apart (see the module's docstring)."""
    server = KINDS.get(log.get("server") or kind)
    out: dict[str, object] = {OUTCOME: outcome}
    args = log.get("args") or {}
    if args:
        used = {a: str(o.get("used")) for a, o in (log.get("overrides") or {}).items() if isinstance(o, dict)}
        volatile = server.volatile_args if server is not None else frozenset()
        out[ARGS] = frozenset((k, used.get(k, str(v).strip("'\""))) for k, v in args.items() if k not in volatile)
    state, _ = levelchecks.custom_ar_observed(log)
    if state is not None:
        out[CUSTOM_AR] = state
    for name in MEMORY:
        values = [f[name] for f in (log.get("ranks") or {}).values()
                  if isinstance(f.get(name), (int, float)) and math.isfinite(f[name])]
        if values:
            out[name] = sum(values) / len(values)
    if server is not None:
        version = (log.get("log_facts") or {}).get("server_version")
        out[ENV] = frozenset((n, v) for n, v in env.items() if server.reads_env(n, version) is not None)
    stood = row.get("status") in STOOD_READY  # a failed launch's sampled peak is a lower bound: it tells nothing
    for key, column in ((STARTUP, "startup_s"), (PEAK, "peak_mem_used_mib")):
        value = row.get(column)
        if isinstance(value, (int, float)) and math.isfinite(value) and (key != PEAK or stood):
            out[key] = float(value)
    return out


def _startup_apart(strata: list[dict[str, list[float]]]) -> bool:
    """Whether the times to ready tell some two levels apart, held the other factors (strata: each stratum's times
    by level). Each pair of levels: the exact Mann-Whitney test in every stratum with two runs or more a side, the
    strata's p combined by Fisher's method (their runs are apart), significant at 0.05 over the pairs of levels
    (Bonferroni). One test per stratum and pair, each at 0.05, called a factor that did nothing varied whenever one
    of them happened to separate (4 runs against 4: 2.9 % each); combined, a shift that every stratum shows counts
    more than one stratum's."""
    from scipy.stats import combine_pvalues  # only where a verdict asks: scipy.stats costs a second to import

    levels = sorted({lv for per in strata for lv in per})
    combined = []
    for i, a in enumerate(levels):
        for b in levels[i + 1:]:
            p = [_mann_whitney(per[a], per[b]) for per in strata if min(len(per.get(a, ())), len(per.get(b, ()))) >= 2]
            if p:
                combined.append(p[0] if len(p) == 1 else float(combine_pvalues(p, method="fisher").pvalue))
    return bool(combined) and min(combined) * len(combined) < 0.05


_EXACT_UP_TO = 8  # runs a side: beyond, the normal approximation is close, and the exact test costs seconds


def _mann_whitney(a: list[float], b: list[float]) -> float:
    """The two-sided p, exact for few runs a side: by enumeration without ties, else over every permutation
    (scipy's default turns to the normal approximation at a tie, too lenient with so few runs: 3 against 3 with a
    tie, 0.047 where exact is 0.1)."""
    from scipy.stats import PermutationMethod, mannwhitneyu

    if len(set(a) | set(b)) == 1:
        return 1.0
    if max(len(a), len(b)) > _EXACT_UP_TO:
        method = "asymptotic"
    elif len(set(a) | set(b)) < len(a) + len(b):  # a tie: all C(16, 8) = 12,870 orders at most, so no draw
        method = PermutationMethod(n_resamples=20_000)
    else:
        method = "exact"
    return float(mannwhitneyu(a, b, alternative="two-sided", method=method).pvalue)


def _apart(name: str, a: list, b: list) -> bool:
    """Whether two levels' values of one observable tell them apart (each level's runs with a value); not the time
    to ready, which is judged over all strata at once (_startup_apart)."""
    if not a or not b:
        return False
    if name in MEMORY or name == PEAK:
        if name == PEAK:
            gap = max(PEAK_GAP_MIB, PEAK_GAP_SHARE * max(map(abs, a + b)))
        else:
            gap = MEMORY[name] * (max(map(abs, a + b)) if name in SHARE_FIELDS else 1.0)
        return min(b) - max(a) > gap or min(a) - max(b) > gap
    return not set(a) & set(b)


def check(runs: Iterable, factor: str, factors: tuple[str, ...], *, exp: Experiment | None) -> Varied:
    """The manipulation check of one factor over the ledger's runs (ledger.RunEvidence)."""
    from launchlab.verdicts.ledger import CONFIRMED, FAILED_IN_OWN_CODE

    observations = [r for r in runs if r.observation and r.declared.get(factor) is not None]
    if any(r.levels.get(factor) is not None and r.levels[factor].state in (CONFIRMED, FAILED_IN_OWN_CODE)
           for r in observations):
        return Varied(factor, True)
    others = [f for f in factors if f != factor]
    strata: dict[tuple, dict[str, list]] = {}
    for r in observations:
        held = tuple(r.declared.get(f) for f in others)
        strata.setdefault(held, {}).setdefault(r.declared[factor], []).append(r.observed)
    compared = [per for per in strata.values() if len(per) > 1]
    if not compared:  # no stratum has two levels observed: nothing to check (the decision says it was not compared)
        return Varied(factor, True)
    names = sorted({k for per in compared for runs_ in per.values() for o in runs_ for k in o}, key=_order)
    where = [n for n in names if _told_apart(n, compared)]
    if where:
        return Varied(factor, True, tuple(where))
    overridden = _overridden(observations, factor)
    if len(overridden) == len(observations):  # no level took: that is the whole story
        return Varied(factor, False, (), f"the server overrode every level of {factor} in every run — "
                                         + "; ".join(dict.fromkeys(overridden)))
    return Varied(factor, False, (), _why(factor, names, exp) + (
        f"; the server overrode the level in {len(overridden)} of {len(observations)} runs: "
        + "; ".join(dict.fromkeys(overridden)) if overridden else ""))


def _told_apart(name: str, compared: list[dict[str, list[dict]]]) -> bool:
    """Whether the observable tells two of the factor's levels apart in some stratum (compared: each stratum's
    runs' observations by level); the time to ready over all strata at once (_startup_apart)."""
    if name == STARTUP:
        return _startup_apart([{lv: [o[name] for o in runs_ if name in o] for lv, runs_ in per.items()}
                               for per in compared])
    return any(_apart(name, [o[name] for o in a if name in o], [o[name] for o in b if name in o])
               for per in compared for a, b in _pairs(list(per.values())))


def _overridden(observations: list, factor: str) -> list[str]:
    """What the server did with each level it overrode (the level checks' words), run by run."""
    from launchlab.verdicts.ledger import OVERRIDDEN

    return [r.levels[factor].detail for r in observations
            if r.levels.get(factor) is not None and r.levels[factor].state == OVERRIDDEN]


def _pairs(items: list) -> Iterable[tuple]:
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            yield a, b


def _order(name: str) -> tuple[int, str]:
    fixed = [ARGS, CUSTOM_AR, *MEMORY, PEAK, OUTCOME, ENV, STARTUP]
    return (fixed.index(name) if name in fixed else len(fixed), name)


def _words(names: list[str]) -> str:
    said = [n for n in names if n not in MEMORY]
    memory = [n for n in names if n in MEMORY]
    if memory:
        said.insert(min(2, len(said)), f"memory and pool per phase ({', '.join(memory)})")
    return ", ".join(said) or "nothing: no log of theirs gives a figure"


def _why(factor: str, names: list[str], exp: Experiment | None) -> str:
    """Why the factor was not shown to vary, and what would show it: the settings its levels use that the server is
    not known to read, and how the log shows the state the factor is about (the kind's table, ServerKind.states)."""
    said = (f"no run shows any level of {factor} taking effect, and its runs at every level are not told apart by "
            f"anything their logs give ({_words(names)})")
    if exp is None or factor not in exp.factors:
        return said + f"; what would show it: {GENERIC_SHOWN_BY}"
    kind = KINDS[exp.server.kind]
    unread = sorted({n for lv in exp.factors[factor].values() for n in lv.env if kind.reads_env(n) is None})
    if unread:
        said += (f"; {', '.join(unread)} {'is' if len(unread) == 1 else 'are'} not known to be read by {kind.name} "
                 "(its table of settings), so setting it may change nothing")
    state = _state_of(exp, factor)
    if state is not None:
        flags = [s.name for s in state.settings if s.name.startswith("-")]
        return (said + f"; what would show it: {state.shown_by}" +
                (f"; the flags that set it, which the server records: {', '.join(flags)}" if flags else ""))
    return said + f"; what would show it: {GENERIC_SHOWN_BY}"


def _state_of(exp: Experiment, factor: str):
    """The kind's state (ServerKind.states) the factor is about: custom all-reduce where the level checks take it
    for that, else the state one of its flags sets."""
    kind = KINDS[exp.server.kind]
    if levelchecks.about_custom_ar(exp, factor):
        return kind.state(CUSTOM_AR_STATE)
    flags = {f for lv in exp.factors[factor].values() for f in lv.flags}
    return next((s for s in kind.states if flags & {x.name for x in s.settings}), None)
