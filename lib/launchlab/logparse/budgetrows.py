"""What every server kind's budget recomputation shares (each kind's own formula is in its module's `_budget`):
each run's logged numbers, the card's capacity against the formula's total. Imported only when a report
recomputes a budget (it loads pandas), never to parse a log or validate params."""

from __future__ import annotations

import math

import pandas as pd

DISAGREE_GIB = 0.02  # logged and recomputed values are printed with 2-3 decimals
GAP_EXPLAIN_GIB = 1.0


def logged(events: pd.DataFrame, runs: pd.DataFrame):
    """(run, numbers) for every run whose log gave numbers: per field the MIN over ranks (what SGLang's
    distributed MIN uses)."""
    if events.empty:
        return
    table = events.pivot_table(index="run_id", columns="field", values="value", aggfunc="min")
    for _, run in runs.iterrows():
        if run["run_id"] in table.index:
            yield run, table.loc[run["run_id"]]


def missing(*values) -> bool:
    return any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values)


def agreed(values: dict[str, list[float]]) -> dict[str, float] | None:
    """Each figure's median over the runs that logged it, when they agree on every one within DISAGREE_GIB;
    None when any figure is missing or they disagree (which run's figure holds for another is then unknown)."""
    out = {}
    for field, found in values.items():
        if not found or max(found) - min(found) > DISAGREE_GIB:
            return None
        out[field] = float(pd.Series(found).median())
    return out


def borrowed_from(run_ids: list[str]) -> str:
    """The `borrowed_from` of a budget row: the runs whose logged figures it took besides its own ('' for none)."""
    return ", ".join(run_ids)


def card_totals(telemetry: pd.DataFrame | None) -> pd.Series | None:
    """The smallest memory.total nvidia-smi sampled per run id (MiB), in one pass: selecting a run's rows of millions
    of samples, run by run, took seconds."""
    return telemetry.groupby("run_id")["mem_total_mib"].min() if telemetry is not None and len(telemetry) else None


def card_gap(cards: pd.Series | None, run_id: str, total_gib: float, dist_gib: float | None) -> dict:
    """The formula's `total` against the card's memory.total at the same moment (nvidia-smi); cards: the smallest
    memory.total sampled per run id."""
    if cards is None or run_id not in cards.index or pd.isna(cards[run_id]):
        return {"card_total_gib": None, "gap_gib": None, "gap_note": ""}
    card = float(cards[run_id]) / 1024
    gap = card - total_gib
    note = ""
    if gap > GAP_EXPLAIN_GIB:
        dist = f"{dist_gib:.2f} GiB by distributed init (logged), " if dist_gib and not math.isnan(dist_gib) else ""
        note = (f"{gap:.2f} GiB of the {card:.1f} GiB card was not free before the weights: {dist}the rest by the "
                "driver's reserved memory, the CUDA context and any other process on the GPU (see the preflight)")
    return {"card_total_gib": card, "gap_gib": gap, "gap_note": note}
