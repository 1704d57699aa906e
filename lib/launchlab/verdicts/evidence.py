"""Everything one verdict is judged from, in one record: the ledger of the runs and what the run directory holds
beside it. The case file gathers it once (casefile.py reads the run directory's records); verdict.build makes the whole
verdict from it in one call — decisions, confounds, effects, findings, a search's thresholds, warm-ups and order
effects — and the report only renders what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from launchlab.verdicts.consistency import Expecting
from launchlab.verdicts.ledger import Ledger


@dataclass(frozen=True)
class Evidence:
    """ledger: the runs as evidence (ledger.build); runs, events: runs.parquet and events.parquet; baseline: the
    baseline's levels and baseline_variant its name; kind: the server kind; facts, parsed: provenance.json and
    parsed.json by run id; budget_runs: the kind's budget per run (budget.observed, with the weights); tolerance_mib:
    the params' drain tolerance; declared_args: the server arguments the factors set (levelchecks.declared_args);
    before_weights: each run's free memory before its weights as its log gave it (GiB); reproduce, expecting: the
    params' `reproduce:` and which runs should fail as the diagnosed log did; thresholds: a search's result
    (thresholds.table and friends) or None; warmup_runs: the warm-ups the manifest lists, with how each ended;
    kit_version: the kit that judges."""

    ledger: Ledger
    runs: pd.DataFrame
    events: pd.DataFrame
    baseline: dict[str, str]
    baseline_variant: str
    kind: str = ""
    facts: dict[str, dict] = field(default_factory=dict)
    parsed: dict[str, dict] = field(default_factory=dict)
    budget_runs: pd.DataFrame | None = None
    tolerance_mib: float = 256
    declared_args: frozenset[str] = frozenset()
    before_weights: dict[str, float] = field(default_factory=dict)
    reproduce: object = None  # params.ReproduceSpec
    expecting: Expecting | None = None
    thresholds: dict | None = None
    warmup_runs: list[dict] = field(default_factory=list)
    kit_version: str | None = None

    @property
    def observations(self) -> pd.DataFrame:
        """The ledger's frame: one row per planned run, valid or not and why."""
        return self.ledger.frame(self.runs)
