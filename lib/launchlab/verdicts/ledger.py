"""The evidence ledger: one typed record per run of what the run actually was, which every judgement of a run
directory reads — strata, decisions, effects, budget, break-evens, memory comparisons — instead of the levels the
plan declared.

Per run: the levels it was declared; the level each factor actually took, with what in the log shows it
(confirmed, overridden by the server or by a patch that did not take, failed in its own code, not shown); its
outcome with reason and phase, and censoring (not ready by its deadline and no error: how it would have ended is
unknown, so it is never a failure); whether it is an observation of the server at all, and why not (a kit error,
interrupted, missing, the same log as another run, …); the identity of its log (a hash: the same log twice is one
observation); and what its log states of the machine and of the server's own instrumentation.

Pure: parsed logs, records and the params in, a Ledger out (levelchecks holds the per-flag checks it uses).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

from launchlab import interrupts
from launchlab.logparse.kinds import KINDS
from launchlab.logparse.parsedlog import PHASES
from launchlab.logparse.serverkind import POOL_BELOW_CONTEXT
from launchlab.params import Experiment, expand
from launchlab.store.manifest import ManifestEntry
from launchlab.store.records import READY_SIGNALS, VALID_STATUSES
from launchlab.verdicts import levelchecks, varied
from launchlab.verdicts.runstatus import unusable_why

# the level a factor took in a run (Level.state)
CONFIRMED = "confirmed"  # the log shows the declared level
OVERRIDDEN = "overridden"  # the log shows another: the server changed it, or a patch did not take
FAILED_IN_OWN_CODE = "failed in its own code"  # it took effect, and its own code failed: that is its outcome
NOT_SHOWN = "not shown"  # nothing in the log shows it either way
LEVEL_STATES = (CONFIRMED, OVERRIDDEN, FAILED_IN_OWN_CODE, NOT_SHOWN)

# why a run is no observation of the server (RunEvidence.excluded), in the order they are judged
MISSING, INTERRUPTED, KIT_ERROR = "missing", "interrupted", "kit error"
UNKNOWN_OUTCOME = "outcome unknown"  # an imported log that ends before the server was ready or failed
MISFILED = "misfiled"  # an imported log whose server ran other levels than it was filed under
DUPLICATE = "duplicate"  # the same server log as an earlier run: one observation, counted once
CENSORED = "censored"  # not ready by its deadline and no error: slow, not failed — its outcome is unknown
# the server's own ready line and the kit's probe disagree (one says ready, the other never did): a problem of the
# params or the host, not of the server, so no observation of its outcome or its speed
READINESS = "ready signals disagree"
CONTRADICTED = "level contradicted"  # for one factor: the run's level did not take effect (Ledger.for_factor)

UNUSABLE = POOL_BELOW_CONTEXT  # started, with a KV pool that cannot hold one request at its context length

NOT_FINISHED = "listed in the manifest but it has no final status (the batch was interrupted or is still running)"
# a run directory made by run_variant.ipynb for its own one run (the manifest's single_run)
NOT_RUN_ALONE = ("not run: this run directory was made by run_variant.ipynb for one run of the plan, not by a "
                 "batch; `launchlab run PARAMS` runs them all")


@dataclass(frozen=True)
class Level:
    """The level one factor took in one run: its state (LEVEL_STATES) and what the log shows (empty: confirmed or
    not shown)."""

    factor: str
    declared: str
    state: str
    detail: str = ""


@dataclass(frozen=True)
class Outcome:
    """How a run's launch ended. `label` is what the verdict's sentences say of it (outcome_label)."""

    status: str | None  # ready | failed | timeout | degraded | error | unknown; None: it never finished
    label: str
    reason: str | None = None
    phase: str | None = None
    message: str | None = None
    censored: bool = False  # not ready by its deadline, and no error


@dataclass(frozen=True)
class RunEvidence:
    """One run as the ledger holds it (see the module's docstring)."""

    run_id: str
    variant: str
    declared: dict[str, str]
    levels: dict[str, Level]
    outcome: Outcome
    excluded: str | None = None  # None: an observation of the server; else why not
    excluded_detail: str = ""
    repetition: int | None = None
    phase_reached: str | None = None
    log_sha256: str | None = None
    duplicate_of: str | None = None
    pool_capped: bool = False  # the KV pool was capped by a flag (its size says nothing of the memory left)
    debug: dict[str, float] = field(default_factory=dict)  # the instrumentation's values, `<name>.<key>`
    # (factor, check, state, why) behind `levels`; state: levelchecks' (confirmed, contradicted, failed, unknown)
    checks: tuple[tuple[str, str, str, str], ...] = ()
    # what its log and record give that could tell two levels apart (varied.observed: the manipulation check)
    observed: dict[str, object] = field(default_factory=dict)
    # both ready signals, as the watch recorded them: when the server's ready line came (s) and what the probe got
    ready_line_s: float | None = None
    probe: str | None = None

    @property
    def observation(self) -> bool:
        return self.excluded is None


def outcome_label(status: str | None, reason: str | None, phase: str | None) -> str:
    """What a run's launch came to, in the words the verdict's sentences use, so that a KV-sizing failure and a
    CUDA-graph OOM are two outcomes, and a server that starts and then breaks is neither "ready" nor "does not
    start": `starts`, `starts but its first request fails`, `starts, then exits by itself`, `fails: REASON in
    PHASE`, `is not ready in time`."""
    reason = reason if isinstance(reason, str) and reason else None
    if status == "ready":
        return "starts"
    if status == "degraded":
        if reason == UNUSABLE:
            return "starts but its KV pool cannot hold one request at its context length"
        if reason == "exited_after_ready":
            return "starts, then exits by itself"
        return "starts but its first request fails" + (f" ({reason})" if reason and reason != "smoke_request_failed"
                                                       else "")
    if status == "failed":
        return f"fails: {reason or 'unknown reason'}" + (f" in {phase}" if isinstance(phase, str) and phase else "")
    if status == "timeout":
        return "is not ready in time"
    return str(status)


@dataclass(frozen=True)
class Ledger:
    """The runs of a run directory as evidence, in plan order, and the factors they vary."""

    factors: tuple[str, ...]
    runs: tuple[RunEvidence, ...]
    exp: Experiment | None = field(default=None, compare=False, repr=False)  # the params the levels were checked with

    def __iter__(self):
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def get(self, run_id: str) -> RunEvidence | None:
        return next((r for r in self.runs if r.run_id == run_id), None)

    @property
    def observations(self) -> list[RunEvidence]:
        return [r for r in self.runs if r.observation]

    def frame(self, runs: pd.DataFrame | None = None) -> pd.DataFrame:
        """One row per run: the runs frame's columns where it has the run, each factor's declared level, `valid`,
        `invalid_kind`, `invalid_detail`, `censored`, `outcome` (the label)."""
        rows = []
        by_id = runs.set_index("run_id").to_dict("index") if runs is not None and len(runs) else {}
        for r in self.runs:
            row = {"run_id": r.run_id, **by_id.get(r.run_id, {}), "variant": r.variant, **r.declared,
                   "status": r.outcome.status, "failure_reason": r.outcome.reason, "failure_phase": r.outcome.phase,
                   "failure_message": r.outcome.message, "valid": r.observation, "invalid_kind": r.excluded,
                   "invalid_detail": r.excluded_detail or None, "censored": r.outcome.censored,
                   "outcome": r.outcome.label, "repetition": r.repetition, "phase_reached": r.phase_reached}
            rows.append(row)
        frame = pd.DataFrame(rows)
        if frame.empty:
            return pd.DataFrame(columns=["run_id", "variant", *self.factors, "status", "valid", "invalid_kind",
                                         "invalid_detail", "censored", "outcome", "repetition", "phase_reached"])
        frame["valid"] = frame["valid"].astype(bool)
        for column in runs.columns if runs is not None else ():  # every run missing: runs.parquet's columns, empty
            if column not in frame:
                frame[column] = None
        return frame

    def judged(self, runs: pd.DataFrame) -> pd.DataFrame:
        """runs.parquet with each run's outcome as the ledger judges it (a start that cannot serve one request is
        degraded, whatever a record of an older kit says): what a search's thresholds and the run tables read."""
        outcomes = {r.run_id: r.outcome for r in self.runs if r.outcome.status is not None}
        out = runs.copy()
        for column, attr in (("status", "status"), ("failure_reason", "reason"), ("failure_phase", "phase"),
                             ("failure_message", "message")):
            if column in out:
                out[column] = [getattr(outcomes[r], attr) if r in outcomes else v
                               for r, v in zip(out["run_id"], out[column], strict=True)]
        return out

    def for_factor(self, factor: str, runs: pd.DataFrame | None = None) -> pd.DataFrame:
        """frame(), with the runs whose `factor` level did not take effect made no observation of it (invalid_kind
        CONTRADICTED, and what the log showed instead)."""
        frame = self.frame(runs)
        for r in self.runs:
            level = r.levels.get(factor)
            if r.observation and level is not None and level.state == OVERRIDDEN:
                at = frame.index[frame["run_id"] == r.run_id]
                frame.loc[at, ["valid", "invalid_kind", "invalid_detail"]] = [False, CONTRADICTED, level.detail]
        return frame

    def observing(self, factor: str) -> list[RunEvidence]:
        """The observations of `factor`: for_factor's valid rows, as the records they are."""
        return [r for r in self.observations if factor not in r.levels or r.levels[factor].state != OVERRIDDEN]

    def overridden(self, factor: str) -> list[RunEvidence]:
        return [r for r in self.observations if factor in r.levels and r.levels[factor].state == OVERRIDDEN]

    def ran_otherwise(self) -> list[RunEvidence]:
        """The observations that ran another variant than the other runs of their own: a level the server overrode
        in them and not in another run of the variant. Their figures are no figures of the variant (its budget, its
        break-even); a level overridden in every run of a variant (custom all-reduce at TP 1) is what the variant
        ran, and stays."""
        odd = []
        for r in self.observations:
            mates = [m for m in self.observations if m.variant == r.variant and m is not r]
            if any(r.levels[f].state == OVERRIDDEN and any(m.levels.get(f) is not None and
                                                           m.levels[f].state != OVERRIDDEN for m in mates)
                   for f in r.levels):
                odd.append(r)
        return odd

    def varied(self, factor: str) -> varied.Varied:
        """The factor's manipulation check: shown to vary, or not and why (varied.py)."""
        return varied.check(self.runs, factor, self.factors, exp=self.exp)

    def level_checks(self) -> list[dict]:
        """verdict.json's `level_checks`: one row per (factor, level, check), the runs whose log confirms it (its
        own code failing included: it took effect), contradicts it, or does not show it (levelchecks.rows)."""
        return levelchecks.rows((r.run_id, factor, _declared(r, factor) or "", check, state, why)
                                for r in self.runs for factor, check, state, why in r.checks)


# ---------------------------------------------------------------------------------------------------------
# Building it


def build(runs: pd.DataFrame, factors: list[str], *, exp: Experiment | None = None,
          planned: list[ManifestEntry] | None = None, parsed: dict[str, dict] | None = None,
          missing_why: str = NOT_FINISHED) -> Ledger:
    """The ledger of a run directory: every planned run (finished or not) in plan order, then finished runs the
    manifest does not list. runs: runs.parquet; exp: the params (None: no level is checked against the logs);
    parsed: parsed.json by run id (what each log states, `log_sha256` its content's identity)."""
    parsed = parsed or {}
    order = [p.run_id for p in planned or []]
    rows = {str(r["run_id"]): r for r in runs.to_dict("records")} if len(runs) else {}
    ids = order + [r for r in rows if r not in set(order)]
    planned_by_id = {p.run_id: p for p in planned or []}
    variants = {tuple(sorted(v.levels.items())): v for v in expand(exp)} if exp is not None else {}
    evidence: list[RunEvidence] = []
    seen_logs: dict[str, str] = {}
    for run_id in ids:
        row = rows.get(run_id)
        if row is None:
            p = planned_by_id[run_id]
            declared = {f: p.levels.get(f) for f in factors}
            evidence.append(RunEvidence(run_id, p.variant, declared, {}, Outcome(None, "missing"), MISSING,
                                        missing_why, repetition=p.repetition))
            continue
        evidence.append(_run(row, factors, parsed.get(run_id) or {}, variants=variants, exp=exp, seen_logs=seen_logs))
    return Ledger(tuple(factors), tuple(_instrumented(evidence, exp)), exp)


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not pd.isna(value) else None


def _run(row: dict, factors: list[str], log: dict, *, variants: dict, exp: Experiment | None,
         seen_logs: dict[str, str]) -> RunEvidence:
    run_id = str(row["run_id"])
    declared = {f: (None if pd.isna(row.get(f)) else str(row.get(f))) for f in factors}
    status, reason = _text(row.get("status")), _text(row.get("failure_reason"))
    phase, message = _text(row.get("failure_phase")), _text(row.get("failure_message"))
    if status == "ready" and (unusable := unusable_why(log, exp.server.kind if exp is not None else "")):
        # a record of a kit before issue 63 (runstatus.conclude says so since): judged as this kit would have
        status, reason, phase, message = "degraded", UNUSABLE, "ready", f"started, but {unusable}"
    censored = status == "timeout" and not reason and not (log.get("failure") or None)
    outcome = Outcome(status, outcome_label(status, reason, phase), reason, phase, message, censored)
    checks = _checks(exp, variants, row, log) if exp is not None else []
    named = [*factors, *(f for f in (exp.factors if exp is not None else {}) if f not in factors)]
    levels = {f: _level(f, None if pd.isna(row.get(f)) else str(row.get(f)), [c for c in checks if c[0] == f])
              for f in named}
    sha = _text(log.get("log_sha256"))
    duplicate_of = seen_logs.get(sha) if sha else None
    if sha and duplicate_of is None:
        seen_logs[sha] = run_id
    excluded, detail = _excluded(status, reason, message, misfiled=row.get("misfiled"), duplicate_of=duplicate_of,
                                 censored=censored, log=log)
    repetition = row.get("repetition")
    variant = variants.get(tuple(sorted((f, str(row.get(f))) for f in exp.factors))) if exp is not None else None
    return RunEvidence(
        run_id, str(row.get("variant")), declared, levels, outcome, excluded, detail,
        repetition=None if repetition is None or pd.isna(repetition) else int(repetition),
        phase_reached=_text(row.get("phase_reached")) or _text(log.get("phase_reached")),
        log_sha256=sha, duplicate_of=duplicate_of, pool_capped=_pool_capped(exp, log),
        debug=_debug(log), checks=tuple(checks), ready_line_s=_number(row.get("ready_line_s")),
        probe=_text(row.get("probe_answers")),
        observed=varied.observed(row, log, outcome=outcome.label, env=variant.env if variant is not None else {},
                                 kind=exp.server.kind if exp is not None else ""))


def _excluded(status, reason, message, *, misfiled, duplicate_of, censored, log) -> tuple[str | None, str]:
    """Why a finished run is no observation of the server (None: it is one), and the detail."""
    # stopped because the batch was: by its reason; a record of an older kit (no reason) by what its message says
    interrupted = reason == interrupts.REASON or (not reason and (message or "").startswith("interrupted"))
    if status == "unknown":
        return UNKNOWN_OUTCOME, message or ""
    if status not in VALID_STATUSES:
        return (INTERRUPTED if interrupted else KIT_ERROR), message or ""
    if isinstance(misfiled, str) and misfiled:
        return MISFILED, f"filed under other levels than its log shows: {misfiled}"
    if duplicate_of is not None:
        return DUPLICATE, (f"the same server log as run {duplicate_of} (byte for byte): one launch, counted once "
                           "(imported twice?)")
    if status == "timeout" and (reason == READY_SIGNALS or (censored and log.get("ready") is True)):
        # the server said it was ready and the kit's probe never agreed (or the reverse): neither slow nor failed
        return READINESS, (message if reason == READY_SIGNALS and message else
                           "the server's log says it was ready, but the kit never saw it ready (its probe of "
                           f"ready: health_url never answered 200): {message or 'not ready by its deadline'}")
    if censored:
        where = log.get("phase_reached") or "startup"
        return CENSORED, (f"{message or 'not ready by its deadline'}, still in {where} with no error: slow, not "
                          "failed — how it would have ended is unknown (raise `ready: timeout_s` to see)")
    return None, ""


def _checks(exp: Experiment, variants: dict, row: dict, log: dict) -> list[tuple[str, str, str, str]]:
    """(factor, check, state, why) for each thing the run's log shows of its levels, every factor of the params
    (levelchecks.run_checks); none for a run of no variant the params expand to."""
    variant = variants.get(tuple(sorted((f, str(row.get(f))) for f in exp.factors)))
    if variant is None:
        return []
    return [(factor, check, state, why) for factor, level in variant.levels.items()
            for check, state, why in levelchecks.run_checks(exp, variant, factor, level, log=log)]


_LEVEL_OF_CHECK = {levelchecks.CONFIRMED: CONFIRMED, levelchecks.CONTRADICTED: OVERRIDDEN,
                   levelchecks.FAILED: FAILED_IN_OWN_CODE, levelchecks.UNKNOWN: NOT_SHOWN}


def _level(factor: str, declared: str | None, checks: list[tuple[str, str, str, str]]) -> Level:
    """A factor's level in one run from its checks: overridden if any check says another level ran, else failed in
    its own code, else confirmed, else not shown."""
    states = [(_LEVEL_OF_CHECK[state], why) for _, _, state, why in checks]
    for wanted in (OVERRIDDEN, FAILED_IN_OWN_CODE, CONFIRMED):
        found = [why for state, why in states if state == wanted]
        if found:
            return Level(factor, declared or "", wanted, "; ".join(dict.fromkeys(w for w in found if w)))
    return Level(factor, declared or "", NOT_SHOWN)


def _declared(run: RunEvidence, factor: str) -> str | None:
    """The level a run was declared for a factor, a factor of one level (not in `declared`) included."""
    level = run.levels.get(factor)
    return run.declared.get(factor) or (level.declared if level is not None else None)


def _pool_capped(exp: Experiment | None, log: dict) -> bool:
    """The server's own arguments cap its KV pool (SGLang's --max-total-tokens): the pool's size then says nothing
    of the memory the fraction left (ServerKind.pool_cap_args)."""
    kind = KINDS.get(log.get("server") or (exp.server.kind if exp is not None else ""))
    args = log.get("args") or {}
    return kind is not None and any(str(args.get(a, "None")).strip("'\"") not in ("None", "", "0")
                                    for a in kind.pool_cap_args)


def _debug(log: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for record in log.get("debug") or []:
        if isinstance(record, dict) and isinstance(record.get("value"), (int, float)):
            out.setdefault(f"{record.get('name')}.{record.get('key')}", float(record["value"]))
    return out


# ---------------------------------------------------------------------------------------------------------
# A patch's instrumentation: did it take in each run?


def _instrumented(runs: list[RunEvidence], exp: Experiment | None) -> Iterable[RunEvidence]:
    """Each run of a level that applies a patch, checked for the patch's instrumentation: where some runs of the
    level print `DEBUG …` lines, a run of it that got at least as far as the least far of those and prints none did
    not run the patched code (the patch did not take): its level is overridden. A run that ended earlier does not
    show it."""
    if exp is None:
        yield from runs
        return
    patched = {(f, name) for f, levels in exp.factors.items() for name, lv in levels.items()
               if lv.patches or lv.instrument}
    printing: dict[tuple[str, str], int] = {}
    for r in runs:
        for key in patched:
            if _declared(r, key[0]) == key[1] and r.debug and r.phase_reached in PHASES:
                at = PHASES.index(r.phase_reached)
                printing[key] = min(printing.get(key, at), at)
    for r in runs:
        keys = [k for k in patched if _declared(r, k[0]) == k[1] and k in printing]
        if not keys or r.outcome.status is None:
            yield r
            continue
        levels, checks = dict(r.levels), list(r.checks)
        for factor, name in keys:
            check = "instrumentation printed (DEBUG lines)"
            if r.debug:
                state, why = levelchecks.CONFIRMED, ""
            elif r.phase_reached in PHASES and PHASES.index(r.phase_reached) >= printing[(factor, name)]:
                state = levelchecks.CONTRADICTED
                why = (f"the patch's instrumentation printed no DEBUG line although the run reached "
                       f"{r.phase_reached}, where other runs of {factor}={name} printed theirs: the patch did not "
                       "take")
            else:
                state, why = levelchecks.UNKNOWN, ""
            checks.append((factor, check, state, why))
            levels[factor] = _level(factor, _declared(r, factor), [c for c in checks if c[0] == factor])
        yield dataclasses.replace(r, levels=levels, checks=tuple(checks))
