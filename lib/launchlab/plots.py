"""matplotlib figures of a run directory's frames. No I/O: each function returns a Figure."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

STATUS_COLOURS = {"ready": "tab:green", "failed": "tab:red", "timeout": "tab:orange", "degraded": "tab:purple",
                  "error": "tab:gray"}


def memory_timeline(telemetry: pd.DataFrame, runs: pd.DataFrame, simulated: bool = False) -> plt.Figure:
    """GPU memory used over time, one panel per variant, one line per run (the fullest GPU at each sample)."""
    variants = list(runs["variant"].drop_duplicates())
    cols = 2 if len(variants) > 1 else 1
    rows = max(1, math.ceil(len(variants) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.2 * rows), sharex=True, sharey=True, squeeze=False)
    total_gib = telemetry["mem_total_mib"].max() / 1024 if len(telemetry) else None
    for ax, variant in zip(axes.flat, variants, strict=False):
        for _, run in runs[runs["variant"] == variant].iterrows():
            samples = telemetry[telemetry["run_id"] == run["run_id"]]
            if samples.empty:
                continue
            fullest = samples.groupby("t_s")["mem_used_mib"].max().sort_index() / 1024
            ax.plot(fullest.index, fullest.values, color=STATUS_COLOURS.get(run["status"], "black"),
                    alpha=0.55 + 0.45 / run["repetition"], label=f"rep {run['repetition']}: {run['status']}")
        if total_gib:
            ax.axhline(total_gib, color="black", linestyle="--", linewidth=0.8)
        ax.set_title(variant, fontsize=10)
        ax.set_ylabel("GPU memory used [GiB]")
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(variants):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("time since server start [s]")
    title = "GPU memory over time (nvidia-smi, fullest GPU per sample; dashed: card capacity)"
    fig.suptitle(title + (" — SIMULATED host" if simulated else ""), fontsize=11)
    fig.tight_layout()
    return fig
