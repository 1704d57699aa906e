"""Did each factor level take effect? What the params asked for, against what the server's own log says.

Two kinds of check, both pure functions of the params and the parsed logs (parsed.json of each run):

- **argument**: every flag a factor's levels set is looked up in the server's own record of its arguments
  (SGLang's `server_args=ServerArgs(…)`, vLLM's `non-default args` / engine config). A level that sets
  `--mem-fraction-static 0.55` is confirmed by `mem_fraction_static=0.55`. A level that omits a flag another
  level sets bare (`--disable-custom-all-reduce`) expects it off (`False`); one that omits a valued flag
  leaves the server's default, which the kit cannot know, so nothing is checked.
- **custom all-reduce**: when a factor is about custom all-reduce (a level sets the server kind's flag that
  switches it off, ServerKind.custom_ar_off — SGLang's and vLLM's `--disable-custom-all-reduce` — or the factor's
  name says so and its levels are named on/off), each run's per-rank state from the log
  (active, disabled with a reason, failed) is compared with what the level meant. A server that disables
  custom all-reduce by itself (PCIe-only boxes with more than two GPUs) contradicts an "on" level: the
  comparison is then not of custom all-reduce at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from launchlab.logparse.kinds import KINDS, kinds_of
from launchlab.logparse.parsedlog import rank_order
from launchlab.params import Experiment, Variant, apply_flags, expand

CONFIRMED, CONTRADICTED, UNKNOWN = "confirmed", "contradicted", "unknown"
FAILED = "failed"  # the level took effect and its own code failed: what ended the launch (not a contradiction)
CUSTOM_AR_CHECK = "custom all-reduce"
_CUSTOM_AR_NAME = re.compile(r"custom.?a(ll.?)?r(educe)?|\bcar\b|allreduce|all_reduce", re.IGNORECASE)
_ON = {"on", "true", "enabled", "enable", "1", "yes"}
_OFF = {"off", "false", "disabled", "disable", "0", "no"}
_CUSTOM_AR_FAILURE = re.compile(r"custom_all_reduce|custom[ _-]?all[ _-]?reduce", re.IGNORECASE)
_NOT_SHOWN = "the log does not show it (the run ended before CUDA-graph capture, or it is not logged)"


def arg_name(flag: str, kind: str) -> str:
    """The attribute a server of this kind records a flag under: `--mem-fraction-static` → `mem_fraction_static`,
    a short form by the kind's own aliases (SGLang's `--tp` → `tp_size`)."""
    bare = flag.lstrip("-")
    return KINDS[kind].arg_aliases.get(bare, bare.replace("-", "_"))


def declared_args(exp: Experiment) -> set[str]:
    """The server arguments the factors set (by the name the server records them under), and the flag a threshold
    search varies: a difference in them between runs is the design, not a confound."""
    kind = exp.server.kind
    declared = {arg_name(flag, kind) for levels in exp.factors.values() for level in levels.values()
                for flag in level.flags}
    if exp.search is not None:
        declared.add(arg_name(exp.search.flag, kind))
    return declared


def _expected_flags(exp: Experiment, variant: Variant, flags: Iterable[str], boolean: set[str]) -> dict[str, object]:
    """What the rendered command says of each flag: its value, True (bare), False (absent but boolean)."""
    argv = apply_flags(list(exp.server.command), variant.flags)
    out: dict[str, object] = {}
    for flag in flags:
        if flag not in argv:
            if flag in boolean:
                out[flag] = False
            continue
        i = argv.index(flag)
        value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else True
        if isinstance(value, str) and "{" in value:
            continue  # a placeholder filled in per run ({port}): nothing fixed to compare
        out[flag] = value
    return out


def _same(expected: object, logged: str) -> bool:
    logged = logged.strip().strip("'\"")
    if isinstance(expected, bool):
        return logged.lower() == str(expected).lower()
    try:
        return abs(float(str(expected)) - float(logged)) < 1e-9
    except ValueError:
        return str(expected) == logged


def about_custom_ar(exp: Experiment, factor: str) -> bool:
    """The factor is about custom all-reduce: a level sets the kind's flag that switches it off, or its name says so
    and its levels are named on and off."""
    off = KINDS[exp.server.kind].custom_ar_off
    levels = exp.factors[factor]
    if off and any(off in lv.flags for lv in levels.values()):
        return True
    return bool(_CUSTOM_AR_NAME.search(factor)) and all(lv.lower() in _ON | _OFF for lv in levels)


def _custom_ar_intent(exp: Experiment, factor: str, level: str, variant: Variant) -> str | None:
    """"active" / "inactive" when the factor is about custom all-reduce, else None."""
    off = KINDS[exp.server.kind].custom_ar_off  # the server kind's own flag (logparse/), if it has one
    if off and any(off in lv.flags for lv in exp.factors[factor].values()):
        argv = apply_flags(list(exp.server.command), variant.flags)
        return "inactive" if off in argv else "active"
    if _CUSTOM_AR_NAME.search(factor):
        if level.lower() in _ON:
            return "active"
        if level.lower() in _OFF:
            return "inactive"
    return None


def ranks_text(ranks: Iterable[str]) -> str:
    """0, 1, 2, 3 → "0–3"; 0, 2, 5 → "0, 2, 5"; ranks keyed by pipeline stage ("pp1.2")
    follow in rank order, each named (a range of them would hide which stage)."""
    keys = sorted({str(r) for r in ranks}, key=rank_order)
    nums = [int(r) for r in keys if r.isdigit()]
    named = [r for r in keys if not r.isdigit()]
    if len(nums) > 2 and nums == list(range(nums[0], nums[-1] + 1)):
        return ", ".join([f"{nums[0]}–{nums[-1]}", *named])
    return ", ".join([*map(str, nums), *named])


def custom_ar_observed(parsed: dict) -> tuple[str | None, str]:
    """A run's custom all-reduce as its log shows it: ("active" | "inactive" | "failed" | None, what the log says).
    "failed": it was set up and its own code failed (at initialisation or in its kernel)."""
    states = parsed.get("custom_ar") or {}
    failed = {r: s for r, s in states.items() if s.get("state") == "failed"}
    disabled = {r: s for r, s in states.items() if s.get("state") == "disabled"}
    active = [r for r, s in states.items() if s.get("state") == "active"]
    if failed:
        why = next(iter(failed.values()))
        return "failed", (f"failed in its own code on ranks {ranks_text(failed)}"
                          f" ({why.get('reason') or 'error'}: {why.get('message', '')[:160]})")
    if disabled:
        why = next(iter(disabled.values()))
        return "inactive", f"disabled on ranks {ranks_text(disabled)} ({why.get('reason') or 'no reason given'})"
    if active:
        return "active", f"active on ranks {ranks_text(active)}"
    return _custom_ar_unlogged(parsed)


def _custom_ar_unlogged(parsed: dict) -> tuple[str | None, str]:
    """What a log that states no custom all-reduce state still says of it, as its server kind tells (a kind with a
    custom all-reduce of its own, ServerKind.custom_ar_off): none on one GPU (its TP-size argument, LogFacts.tp_size),
    and none where CUDA graphs were captured on several without the line registering them (GraphCapture)."""
    kinds = [k for k in kinds_of([parsed.get("server")]) if k.custom_ar_off]
    args = parsed.get("args") or {}
    tp = next((args[k.log_facts.tp_size] for k in kinds if k.log_facts.tp_size and args.get(k.log_facts.tp_size)), None)
    if tp is not None and str(tp).strip("'\"") == "1":
        return "inactive", "not used: one GPU (tp_size=1)"
    captures = [k.graph_capture for k in kinds if k.graph_capture]
    done = {f for capture in captures for f in capture.fields}
    captured = [r for r, fields in (parsed.get("ranks") or {}).items() if any(f in fields for f in done)]
    if captured and tp is not None and str(tp).isdigit() and int(tp) > 1:
        return "inactive", (f"CUDA graphs captured on ranks {ranks_text(captured)} without a "
                            f"{captures[0].registered} line")
    return None, _NOT_SHOWN


def level_checks(exp: Experiment, runs: list[dict], parsed: dict[str, dict]) -> list[dict]:
    """One row per (factor, level, check): the runs whose log confirms, contradicts or does not show it (a level
    that failed in its own code took effect: confirmed, and said). The verdict's rows come from its ledger
    (ledger.py), which adds what needs all the runs (a patch's instrumentation); this reads one run's log at a time
    (an import's levels against its log).

    runs: the finished runs ({run_id, levels}); parsed: parsed.json of each run, by run id."""
    by_levels = {tuple(sorted(v.levels.items())): v for v in expand(exp)}
    found = []
    for run in runs:
        variant = by_levels.get(tuple(sorted(run["levels"].items())))
        if variant is None:
            continue
        log = parsed.get(run["run_id"]) or {}
        found += [(run["run_id"], factor, level, check, state, why) for factor, level in variant.levels.items()
                  for check, state, why in run_checks(exp, variant, factor, level, log=log)]
    return rows(found)


def rows(found: Iterable[tuple[str, str, str, str, str, str]]) -> list[dict]:
    """The level checks' rows from each run's (run_id, factor, level, check, state, why), in the order first seen:
    a run whose level failed in its own code is among the confirmed (it took effect), and `detail` says so."""
    out: dict[tuple[str, str, str], dict] = {}
    for run_id, factor, level, check, state, why in found:
        row = out.setdefault((factor, level, check), {
            "factor": factor, "level": level, "check": check, "runs_confirmed": [], "runs_contradicted": [],
            "runs_unknown": [], "_why": [], "_failed": [], "_unknown": []})
        row[f"runs_{CONFIRMED if state == FAILED else state}"].append(run_id)
        if state == CONTRADICTED:
            row["_why"].append(f"{factor}={level}: {why} in run {run_id}")
        elif state == FAILED:
            row["_failed"].append((run_id, why))
        elif state == UNKNOWN and why:
            row["_unknown"].append(why)
    return [_with_detail(row) for row in out.values()]


def run_checks(exp: Experiment, variant, factor: str, level: str, *, log: dict):
    """(check, confirmed | contradicted | failed | unknown, why) for each thing one run's log can show of a level:
    every flag the factor touches (a value the server announces it replaced is contradicted, never confirmed by
    its argument dump), every environment variable it varies (whether the server is known to read it), and the
    custom all-reduce state where the level is about it."""
    args = log.get("args") or {}
    overrides = log.get("overrides") or {}
    touched = {f for lv in exp.factors[factor].values() for f in lv.flags}
    boolean = {f for lv in exp.factors[factor].values() for f, v in lv.flags.items() if v is True}
    for flag, want in _expected_flags(exp, variant, sorted(touched), boolean).items():
        name = arg_name(flag, exp.server.kind)
        if isinstance(overrides.get(name), dict):
            said = overrides[name]
            took = (f"it uses {name}={said['used']} instead" if said.get("used") is not None else
                    f"it ignores {flag}")
            yield f"{name}={want}", CONTRADICTED, f"the server announced {took} (\"{str(said.get('line', ''))[:200]}\")"
        elif name not in args:
            yield f"{name}={want}", UNKNOWN, ""
        elif _same(want, str(args[name])):
            yield f"{name}={want}", CONFIRMED, ""
        else:
            yield f"{name}={want}", CONTRADICTED, f"the server ran with {name}={args[name]}, not {want}"
    yield from _env_checks(exp, factor, level, log)
    if (intent := _custom_ar_intent(exp, factor, level, variant)) is not None:
        yield from _custom_ar_checks(intent, log)


def _custom_ar_checks(intent: str, log: dict):
    seen, what = custom_ar_observed(log)
    check = f"{CUSTOM_AR_CHECK} {intent}"
    if seen is None:
        yield check, UNKNOWN, ""
    elif seen == "failed" and intent == "active":
        # it was on and its own code failed: the level took effect — and what ended the launch, where the
        # launch ended of it; a server that went on without it ran another level
        if _ended_by_custom_ar(log):
            yield check, FAILED, f"custom all-reduce {what}, which ended the launch"
        else:
            yield check, CONTRADICTED, f"custom all-reduce {what} and the server went on without it"
    elif seen == intent:
        yield check, CONFIRMED, ""
    elif seen == "failed":
        yield check, CONTRADICTED, f"custom all-reduce was set up although the level turns it off: it {what}"
    else:
        yield check, CONTRADICTED, f"custom all-reduce was {what}"


def _env_checks(exp: Experiment, factor: str, level: str, log: dict):
    """The environment variables the factor's levels set differently, for this level: none is shown by a log, so
    each is `unknown`, with whether the server kind is known to read it (ServerKind.reads_env) — a variable it does
    not read sets nothing, and only what the log shows can say the level took effect (ledger.Ledger.varied)."""
    levels = exp.factors[factor]
    kind = KINDS[exp.server.kind]
    version = (log.get("log_facts") or {}).get("server_version")
    for name in sorted({n for lv in levels.values() for n in lv.env}):
        if len({lv.env.get(name) for lv in levels.values()}) < 2:
            continue  # the same at every level: it varies nothing
        value = levels[level].env.get(name)
        if value is None:
            continue  # a level that leaves it unset: what the others set says nothing of this one
        setting = kind.reads_env(name, version)
        said = f"{name}={value}"
        why = (f"{said}: {kind.name} reads it ({setting.sets}{'; ' + setting.note if setting.note else ''}), but no "
               "log line shows it" if setting is not None else
               f"{said}: {kind.name} is not known to read {name}, so it sets nothing the log could show")
        yield f"environment {name}", UNKNOWN, why


def _ended_by_custom_ar(log: dict) -> bool:
    """The launch ended of its custom all-reduce: the log's failure is custom all-reduce's (its reason, or its
    message naming the kernel)."""
    failure = log.get("failure") or {}
    reason, message = str(failure.get("reason") or ""), str(failure.get("message") or "")
    return reason.startswith("custom_allreduce") or bool(_CUSTOM_AR_FAILURE.search(message))


def _with_detail(row: dict) -> dict:
    """The row with what the logs say of it in words (`detail`)."""
    why, failed, unknown = row.pop("_why"), row.pop("_failed"), list(dict.fromkeys(row.pop("_unknown")))
    n = sum(len(row[k]) for k in ("runs_confirmed", "runs_contradicted", "runs_unknown"))
    parts = ["; ".join(why)] if why else []
    if unknown:  # what the kit knows of a setting no log shows (an environment variable)
        parts.append(f"not shown in any of the {n} runs: {'; '.join(unknown)}")
    if failed:
        said = dict.fromkeys(w for _, w in failed)
        parts.append(f"it took effect and failed in its own code in {len(failed)} of {n} runs "
                     f"({', '.join(r for r, _ in failed)}): {'; '.join(said)}")
    if not parts and row["runs_confirmed"]:
        unknown = f"; not shown in {len(row['runs_unknown'])}" if row["runs_unknown"] else ""
        parts.append(f"the server's log confirms it in {len(row['runs_confirmed'])} of {n} runs{unknown}")
    if not parts:
        parts.append(f"the server's log does not show it in any of the {n} runs")
    row["detail"] = "; ".join(parts)
    return row


def contradictions(checks: list[dict]) -> list[dict]:
    """Contradicted levels as confounds: the runs did not vary what the design says they varied."""
    return [{"kind": "level", "detail": c["detail"], "runs": sorted(c["runs_contradicted"])}
            for c in checks if c["runs_contradicted"]]


