"""A run directory's records as the verdict reads them, and the verdict made from them: the runs' frames, the
manifest, each run's provenance.json and parsed.json, the ledger of what every run observes, the kind's memory budget,
a search's thresholds — gathered once into the one evidence record (evidence.Evidence) that verdict.build judges.
The report (reporting/report.py) is a case file that also renders: it reads what is here, and adds no judgement."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from launchlab import __version__ as KIT_VERSION
from launchlab import params
from launchlab.errors import RunDirError
from launchlab.store import records, rundir
from launchlab.store.manifest import Manifest, ManifestEntry
from launchlab.store.verdictrecord import Verdict, plain
from launchlab.verdicts import budget, consistency, frames, ledger, levelchecks, thresholds, verdict
from launchlab.verdicts.evidence import Evidence


@dataclass(frozen=True)
class CaseFile:
    run_dir: Path
    exp: params.Experiment
    manifest: Manifest
    frames: frames.Frames

    @property
    def missing_why(self) -> str:
        """Why a planned run has no final status: one run notebook's folder never meant to run the others."""
        return ledger.NOT_RUN_ALONE if self.manifest.single_run else ledger.NOT_FINISHED

    @property
    def factors(self) -> list[str]:
        """The factors, and a threshold search's flag (a column of runs.parquet, one level per probed value)."""
        return list(self.exp.factors) + ([self.exp.search.factor] if self.exp.search else [])

    @property
    def varied(self) -> list[str]:
        """The factors the verdict decides: those the params give two levels or more, and a search's flag. A factor
        of one level (a label for a search's one stratum, say) is a constant of the design, never a question; a
        level left out with --only still counts, and leaves its factor undetermined."""
        return [f for f in self.factors if f not in self.exp.factors or len(self.exp.factors[f]) > 1]

    @property
    def baseline_levels(self) -> dict[str, str]:
        """The baseline's levels; in a search, its flag at the high end (probed in every stratum, ready there
        when the search's assumption holds)."""
        levels = params.baseline_variant(self.exp).levels
        return {**levels, self.exp.search.factor: self.exp.search.high} if self.exp.search else levels

    @property
    def baseline_name(self) -> str:
        return params.variant_name(self.baseline_levels) if self.exp.search else self.manifest.baseline

    @property
    def planned(self) -> list[ManifestEntry]:
        """The manifest's runs: every run the plan asked for, finished or not."""
        return self.manifest.runs

    def _per_run(self, name: str) -> dict[str, dict]:
        out = {}
        for run_id in self.frames.runs["run_id"]:
            path = getattr(rundir.RunDir(self.run_dir).run(run_id), name)
            if path.exists():
                out[run_id] = rundir.read_json(path)
        return out

    @cached_property
    def facts(self) -> dict[str, dict]:
        """provenance.json of every finished run, by run id."""
        return self._per_run("provenance")

    @cached_property
    def parsed(self) -> dict[str, dict]:
        """parsed.json (what the server's log says) of every finished run, by run id."""
        return self._per_run("parsed")

    @cached_property
    def ledger(self) -> ledger.Ledger:
        """The evidence of every run: what it was declared, what took effect, how it ended, whether it observes."""
        return ledger.build(self.frames.runs, self.varied, exp=self.exp, planned=self.planned, parsed=self.parsed,
                            missing_why=self.missing_why)

    @cached_property
    def runs(self) -> pd.DataFrame:
        """runs.parquet as the ledger judges each run (ledger.Ledger.judged): what every table, the budget and a
        search's thresholds read — a run directory of an older kit gets this kit's judgement."""
        return self.ledger.judged(self.frames.runs)

    @cached_property
    def observations(self) -> pd.DataFrame:
        return self.ledger.frame(self.frames.runs)

    @cached_property
    def valid_runs(self) -> pd.DataFrame:
        """The finished runs that are observations of the server (not kit errors, interrupted, censored, …)."""
        valid = set(self.observations.loc[self.observations["valid"], "run_id"])
        return self.frames.runs[self.frames.runs["run_id"].isin(valid)]

    @cached_property
    def budget(self) -> pd.DataFrame:
        """The kind's budget per run, over the runs that ran their variant as declared (a run whose level the server
        overrode ran another one: its figures would skew its variant's mean and break-even)."""
        found = budget.observed(self.exp.server.kind, self.ledger, self.frames.events, self.runs,
                                telemetry=self.frames.telemetry)
        return budget.with_weights(found, self.facts)

    @cached_property
    def before_weights(self) -> dict[str, float]:
        """Each run's GPU memory before its weights, as the budget read it from the run's own log (GiB)."""
        own = budget.own_figures(self.budget)
        if own.empty or "total_gib" not in own:
            return {}
        return {r: float(t) for r, t in zip(own["run_id"], own["total_gib"], strict=True) if pd.notna(t)}


    @cached_property
    def verdict(self) -> Verdict:
        """The verdict record: the one `launchlab report` / `run` wrote to verdict.json just before the summary
        ran, when this kit wrote it after the frames; else computed here (a run notebook's own folder, a run
        directory whose frames are newer, a verdict.json of another kit version). Reading it back also spares
        the summary's kernel the second computation (and scipy.stats' import, about a second)."""
        written = self.written_verdict()
        return written if written is not None else self.computed_verdict()

    def written_verdict(self) -> Verdict | None:
        path = rundir.RunDir(self.run_dir).verdict_file
        frame_files = [rundir.RunDir(self.run_dir).frame(n) for n in ("runs", "events", "telemetry")]
        try:
            written = path.stat().st_mtime
            if any(not f.exists() or f.stat().st_mtime > written for f in frame_files):
                return None
            data = rundir.read_json(path)
        except (OSError, RunDirError):
            return None
        return Verdict.from_json(data) if data.get("kit_version") == KIT_VERSION else None

    def _expecting(self) -> consistency.Expecting | None:
        """Which runs should fail as a diagnosed log did: the baseline's (None), or a search's probes below its
        predicted break-even (the log's own where the search predicts none)."""
        search, spec = self.exp.search, self.exp.reproduce
        edge = search and spec and (search.predicted or spec.break_even)
        return consistency.Expecting.probes_below(search.factor, edge) if edge else None

    def computed_verdict(self) -> Verdict:
        """The verdict made from this run directory's evidence, whole (verdict.build): this layer renders it."""
        return verdict.build(self.evidence)

    @property
    def evidence(self) -> Evidence:
        """Everything the verdict is judged from, read once from the run directory (evidence.Evidence)."""
        return Evidence(self.ledger, self.runs, self.frames.events, self.baseline_levels,
                        baseline_variant=self.baseline_name, kind=self.exp.server.kind, facts=self.facts,
                        parsed=self.parsed, budget_runs=self.budget, tolerance_mib=self.exp.drain.tolerance_mib,
                        declared_args=frozenset(levelchecks.declared_args(self.exp)),
                        before_weights=self.before_weights, reproduce=self.exp.reproduce, expecting=self._expecting(),
                        thresholds=self.threshold_verdict if self.exp.search is not None else None,
                        warmup_runs=self.warmup_runs, kit_version=KIT_VERSION)

    @cached_property
    def warmup_runs(self) -> list[dict]:
        """The warm-up runs (params `warmup:`) as the manifest lists them, with how each ended: never compared."""
        found = []
        for entry in self.manifest.warmup_runs:
            status = records.read_status(rundir.RunDir(self.run_dir).run(entry.run_id))
            record = status.record if status is not None and status.done else None
            found.append({"run_id": entry.run_id, "host": entry.host, "status": record.status if record else None,
                          "startup_s": plain(record.startup_s) if record else None,
                          "failure_reason": record.failure_reason if record else None})
        return found

    @cached_property
    def thresholds(self) -> pd.DataFrame:
        """The `thresholds` frame of a search (empty for a fixed plan)."""
        spec = self.exp.search
        if spec is None:
            return pd.DataFrame(columns=thresholds.COLUMNS)
        strata = self.manifest.strata or [v.name for v in params.expand(self.exp)]
        return thresholds.table(spec.bounds, strata, self.runs, self.planned, factor=spec.factor, budget=self.budget,
                                repetitions=spec.repetitions, facts=self.facts, tolerance_mib=self.exp.drain.tolerance_mib,
                                prior=spec.prior)

    @property
    def threshold_verdict(self) -> dict:
        spec = self.exp.search
        assert spec is not None
        strata = [{k: plain(v) for k, v in row.items()} for row in self.thresholds.to_dict("records")]
        return {"flag": spec.flag, "factor": spec.factor, "low": spec.low, "high": spec.high, "resolution": spec.resolution,
                "outcome": spec.outcome, "strata": strata,
                "probes": thresholds.probes(self.runs, self.planned, spec.factor, self.budget, facts=self.facts,
                                            tolerance_mib=self.exp.drain.tolerance_mib),
                "differences": thresholds.differences(self.thresholds, self.manifest.baseline, spec.flag)}
