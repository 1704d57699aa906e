"""matplotlib figures of a run directory's frames. No I/O: each function returns a Figure."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

# time buckets of a timeline panel: a 5-minute run sampled every 100 ms has 3,000 samples per GPU, and 200 of them
# drawn point by point made the summary slow and heavy; a band per bucket shows the same extremes
ENVELOPE_BUCKETS = 400
STATUS_COLOURS = {"ready": "tab:green", "failed": "tab:red", "timeout": "tab:orange", "degraded": "tab:purple",
                  "error": "tab:gray"}


def fullest_envelope(telemetry: pd.DataFrame, buckets: int = ENVELOPE_BUCKETS) -> pd.DataFrame:
    """The fullest GPU's memory.used at each sample of each run, as a min/max envelope per time bucket: run_id,
    t_s (the bucket's mean sample time), lo_mib, hi_mib. The buckets split the whole directory's time span, so
    every run has at most `buckets` rows whatever its length; a bucket holding one sample has lo = hi."""
    if telemetry.empty:
        return pd.DataFrame(columns=["run_id", "t_s", "lo_mib", "hi_mib"])
    codes, run_ids = pd.factorize(telemetry["run_id"])  # integer keys: grouping millions of rows by strings is slow
    samples = pd.DataFrame({"run": codes, "t_s": telemetry["t_s"].to_numpy(),
                            "mib": telemetry["mem_used_mib"].to_numpy(dtype="float64")})
    fullest = samples.groupby(["run", "t_s"], sort=False)["mib"].max().reset_index()
    start, end = fullest["t_s"].min(), fullest["t_s"].max()
    width = (end - start) / buckets if end > start else 1.0
    fullest["bucket"] = ((fullest["t_s"] - start) // width).clip(upper=buckets - 1)
    env = fullest.groupby(["run", "bucket"]).agg(t_s=("t_s", "mean"), lo_mib=("mib", "min"),
                                                 hi_mib=("mib", "max")).reset_index()
    env.insert(0, "run_id", run_ids[env["run"].to_numpy()])
    return _without_flat_interiors(env)[["run_id", "t_s", "lo_mib", "hi_mib"]]


def _without_flat_interiors(env: pd.DataFrame) -> pd.DataFrame:
    """The envelope less each bucket whose band equals both neighbours' of the same run: it lies on the straight
    segment between them, so the drawing is the same, and a server holding its memory for a minute is two points,
    not two hundred (a 14-run report's SVG was 310 kB of such points)."""
    same = (env["lo_mib"].eq(env["lo_mib"].shift()) & env["hi_mib"].eq(env["hi_mib"].shift())
            & env["run"].eq(env["run"].shift()))
    same_next = (env["lo_mib"].eq(env["lo_mib"].shift(-1)) & env["hi_mib"].eq(env["hi_mib"].shift(-1))
                 & env["run"].eq(env["run"].shift(-1)))
    return env[~(same & same_next)].reset_index(drop=True)


# The smallest text a chart draws (pt = px of the SVG). Figures are about FIGURE_WIDTH_IN wide with their legend
# and labels (under 7.7 in = 555 px), so at 800 px (about 740 px of page) the page never shrinks them and this
# text stays at 10 px or more.
MIN_FONT_PT = 10
FIGURE_WIDTH_IN = 6.2  # the axes of a timeline or budget chart; its legend right of them adds ~1.5 in
# a card's capacity this many times the plotted data's top is said in words, not drawn: a 0–220 GiB axis for 2 GiB
# of data showed nothing of the data
CAPACITY_ON_SCALE = 2.0


def capacity_on_scale(top: float, capacity: float | None) -> bool:
    """Whether the card's capacity line belongs on an axis whose data reach `top`."""
    return bool(capacity) and top > 0 and capacity <= CAPACITY_ON_SCALE * top


def memory_timeline(telemetry: pd.DataFrame, runs: pd.DataFrame, simulated: bool = False,
                    sampler: str = "nvidia-smi") -> plt.Figure:
    """GPU memory used over time, one panel per variant (one under the other, so the figure keeps its width on a
    narrow page), one line per run (the fullest GPU at each sample; a band from its min to its max per time
    bucket, `fullest_envelope`, so a long run draws hundreds of points, not thousands); the legend right of the
    data, the y axis up to the data (the card's capacity drawn only near it). sampler: what took the samples,
    as report.sampler_name says it."""
    sampler = {"nvml": "NVML"}.get(sampler, sampler)  # a bare kind, as params name it
    variants = list(runs["variant"].drop_duplicates())
    rows = max(1, len(variants))
    fig, axes = plt.subplots(rows, 1, figsize=(FIGURE_WIDTH_IN, 0.9 + 2.3 * rows), sharex=True, sharey=True,
                             squeeze=False)
    total_gib = telemetry["mem_total_mib"].max() / 1024 if len(telemetry) else None
    envelope = fullest_envelope(telemetry)
    top = float(envelope["hi_mib"].max()) / 1024 if len(envelope) else 0.0
    envelopes = dict(tuple(envelope.groupby("run_id", sort=False)))
    capacity_drawn = capacity_on_scale(top, total_gib)
    for ax, variant in zip(axes.flat, variants, strict=False):
        _timeline_panel(ax, runs[runs["variant"] == variant], envelopes)
        if capacity_drawn:
            ax.axhline(total_gib, color="black", linestyle="--", linewidth=0.8)
        ax.set_title(variant, fontsize=10)
        ax.set_ylabel("memory used [GiB]")
    axes.flat[-1].set_xlabel("time since server start [s]")
    capacity = ("dashed: card capacity" if capacity_drawn else
                f"card capacity {total_gib:,.0f} GiB, off this scale" if total_gib else "")
    title = (f"GPU memory over time ({sampler}, fullest GPU per sample,\nits min–max band per time bucket"
             + (f"; {capacity})" if capacity else ")"))
    fig.suptitle(title + (" — SIMULATED host" if simulated else ""), fontsize=10)
    fig.tight_layout()
    return fig


def _timeline_panel(ax, runs: pd.DataFrame, envelopes: dict) -> None:
    """One variant's runs; its legend right of the axes, never on the data."""
    for _, run in runs.iterrows():
        env = envelopes.get(run["run_id"])
        if env is None:
            continue
        colour, alpha = STATUS_COLOURS.get(run["status"], "black"), 0.55 + 0.45 / run["repetition"]
        ax.fill_between(env["t_s"], env["lo_mib"] / 1024, env["hi_mib"] / 1024, color=colour, alpha=alpha * 0.4,
                        linewidth=0)
        ax.plot(env["t_s"], env["hi_mib"] / 1024, color=colour, alpha=alpha,
                label=f"rep {run['repetition']}: {run['status']}")
    handles, labels = ax.get_legend_handles_labels()
    if len(labels) > 8:  # dozens of repetitions: one entry per status, not per run
        by_status = {label.split(": ", 1)[1]: h for h, label in zip(handles, labels, strict=True)}
        handles, labels = list(by_status.values()), [f"{n} run(s): {s}" for s, n in
                                                     _count(label.split(": ", 1)[1] for label in labels).items()]
    if labels:
        ax.legend(handles, labels, fontsize=MIN_FONT_PT, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    ax.grid(alpha=0.3)


def _count(items) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


PHASE_ENDS = {"dist_init_mem_gib": "dist init", "weights_mem_gib": "weights", "kv_gib": "KV pool",
              "graph_mem_gib": "CUDA graphs"}
BUDGET_PARTS = (("dist_init_mem_gib", "distributed init + all-reduce buffers", "tab:purple"),
                ("weights_mem_gib", "weights", "tab:blue"), ("kv_gib", "KV cache", "tab:green"),
                ("graph_mem_gib", "CUDA graphs", "tab:orange"), ("free_gib", "free", "lightgray"))

# The KV cache's lines: a cache was sized (kv_gib: SGLang's K + V, vLLM's memory in use; kv_tokens; kv_blocks) and
# how much memory it was given (kv_avail_gib: vLLM's "Available KV cache memory", negative when it had none).
KV_SIZED = ("kv_gib", "kv_tokens", "kv_blocks")
KV_LINES = (*KV_SIZED, "kv_avail_gib")
# Where the trace can show the allocation: log times are whole seconds (a line at t was written within [t, t + 1));
# SGLang writes its KV line just after the allocation, vLLM 0.26 its "Available KV cache memory" just before (and
# its "Current kv cache memory in use" only after the CUDA graphs, 1-3 s later). The pool is one allocation: the
# memory rises by about its logged size within a fraction of a second.
KV_WINDOW_S = (-1.0, 3.0)  # around the run's first KV line
KV_RISE_SPAN_S = 0.25
KV_RISE_TOLERANCE = 0.25  # of the logged size
KV_RISE_SAME = 0.02  # of the logged size: as close as the closest
# a smaller pool hides among the profile run's allocations (vLLM at 0.006: a 0.11 GiB pool beside 0.1-0.2 GiB
# steps of the profile), and no timeline could show it: its mark stays at the log's line
KV_TRACE_MIN_GIB = 1.0


def kv_allocations(events: pd.DataFrame, telemetry: pd.DataFrame | None) -> pd.DataFrame:
    """Where each run allocated its KV cache: run_id, t_s, seen_in. A run whose log says a cache was sized
    (KV_SIZED) gets the first sample where its fullest GPU's memory rose by about the logged size within
    KV_RISE_SPAN_S, near its first KV line ("trace"); where the trace shows no such rise (a pool under
    KV_TRACE_MIN_GIB, no samples, samples too far apart) the time of that first KV line ("log")."""
    columns = ["run_id", "t_s", "seen_in"]
    if events.empty or "field" not in events:
        return pd.DataFrame(columns=columns)
    kv = events[events["field"].isin(KV_LINES) & events["t_s"].notna()]
    sized = set(kv.loc[kv["field"].isin(KV_SIZED), "run_id"])
    fullest = (telemetry.groupby(["run_id", "t_s"])["mem_used_mib"].max()
               if telemetry is not None and len(telemetry) else None)
    rows = []
    for run_id, mine in kv[kv["run_id"].isin(sized)].groupby("run_id", sort=False):
        anchor = float(mine["t_s"].min())
        size = _kv_size_gib(mine)
        seen = None
        if fullest is not None and size is not None and size >= KV_TRACE_MIN_GIB and run_id in fullest.index:
            seen = _rise_at(fullest.loc[run_id], size * 1024, anchor)
        rows.append({"run_id": run_id, "t_s": anchor if seen is None else seen,
                     "seen_in": "log" if seen is None else "trace"})
    return pd.DataFrame(rows, columns=columns)


def _kv_size_gib(kv: pd.DataFrame) -> float | None:
    """The pool's logged size (GiB): kv_gib, else vLLM's available KV memory; None when the log gives neither."""
    if "value" not in kv:
        return None
    for field in ("kv_gib", "kv_avail_gib"):
        values = kv.loc[kv["field"] == field, "value"].dropna()
        if len(values) and values.max() > 0:
            return float(values.max())
    return None


def _rise_at(samples: pd.Series, size_mib: float, anchor: float) -> float | None:
    """Within KV_WINDOW_S of anchor, how far each sample's memory is from size_mib above any sample of the
    KV_RISE_SPAN_S before it (the previous sample at least: NVML may catch the pool half allocated, and a slower
    sampler the last weights just before it); the first sample as close as the closest (within KV_RISE_SAME of
    the size: a simulated host loads its weights in steps near a pool's size). None when none is within
    KV_RISE_TOLERANCE."""
    t, mib = samples.index.to_numpy(dtype="float64"), samples.to_numpy(dtype="float64")
    lo, hi = np.searchsorted(t, [anchor + KV_WINDOW_S[0], anchor + KV_WINDOW_S[1]], side="left")
    index = np.arange(max(int(lo), 1), int(hi))
    if not len(index):
        return None
    starts = np.minimum(np.searchsorted(t, t[index] - KV_RISE_SPAN_S, side="left"), index - 1)
    off = np.array([np.abs(mib[i] - mib[s:i] - size_mib).min() for i, s in zip(index, starts, strict=True)])
    if off.min() > KV_RISE_TOLERANCE * size_mib:
        return None
    return float(t[index[np.argmax(off <= off.min() + KV_RISE_SAME * size_mib)]])


def mark_phases(fig: plt.Figure, events: pd.DataFrame, runs: pd.DataFrame,
                telemetry: pd.DataFrame | None = None) -> plt.Figure:
    """Dotted lines where each startup phase ended, one per run (a line's gid: "<phase>: <run_id>"), each phase
    labelled once, at its first line, in a band above the traces (inside the plot the trace crossed "CUDA
    graphs"), each label on the first row where it overlaps no other. Distributed init, weights and CUDA graphs:
    where the run's log says they ended. The KV pool: where the run's trace shows the pool allocated
    (kv_allocations) — vLLM writes the line that gives its size only after the CUDA graphs. Per run, not a median
    over a variant's runs: a real server's runs start seconds apart (vLLM's compile cache), and a median weights
    mark then stood after one run's KV pool and matched no run."""
    variants = list(runs["variant"].drop_duplicates())
    if not fig.axes:
        return fig
    low, high = fig.axes[0].get_ylim()
    band = (high - low) * 0.7  # four rows of 10 pt labels (MIN_FONT_PT) that never touch
    # the axis's numbers stop at the data's top: the band above holds the labels, not memory (a 96 GiB card's axis
    # read up to 150 GiB)
    ticks = [t for t in fig.axes[0].get_yticks() if low <= t <= high]
    for ax in fig.axes:  # shared y: one headroom for all panels
        ax.set_ylim(low, high + band)
        ax.set_yticks(ticks)
    renderer = fig.canvas.get_renderer()
    logged = (events[events["field"].isin(PHASE_ENDS) & (events["field"] != "kv_gib")]
              if len(events) and "field" in events else pd.DataFrame(columns=["run_id", "field", "t_s"]))
    ends = logged.groupby(["run_id", "field"])["t_s"].median().reset_index()  # a run's ranks: the middle one
    kv = kv_allocations(events, telemetry).assign(field="kv_gib")
    ends = pd.concat([ends, kv[["run_id", "field", "t_s"]]], ignore_index=True)
    # a log's times are whole seconds, floored: a phase that ended within the server's first second reads as
    # before its start; no phase ends before the server started
    ends["t_s"] = pd.to_numeric(ends["t_s"]).clip(lower=0.0)
    for ax, variant in zip(fig.axes, variants, strict=False):
        mine = ends[ends["run_id"].isin(runs[runs["variant"] == variant]["run_id"]) & ends["t_s"].notna()]
        marks = []
        for field, label in PHASE_ENDS.items():
            phase = mine[mine["field"] == field]
            for run_id, t in zip(phase["run_id"], phase["t_s"], strict=True):
                ax.axvline(t, color="gray", linestyle=":", linewidth=0.8, gid=f"{label}: {run_id}")
            if len(phase):
                marks.append((float(phase["t_s"].min()), label))
        _label_marks(ax, sorted(marks), high, band, renderer)
    return fig


# phases that end this close together (a share of the time axis) are one label, "dist init · weights": four labels
# within a second of the start piled up in four rows over t≈0
SAME_PLACE = 0.04


def _label_marks(ax, marks: list[tuple[float, str]], high: float, band: float, renderer) -> None:
    placed = []
    left, right = ax.get_xlim()
    middle = (left + right) / 2
    grouped: list[tuple[float, str]] = []
    for t, label in marks:  # sorted by time
        if grouped and t - grouped[-1][0] <= SAME_PLACE * (right - left):
            grouped[-1] = (grouped[-1][0], f"{grouped[-1][1]} · {label}")
        else:
            grouped.append((t, label))
    for t, label in grouped:
        for row in range(len(PHASE_ENDS)):  # as many rows as labels: the last one is always free
            text = ax.text(t, high + band * (0.14 + 0.24 * row), f" {label} ", va="center",
                           ha="left" if t <= middle else "right", fontsize=MIN_FONT_PT, color="dimgray")
            box = text.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed) or row == len(PHASE_ENDS) - 1:
                break
            text.remove()
        placed.append(box)


GRID_CMAP = plt.get_cmap("RdYlGn")


def relative_luminance(rgb) -> float:
    """WCAG 2's relative luminance of an sRGB colour (components 0–1)."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (linear(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def readable_on(background) -> str:
    """Black or white, whichever contrasts more with the background: one of them always meets WCAG AA's 4.5:1
    (black text on the grid's dark red and dark green did not)."""
    lum = relative_luminance(background)
    return "black" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "white"


def outcome_grid(runs: pd.DataFrame, factors: list[str]) -> plt.Figure | None:
    """Ready runs out of the valid ones, for every combination of two factors (None unless the design has two).
    runs: every planned run; a `valid` column (analysis.observations) marks the observations, and a cell
    without any says so instead of showing a share."""
    if len(factors) != 2:
        return None
    rows, cols = (list(runs[f].drop_duplicates()) for f in factors)
    # each column wide enough for its label and its cell text, so neighbouring tick labels never overlap
    widest = max([len(str(c)) for c in cols] + [len("no valid run"), len("(9 excluded)")])
    fig, ax = plt.subplots(figsize=(2.2 + max(1.4, 0.09 * widest) * len(cols), 1.4 + 0.9 * len(rows)))
    share = [[0.0] * len(cols) for _ in rows]
    for i, a in enumerate(rows):
        for j, b in enumerate(cols):
            cell = runs[(runs[factors[0]] == a) & (runs[factors[1]] == b)]
            valid = cell[cell["valid"]] if "valid" in cell else cell
            k, n = int((valid["status"] == "ready").sum()), len(valid)
            share[i][j] = k / n if n else float("nan")
            left = len(cell) - n
            label = f"{k}/{n} ready" if n else "no valid run"
            background = GRID_CMAP(share[i][j]) if n else (1.0, 1.0, 1.0, 1.0)  # imshow leaves a NaN cell blank
            ax.text(j, i, label + (f"\n({left} excluded)" if left else ""), ha="center", va="center", fontsize=9,
                    color=readable_on(background))
    ax.imshow(share, cmap=GRID_CMAP, vmin=0, vmax=1, aspect="auto")  # cells as wide as their labels
    # the factor names once, as axis labels; the levels alone as tick labels
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xlabel(factors[1])
    ax.set_ylabel(factors[0])
    ax.set_title("launch outcome per combination", fontsize=10)
    fig.tight_layout()
    return fig


# a stratum's row (height 1): the interval found below its probes, the predicted break-even above them, so the
# three never sit on one another where the interval is narrow and the prediction falls inside it
PROBE_BAND = 0.18  # repeated probes of one value spread over ± this
INTERVAL_ROW = (-0.44, -0.26)
PREDICTED_ROW = (0.26, 0.44)


def probe_offsets(values: pd.Series) -> np.ndarray:
    """A vertical offset per probe run that separates the runs of one value (repetitions, a probe run again):
    spread evenly over ±PROBE_BAND, 0 for a value probed once."""
    offsets = np.zeros(len(values))
    positions = pd.Series(range(len(values)), index=values.index)
    for _, same in positions.groupby(values.to_numpy()):
        if len(same) > 1:
            offsets[same.to_numpy()] = np.linspace(-PROBE_BAND, PROBE_BAND, len(same))
    return offsets


def threshold_outcomes(runs: pd.DataFrame, stratum_of: dict[str, str], factor: str, flag: str,
                       thresholds: pd.DataFrame, simulated: bool = False) -> plt.Figure:
    """A threshold search: the outcome of every probe run against the flag's value, one row per stratum (the runs
    of one value side by side, probe_offsets); under them the interval found, above them the break-even the
    server's numbers predict as a black tick."""
    strata = list(thresholds["stratum"])
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 0.9 + 0.9 * max(1, len(strata))))
    seen: set[str] = set()
    for y, row in enumerate(thresholds.itertuples(index=False)):
        mine = runs[runs["run_id"].map(stratum_of) == row.stratum]
        values = pd.to_numeric(mine[factor])
        offsets = probe_offsets(values)
        for status in mine["status"].drop_duplicates():
            at = (mine["status"] == status).to_numpy()
            ax.scatter(values[at], y + offsets[at], color=STATUS_COLOURS.get(status, "black"),
                       label=None if status in seen else status, alpha=0.8, zorder=3)
            seen.add(status)
        if row.interval_low is not None and not math.isnan(row.interval_low):
            ax.fill_between([row.interval_low, row.interval_high], y + INTERVAL_ROW[0], y + INTERVAL_ROW[1],
                            color="tab:blue", alpha=0.35, linewidth=1, edgecolor="tab:blue",
                            label=None if "interval" in seen else "interval found")
            seen.add("interval")
        if row.predicted_break_even is not None and not math.isnan(row.predicted_break_even):
            ax.plot([row.predicted_break_even] * 2, [y + PREDICTED_ROW[0], y + PREDICTED_ROW[1]], color="black",
                    linewidth=1.5, zorder=4, label=None if "predicted" in seen else "predicted break-even")
            seen.add("predicted")
    ax.set_yticks(range(len(strata)), strata)
    ax.set_ylim(-0.5, len(strata) - 0.5)
    ax.set_xlabel(flag)
    ax.grid(alpha=0.3, axis="x")
    # right of the axes: inside, at the upper left, it covered the low end's probe of the top stratum
    ax.legend(fontsize=MIN_FONT_PT, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    title = "Outcome of every probe, the interval found (under them)\nand the break-even the log's numbers predict (over them)"
    fig.suptitle(title + (" — SIMULATED host" if simulated else ""), fontsize=10)
    fig.tight_layout()
    return fig
