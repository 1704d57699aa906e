"""The memory-budget chart: where each variant's GPU memory went, against the card's capacity and the share the
server's memory flag keeps back (SGLang's `1 − --mem-fraction-static`, vLLM's `1 − --gpu-memory-utilization`).
No I/O: it returns a Figure.

Two panels share the variants. Left, the card on its own scale: the phases stacked, the card's capacity as a line
and the kept-back share as a hatched band at the card's end — a launch whose phases reach into the band had no room
for its KV cache, however much memory nvidia-smi called free. Right, each phase on a log scale, so that 0.5 GiB of
weights on a 140 GiB card reads as well as 70 GiB (on the left they are a pixel wide), with the room the formula
left for the KV cache written per variant.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter

from launchlab.numtext import ASKED
from launchlab.reporting.plots import BUDGET_PARTS, FIGURE_WIDTH_IN, MIN_FONT_PT

# what the card held before the log's first phase (driver, CUDA context): the card's capacity less the total the
# server sized its memory from and its distributed init; drawn only where the budget gives that total
BEFORE = ("before_gib", "before the log (driver, CUDA context)", "silver")
RESERVED_GID = "budget: reserved"
PLOT_AREA_GIDS = ("budget-card-area", "budget-log-area")  # the panels' backgrounds, for a browser to measure
LOG_PANEL_SHARE = 0.42  # of the panels' width


def kept_back(budget: pd.DataFrame | None) -> pd.DataFrame:
    """Per variant (index): total_gib (what the server sized its memory from), reserved_gib (the share its memory
    flag keeps back) and rest_gib (the room left for the KV cache, negative where there was none); empty where the
    budget gives none of them."""
    if budget is None or budget.empty or "total_gib" not in budget:
        return pd.DataFrame(columns=["total_gib", "reserved_gib", "rest_gib"])
    out = budget.drop_duplicates("variant").set_index("variant")
    asked = next((c for c in ASKED if c in out), None)
    if "reserved_gib" not in out:
        out["reserved_gib"] = out["total_gib"] * (1 - out[asked]) if asked else math.nan
    if "rest_gib" not in out:
        out["rest_gib"] = math.nan
    return out[["total_gib", "reserved_gib", "rest_gib"]].astype(float)


def memory_budget(rank_memory: pd.DataFrame, card_gib: float | None, budget: pd.DataFrame | None = None,
                  flag: str = "the memory flag") -> plt.Figure:
    """The chart of the module's docstring. `rank_memory`: per-variant means of the log's phases (analysis
    .rank_memory, with the kind's `free_gib`); `budget`: the kind's budget summary (total, reserved, rest per
    variant), None where it has none; `flag`: the flag whose share is kept back, as the legend names it."""
    data = rank_memory.set_index("variant")
    reserve = kept_back(budget).reindex(data.index)
    if card_gib and reserve["total_gib"].notna().any():
        dist = data["dist_init_mem_gib"] if "dist_init_mem_gib" in data else 0.0
        data = data.assign(before_gib=(card_gib - reserve["total_gib"] - dist).clip(lower=0.0))
    # a long variant name (four factors) one level a line: on one line its label widened the figure past the page
    data.index = reserve.index = [str(v).replace(", ", "\n") if len(str(v)) > 28 else str(v) for v in data.index]
    lines = max((str(v).count("\n") + 1 for v in data.index), default=1)
    fig, (card_ax, log_ax) = plt.subplots(
        1, 2, sharey=True, figsize=(FIGURE_WIDTH_IN + 1.5, 1.6 + (0.3 + 0.2 * lines) * len(data)),
        gridspec_kw={"width_ratios": [1 - LOG_PANEL_SHARE, LOG_PANEL_SHARE]})
    parts = [p for p in (BEFORE, *BUDGET_PARTS) if p[0] in data]
    ends = _stack(card_ax, data, parts)
    top = max(float(ends.max()) if len(ends) else 0.0, card_gib or 0.0)
    if card_gib:
        card_ax.axvline(card_gib, color="black", linewidth=1.2, label=f"card capacity ({card_gib:,.1f} GiB)")
    _reserved_band(card_ax, reserve["reserved_gib"], card_gib, flag)
    card_ax.set_xlim(0, top * 1.02 or 1)
    card_ax.set_xlabel("GiB per GPU, the card's scale")
    card_ax.invert_yaxis()
    _phases_on_log_scale(log_ax, data, parts, reserve, card_gib)
    for ax, gid in zip((card_ax, log_ax), PLOT_AREA_GIDS, strict=True):
        ax.patch.set_gid(gid)
    handles, labels = card_ax.get_legend_handles_labels()
    # above the panels: below them the legend covered the axis labels, beside them it took the plot's width
    fig.legend(handles, labels, fontsize=MIN_FONT_PT, ncols=2, loc="upper center", frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - min(0.45, 0.75 / fig.get_figheight())))
    return fig


def _stack(ax, data: pd.DataFrame, parts) -> pd.Series:
    """The phases stacked left to right (each bar's parts carry gid "budget: <column>"); returns where each ends."""
    left = pd.Series(0.0, index=data.index)
    for column, label, colour in parts:
        values = data[column].astype(float).fillna(0.0).clip(lower=0.0)
        ax.barh(data.index, values, left=left, color=colour, label=label, gid=f"budget: {column}")
        left = left + values
    return left


def _reserved_band(ax, reserved: pd.Series, card_gib: float | None, flag: str) -> None:
    """The share the memory flag keeps back, hatched at the card's end of each variant's bar (gid RESERVED_GID):
    the phases must fit left of it."""
    if not card_gib:
        return
    label = f"kept back by {flag}"
    for y, value in enumerate(reserved):
        if pd.isna(value) or value <= 0:
            continue
        ax.add_patch(Rectangle((card_gib - value, y - 0.45), value, 0.9, fill=False, hatch="///", edgecolor="black",
                               linewidth=0.8, gid=RESERVED_GID, label=label, zorder=3))
        label = None  # one legend entry


def _phases_on_log_scale(ax, data: pd.DataFrame, parts, reserve: pd.DataFrame, card_gib: float | None) -> None:
    """Each phase as a dot on a log scale (the kept-back share as a black bar), and the room left for the KV cache
    written above each variant's row (red where there was none)."""
    offsets = [0.3 * (k / max(len(parts) - 1, 1) - 0.5) for k in range(len(parts))]
    shown = []
    # one line of markers per phase (not one per dot: each is a group of the SVG, and the committed reports count)
    for (column, _label, colour), dy in zip(parts, offsets, strict=True):
        at = [(value, y + dy) for y, value in enumerate(data[column].astype(float)) if pd.notna(value) and value > 0]
        if at:
            ax.plot(*zip(*at, strict=True), "o", color=colour, markersize=6, markeredgecolor="black",
                    markeredgewidth=0.4)
            shown += [value for value, _ in at]
    at = [(value, y) for y, value in enumerate(reserve["reserved_gib"]) if pd.notna(value) and value > 0]
    if at:
        ax.plot(*zip(*at, strict=True), "|", color="black", markersize=16, markeredgewidth=2, gid=RESERVED_GID)
        shown += [value for value, _ in at]
    if card_gib:
        ax.axvline(card_gib, color="black", linewidth=1.2)
        shown.append(card_gib)
    low = min(shown, default=0.1)
    ax.set_xscale("log")
    ax.set_xlim(max(low / 2, 1e-3), max(shown, default=1.0) * 2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_xlabel("GiB, log scale (each phase)")
    ax.grid(axis="x", alpha=0.3, which="major")
    for y, rest in enumerate(reserve["rest_gib"]):
        if pd.notna(rest):
            # on a white ground above the markers: the label touched the kept-back bar and the phases' dots
            ax.text(0.98, y - 0.40, f"room for KV {rest:+.2f} GiB", transform=ax.get_yaxis_transform(), ha="right",
                    va="center", fontsize=MIN_FONT_PT, color="tab:red" if rest <= 0 else "black", gid="budget room",
                    zorder=5, bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5, "alpha": 0.9})
