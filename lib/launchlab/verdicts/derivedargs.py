"""Server arguments that follow from the declared levels: not confounds, said once.

A server derives some of its settings from others: vLLM's `compilation_config` and `kernel_config` change because
`--enforce-eager` was given, SGLang's default `mem_fraction_static` changes with `--cuda-graph-max-bs`. Such an
argument differs between runs exactly where a factor's level differs, so it is part of what the factor does,
not something else that changed. The rule: group the runs by their declared levels; when every group has one value
of the argument (and the groups do not all share it), the argument is a function of the levels. It is listed with
the smallest set of factors whose levels already determine it ("follows from `graphs`"). An argument that differs
between runs of the same levels stays a confound (confounds.log_differences).

With one run per level the rule cannot tell a derived value from a chance one; such an entry says so
(`repeated: false`), and a repetition of the batch settles it.
"""

from __future__ import annotations

from itertools import combinations

import pandas as pd

from launchlab.escaping import md_code
from launchlab.verdicts.confounds import shown, undeclared_args


def levels_of(runs: pd.DataFrame, factors: list[str]) -> dict[str, dict[str, str]]:
    """Each run's declared levels (runs.parquet: one column per factor), by run id."""
    present = [f for f in factors if f in runs]
    return {row["run_id"]: {f: str(row[f]) for f in present} for _, row in runs.iterrows()}


def _value(args: dict, name: str) -> str:
    return str(args[name]).strip("'\"")  # as log_differences compares it


def _determines(subset: tuple[str, ...], values: dict[str, str], levels: dict[str, dict[str, str]]
                ) -> dict[tuple[str, ...], set[str]] | None:
    """The argument's values per combination of the subset's levels, when each combination has one; else None."""
    groups: dict[tuple[str, ...], set[str]] = {}
    for run_id, value in values.items():
        groups.setdefault(tuple(levels[run_id].get(f, "") for f in subset), set()).add(value)
    return groups if all(len(v) == 1 for v in groups.values()) else None


def find(ids: list[str], parsed: dict[str, dict], declared: set[str], levels: dict[str, dict[str, str]]) -> list[dict]:
    """`[{arg, follows_from, values, runs, repeated}]` for every undeclared server argument (SGLang's `server_args`,
    vLLM's `non-default args` and engine config, as parsed.json records them) that differs between the runs
    `ids` and is a function of their declared levels. values: {level (or `f=a, g=b` for several factors): the
    value, cut to about 80 characters}; runs: the runs that state it; repeated: some level has two runs or more."""
    logged = [r for r in ids if r in parsed and r in levels]
    factors = list(dict.fromkeys(f for r in logged for f in levels[r]))
    found = []
    for name in undeclared_args(logged, parsed, declared):
        values = {r: _value(parsed[r]["args"], name) for r in logged if name in (parsed[r].get("args") or {})}
        if len(set(values.values())) < 2:
            continue
        for size in range(1, len(factors) + 1):
            hit = next(((s, g) for s in combinations(factors, size) if (g := _determines(s, values, levels))), None)
            if hit is None:
                continue
            subset, groups = hit
            keys = [", ".join(f"{f}={lv}" for f, lv in zip(subset, key, strict=True)) if len(subset) > 1 else key[0]
                    for key in groups]
            texts = shown([next(iter(v)) for v in groups.values()])
            counts = {k: sum(tuple(levels[r].get(f, "") for f in subset) == k for r in values) for k in groups}
            found.append({"arg": name, "follows_from": list(subset), "values": dict(zip(keys, texts, strict=True)),
                          "runs": sorted(values), "repeated": any(n >= 2 for n in counts.values())})
            break
    return found


def markdown(derived: list[dict]) -> str:
    """One line for report.md: each derived argument once, with the factors it follows from."""
    if not derived:
        return ""
    items = []
    for d in derived:
        said = f"{md_code(d['arg'])} follows from {' and '.join(md_code(f) for f in d['follows_from'])}"
        if not d["repeated"]:
            said += " (each level seen in one run only: a repetition would confirm it)"
        items.append(said)
    return ("**Server arguments that follow from the factors** (the server derives them from the declared flags; "
            "not confounds, values in `derived_args`): " + "; ".join(items) + ".")
