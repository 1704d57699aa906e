"""Consistency checks across the evidence, as findings: what the server's own instrumentation printed against the
outcome and against the kind's recomputation of the same quantity from the log; a predicted break-even against
the outcomes observed on either side of it. A contradiction is a headline finding, and the instrumentation's
says which explanation the data support — the seed's three: the runs were on another version or code path, a
factor's memory (custom all-reduce's buffers) ate the room, or the instrumentation itself is wrong.

Pure: the ledger, the budget's rows per run, the effects and the confounds in; findings out (dicts the verdict
keeps under `findings`: kind, detail, runs, and for the instrumentation `hypotheses`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from launchlab.logparse.kinds import KINDS
from launchlab.numtext import significant
from launchlab.verdicts.ledger import READINESS, UNUSABLE, Ledger, RunEvidence

POOL_FIELDS = ("kv_tokens", "kv_gib", "kv_blocks")
# what a version or code-path difference between runs is, among the confounds' kinds
CODE_PATH_KINDS = ("versions", "modified files", "log", "server argument", "model", "environment")
MEMORY_BEFORE_KV = ("dist_init_mem_gib", "weights_mem_gib")
MEMORY_EFFECT_GIB = 0.01  # a factor's memory before the KV sizing that differs by less is no difference


def _rest(run: RunEvidence) -> tuple[str, float] | None:
    """(the instrumentation line's name, its `rest`): what the server's own instrumentation said was left for the
    KV cache."""
    for key, value in run.debug.items():
        name, _, field = key.rpartition(".")
        if field == "rest" and math.isfinite(value):
            return name, value
    return None


def _allocated(events: pd.DataFrame, run_id: str) -> bool:
    """The run's log shows a KV pool allocated (tokens, GiB or blocks above zero)."""
    mine = events[(events["run_id"] == run_id) & events["field"].isin(POOL_FIELDS)]
    return bool(len(mine)) and bool((mine["value"] > 0).any())


def contradicted_instrumentation(led: Ledger, events: pd.DataFrame) -> list[tuple[RunEvidence, str, float]]:
    """(run, the instrumentation line's name, its rest) of every observation whose instrumentation its own outcome
    contradicts: no room for the KV cache in a run that allocated its pool (or started), room in one that failed
    for want of it."""
    wrong = []
    for run in led.observations:
        said = _rest(run)
        if said is None:
            continue
        name, rest = said
        room = _allocated(events, run.run_id) or run.outcome.status in ("ready", "degraded")
        no_room = run.outcome.reason == "kv_cache_no_memory"
        if (rest <= 0 and room) or (rest > 0 and no_room and not room):
            wrong.append((run, name, rest))
    return wrong


def instrumentation(led: Ledger, budget: pd.DataFrame, events: pd.DataFrame, *, effects: list[dict],
                    confounds: list[dict]) -> list[dict]:
    """The runs whose instrumentation contradicts their own outcome (contradicted_instrumentation) as one finding,
    with the kind's recomputation from the same log, the inputs the instrumentation used against the log's, and
    which of the seed's explanations the data support."""
    budget_by_run = budget.set_index("run_id") if len(budget) and "run_id" in budget else pd.DataFrame()
    wrong = contradicted_instrumentation(led, events)
    if not wrong:
        return agreeing_instrumentation(led, events)
    runs = [r.run_id for r, _, _ in wrong]
    name = wrong[0][1]
    printed = sorted({rest for _, _, rest in wrong})
    recomputed = [float(budget_by_run.loc[r, "rest_gib"]) for r in runs
                  if r in budget_by_run.index and pd.notna(budget_by_run.loc[r, "rest_gib"])]
    outcome = ("allocated their KV pool" if printed[0] <= 0 else "failed for want of room for the KV cache")
    detail = (f"the server's own instrumentation contradicts the outcome: its `DEBUG {name}` line says rest = "
              f"{_gib_range(printed)} ({'no room' if printed[0] <= 0 else 'room'} for the KV cache) in "
              f"{len(runs)} run(s) that {outcome} ({_named(runs)})")
    own_right = bool(recomputed) and all((v > 0) == (printed[0] <= 0) for v in recomputed)
    if recomputed:
        detail += (f"; the log's own numbers give rest = {_gib_range(sorted(recomputed))}, which "
                   + ("agrees with the outcome" if own_right else "does not explain it either"))
    inputs = _inputs_differ(wrong, budget_by_run)
    if inputs:
        detail += f"; the instrumentation sized from other numbers than the server: {inputs}"
    hypotheses = _hypotheses(own_right=own_right, inputs=bool(inputs), effects=effects, confounds=confounds)
    return [{"kind": "instrumentation", "detail": detail, "runs": runs, "hypotheses": hypotheses}]


def agreeing_instrumentation(led: Ledger, events: pd.DataFrame) -> list[dict]:
    """The instrumentation agreeing with every outcome it printed in, said in words (the seed's question asks whether
    the debug print is right, either way): no room in every run that failed for want of it, room in every run that
    allocated its pool. Nothing where no observation printed it."""
    said = [(run, *rest) for run in led.observations if (rest := _rest(run)) is not None]
    if not said:
        return []
    room = [r.run_id for r, _, rest in said if rest > 0]
    none = [r.run_id for r, _, rest in said if rest <= 0]
    name = said[0][1]
    parts = ([f"rest > 0 in {len(room)} run(s), none of which failed for want of room ({_named(room)})"]
             if room else []) + \
        ([f"rest ≤ 0 in {len(none)} run(s), none of which allocated a pool ({_named(none)})"] if none else [])
    return [{"kind": "instrumentation agrees", "runs": [r.run_id for r, *_ in said],
             "detail": f"its DEBUG {name} line is right in every run that printed it: " + " and ".join(parts)
                       + "; the outcomes are what the server's own sizing says"}]


def unusable(led: Ledger) -> list[dict]:
    """The observations that started with a KV pool too small for one request at their own context length
    (ledger.UNUSABLE), said in words with the numbers: they start, and cannot serve."""
    found = [r for r in led.observations if r.outcome.reason == UNUSABLE]
    if not found:
        return []
    by_variant: dict[str, list[RunEvidence]] = {}
    for r in found:
        by_variant.setdefault(r.variant, []).append(r)
    said = "; ".join(f"{variant}: {(runs[0].outcome.message or '').removeprefix('started, but ')} "
                     f"({len(runs)} run(s): {_named([r.run_id for r in runs])})" for variant, runs in by_variant.items())
    return [{"kind": "unusable", "runs": [r.run_id for r in found],
             "detail": f"{len(found)} launch(es) started but cannot serve one request at their context length — {said}; "
                       "they count as degraded, not ready"}]


def readiness(led: Ledger) -> list[dict]:
    """The runs whose server said it was ready while the kit's probe never agreed, or the reverse (ledger.READINESS):
    a problem of the params (ready: health_url, ready: log_pattern) or the host, not of the server — said first, and
    no verdict of its outcome or speed rests on them."""
    found = [r for r in led.runs if r.excluded == READINESS]
    if not found:
        return []
    line = [r.ready_line_s for r in found if r.ready_line_s is not None]
    got = sorted({part.split(" ×")[0] for r in found if r.probe for part in r.probe.replace(" after ", ", ").split(", ")})
    if line:  # the watch recorded both signals: say them, across the runs
        said = (f"the server logged its ready line {_seconds(line)} after its start in {len(line)} of them, but the "
                f"kit's probe of its health URL (ready: health_url) never got 200 (it got {' or '.join(got) or 'no answer'})")
    else:
        said = found[0].excluded_detail
    return [{"kind": "readiness", "runs": [r.run_id for r in found],
             "detail": f"the server's own ready line and the kit's probe disagree in {len(found)} of {len(led)} runs "
                       f"({_named([r.run_id for r in found])}): {said} — a problem of the params or the host, not of "
                       "the server: fix ready: in the params; no outcome or startup time of these runs is compared"}]


def _seconds(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.1f} s" if round(low, 1) == round(high, 1) else f"{low:.1f}–{high:.1f} s"


def _inputs_differ(wrong: list[tuple[RunEvidence, str, float]], budget_by_run: pd.DataFrame) -> str:
    """Where the instrumentation's own inputs (avail, total) differ from the log's by more than 0.05 GiB."""
    parts = []
    run, name, _ = wrong[0]
    if run.run_id not in budget_by_run.index:
        return ""
    row = budget_by_run.loc[run.run_id]
    for key, column, what in (("total", "total_gib", "free memory before the weights"),
                              ("pre", "total_gib", "free memory before the weights"),
                              ("avail", "avail_gib", "free memory after the weights")):
        mine, theirs = run.debug.get(f"{name}.{key}"), row.get(column)
        if mine is not None and theirs is not None and pd.notna(theirs) and abs(mine - float(theirs)) > 0.05:
            parts.append(f"its {key} = {mine:,.3f} GiB, the log's {what} = {float(theirs):,.3f} GiB (run {run.run_id})")
    return "; ".join(dict.fromkeys(parts))


def _hypotheses(*, own_right: bool, inputs: bool, effects: list[dict], confounds: list[dict]) -> dict[str, str]:
    """Which explanation of the contradiction the data support, each with why: `instrumentation` (the
    instrumentation itself is wrong), `code path` (the runs were on another version or code path), `memory` (a
    factor's memory before the KV sizing — custom all-reduce's buffers — took the room)."""
    out = {}
    if own_right:
        out["instrumentation"] = ("supported: the log's own numbers agree with the outcome"
                                  + (", the instrumentation's inputs are not the server's" if inputs else ""))
    else:
        out["instrumentation"] = "not shown: the log's own numbers do not agree with the outcome either"
    touched = [c for c in confounds if c["kind"] in CODE_PATH_KINDS and set(c["runs"])]
    out["code path"] = ("possible: " + "; ".join(f"{c['kind']}: {c['detail']}" for c in touched)[:400] if touched
                        else "not supported: the runs' logs and installs state the same versions and arguments "
                             "besides the factors")
    moved = [e for e in effects if e["metric"] in MEMORY_BEFORE_KV and e.get("diff") is not None
             and abs(e["diff"]) >= MEMORY_EFFECT_GIB]
    if moved:
        out["memory"] = "; ".join(
            f"{e['factor']}={e['level']} takes {e['diff']:+,.2f} GiB {phase_words(e['metric'])} against "
            f"{e['factor']}={e['baseline_level']}" for e in moved) + (
            " — a difference of its size, not of the instrumentation's" if own_right else "")
    else:
        out["memory"] = ("not supported: no factor changes the memory taken before the KV sizing (distributed init, "
                         "weights) by 0.01 GiB or more" if any(e["metric"] in MEMORY_BEFORE_KV for e in effects)
                         else "not measured: no run pair's log gives the memory before the KV sizing")
    return out


def phase_words(metric: str) -> str:
    """Where a memory-before-KV metric is taken, in words ('at distributed init (with its all-reduce buffers)')."""
    return {"dist_init_mem_gib": "at distributed init (with its all-reduce buffers)",
            "weights_mem_gib": "for its weights"}.get(metric, metric)


def break_even_contradicted(led: Ledger, summary: pd.DataFrame, events: pd.DataFrame, *, parsed: dict[str, dict],
                            kind: str) -> list[dict]:
    """A variant's predicted break-even (the budget's, per variant) that an observed outcome contradicts: a run of
    that variant that allocated its pool below it, or failed for want of room above it."""
    found = KINDS[kind].break_even if kind in KINDS else None
    if found is None or summary.empty or found.column not in summary:
        return []
    predicted = {v: float(b) for v, b in zip(summary["variant"], summary[found.column], strict=True) if pd.notna(b)}
    out = []
    odd = {r.run_id for r in led.ran_otherwise()}  # another variant than their own: no test of its prediction
    for run in led.observations:
        b = predicted.get(run.variant)
        value = _arg(parsed.get(run.run_id) or {}, found.arg)
        if b is None or value is None or run.run_id in odd:
            continue
        margin = max(1e-4, 0.005 * abs(b))
        started = _allocated(events, run.run_id) or run.outcome.status in ("ready", "degraded")
        if started and value < b - margin:
            out.append((run, value, b, "started"))
        elif run.outcome.reason == "kv_cache_no_memory" and value > b + margin:
            out.append((run, value, b, "failed for want of room"))
    if not out:
        return []
    said = "; ".join(f"run {r.run_id} {how} at {found.arg}={significant(v)} against {significant(b)} predicted for "
                     f"{r.variant}" for r, v, b, how in out)
    return [{"kind": "break-even", "runs": [r.run_id for r, *_ in out],
             "detail": f"the predicted break-even of {found.arg} is contradicted by what the runs did: {said} — the "
                       "memory figures it was computed from are not the ones the server sized with"}]


@dataclass(frozen=True)
class Expecting:
    """Which runs should fail as the diagnosed log did, and how the report names them: the baseline's in a fixed
    plan; in a threshold search, which has no baseline run at the log's value, the probes below the predicted
    break-even (a search's values below its threshold fail)."""

    who: str
    includes: Callable[[RunEvidence], bool]

    @classmethod
    def probes_below(cls, factor: str, edge: str) -> Expecting:
        def below(run: RunEvidence) -> bool:
            try:
                return float(run.declared.get(factor, "nan")) < float(edge)
            except ValueError:
                return False
        return cls(f"the probes below the predicted break-even {edge}", below)


def reproduction(led: Ledger, budget: pd.DataFrame, *, expected, baseline: str, kind: str,
                 expecting: Expecting | None = None) -> dict | None:
    """Whether the runs that should fail as the diagnosed log did (params `reproduce:`; `expecting`, by default the
    baseline's) did: the same reason in the same phase, and, where the log gave a break-even, their own within one
    unit of its last printed digit. None without a `reproduce:`."""
    if expected is None:
        return None
    expecting = expecting or Expecting("the baseline", lambda run: run.variant == baseline)
    found = KINDS[kind].break_even if kind in KINDS else None
    by_run = budget.set_index("run_id") if len(budget) and "run_id" in budget else pd.DataFrame()
    want = float(expected.break_even) if expected.break_even is not None else None
    unit = 10.0 ** min(-len(expected.break_even.partition(".")[2]), 0) if expected.break_even else None
    runs, matched, differs = [], [], []
    for run in led.observations:
        if not expecting.includes(run):
            continue
        runs.append(run.run_id)
        how = []
        if (run.outcome.reason, run.outcome.phase) != (expected.reason, expected.phase):
            how.append(f"{run.outcome.label}")
        if want is not None and found is not None and run.run_id in by_run.index:
            got = by_run.loc[run.run_id].get(found.column)
            if got is not None and pd.notna(got) and abs(float(got) - want) > unit + 1e-12:
                how.append(f"break-even {significant(float(got))}")
        (differs.append(f"{run.run_id}: " + ", ".join(how)) if how else matched.append(run.run_id))
    said = f"{expected.reason} in {expected.phase}" + (f", break-even {expected.break_even}" if want is not None else "")
    return {"log": expected.log, "expected": said, "who": expecting.who, "runs": runs, "matched": matched,
            "differs": differs, "reproduced": bool(runs) and len(matched) == len(runs)}


def _arg(log: dict, name: str) -> float | None:
    value = (log.get("args") or {}).get(name)
    try:
        number = float(str(value).strip("'\""))
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _gib_range(values: list[float]) -> str:
    low, high = values[0], values[-1]
    return f"{low:+,.2f} GiB" if abs(high - low) < 0.005 else f"{low:+,.2f} to {high:+,.2f} GiB"


def _named(runs: list[str]) -> str:
    return ", ".join(runs[:4]) + (f" and {len(runs) - 4} more" if len(runs) > 4 else "")
