"""The report's figures read cleanly: no label drawn over another (measured on the rendered figure's boxes)."""

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402

from launchlab.reporting import plots  # noqa: E402


def boxes(fig, texts):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in texts if t.get_text()]


def overlapping(extents) -> list[tuple[int, int]]:
    return [(i, j) for i, a in enumerate(extents) for j, b in enumerate(extents) if i < j and a.overlaps(b)]


def test_the_outcome_grid_tick_labels_do_not_overlap_even_with_long_levels():
    levels = ["continuous-batching-on", "continuous-batching-off", "paged-attention-v2"]
    runs = pd.DataFrame([{"batching": b, "memory_percent": m, "status": "ready", "valid": True}
                         for b in levels for m in ("0.5", "0.9")])
    fig = plots.outcome_grid(runs, ["memory_percent", "batching"])
    ax = fig.axes[0]
    assert overlapping(boxes(fig, ax.get_xticklabels())) == []
    assert overlapping(boxes(fig, ax.get_yticklabels())) == []
    assert ax.get_xlabel() == "batching" and ax.get_ylabel() == "memory_percent"


def test_the_budget_chart_legend_does_not_cover_its_axis_label():
    memory = pd.DataFrame({"variant": ["a=1", "a=2"], "dist_init_mem_gib": [1.0, 1.0],
                           "weights_mem_gib": [70.0, 70.0], "kv_gib": [10.0, 15.0],
                           "graph_mem_gib": [1.0, 1.0], "weights_end_avail_gib": [23.0, 23.0]})
    for rows in (memory, pd.concat([memory] * 3).assign(variant=[f"v{i}" for i in range(6)])):
        fig = plots.memory_budget(rows, card_gib=95.6)
        ax = fig.axes[0]
        [label] = boxes(fig, [ax.xaxis.label])
        legend = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
        assert not legend.overlaps(label), f"{len(rows)} variants: the legend covers the x label"


def test_the_threshold_plots_legend_covers_no_probe():
    """The real vLLM search (examples/h200-vllm-threshold): its low end, 0.005, is a failed probe at the left edge
    of the top stratum — where a legend at the axes' upper left sat over it."""
    from conftest import ROOT
    from launchlab.reporting import report

    [run_dir] = ROOT.glob("examples/h200-vllm-threshold/2*")
    rep = report.load(run_dir)
    spec = rep.exp.search
    stratum_of = {p["run_id"]: p.get("stratum") for p in rep.planned}
    fig = plots.threshold_outcomes(rep.frames.runs, stratum_of, spec.factor, spec.flag, rep.thresholds)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    [ax] = fig.axes
    legend = ax.get_legend().get_window_extent(renderer)
    dots = [p for c in ax.collections for p in c.get_offsets()]
    assert len(dots) == 6
    pixels = [ax.transData.transform(p) for p in dots]
    assert [p for p in pixels if legend.contains(*p)] == []
    assert legend.x0 >= ax.get_window_extent(renderer).x1  # beside the axes, not over the data
    assert fig.get_tightbbox(renderer).x1 <= fig.bbox.x1 + 1  # and not cut off at the figure's edge
