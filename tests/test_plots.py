"""The report's figures read cleanly: no label drawn over another (measured on the rendered figure's boxes)."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from launchlab.reporting import budgetchart, plots  # noqa: E402


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


def test_the_budget_chart_legend_does_not_cover_its_axis_labels_or_panels():
    memory = pd.DataFrame({"variant": ["a=1", "a=2"], "dist_init_mem_gib": [1.0, 1.0],
                           "weights_mem_gib": [70.0, 70.0], "kv_gib": [10.0, 15.0],
                           "graph_mem_gib": [1.0, 1.0], "weights_end_avail_gib": [23.0, 23.0]})
    for rows in (memory, pd.concat([memory] * 3).assign(variant=[f"v{i}" for i in range(6)])):
        fig = budgetchart.memory_budget(rows, card_gib=95.6)
        renderer = fig.canvas.get_renderer()
        [legend] = fig.legends
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            [label] = boxes(fig, [ax.xaxis.label])
            assert not box.overlaps(label), f"{len(rows)} variants: the legend covers the x label"
            assert not box.overlaps(ax.get_window_extent(renderer)), f"{len(rows)} variants: the legend covers a panel"


def test_the_budget_chart_marks_the_kept_back_share_at_the_cards_end_and_the_room_it_left():
    memory = pd.DataFrame({"variant": ["custom_ar=on"], "dist_init_mem_gib": [2.1], "weights_mem_gib": [70.0],
                           "free_gib": [22.9]})
    summary = pd.DataFrame({"variant": ["custom_ar=on"], "total_gib": [92.92], "fraction": [0.75],
                            "rest_gib": [-0.31]})
    fig = budgetchart.memory_budget(memory, 95.6, summary, "--mem-fraction-static")
    card_ax, log_ax = fig.axes
    [band] = [p for p in card_ax.patches if p.get_gid() == budgetchart.RESERVED_GID]
    assert band.get_x() == pytest.approx(95.6 - 92.92 * 0.25) and band.get_x() + band.get_width() == pytest.approx(95.6)
    assert "kept back by --mem-fraction-static" in fig.legends[0].get_texts()[1].get_text()
    [room] = [t.get_text() for t in log_ax.texts]
    assert room == "room for KV -0.31 GiB"


def test_the_threshold_plots_legend_covers_no_probe():
    """The real vLLM search (examples/h200-vllm-threshold): its low end, 0.005, is a failed probe at the left edge
    of the top stratum — where a legend at the axes' upper left sat over it."""
    from conftest import ROOT
    from launchlab.reporting import report

    [run_dir] = ROOT.glob("examples/h200-vllm-threshold/2*")
    rep = report.load(run_dir)
    spec = rep.exp.search
    stratum_of = {p.run_id: p.stratum for p in rep.planned}
    fig = plots.threshold_outcomes(rep.frames.runs, stratum_of, spec.factor, spec.flag, rep.thresholds)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    [ax] = fig.axes
    legend = ax.get_legend().get_window_extent(renderer)
    dots = [p for c in ax.collections if hasattr(c, "get_sizes") and len(c.get_sizes()) for p in c.get_offsets()]
    assert len(dots) == 6
    pixels = [ax.transData.transform(p) for p in dots]
    assert [p for p in pixels if legend.contains(*p)] == []
    assert legend.x0 >= ax.get_window_extent(renderer).x1  # beside the axes, not over the data
    assert fig.get_tightbbox(renderer).x1 <= fig.bbox.x1 + 1  # and not cut off at the figure's edge


def _contrast(a, b) -> float:
    """WCAG 2's contrast ratio, computed here on its own (not with the module's helper)."""
    def lum(rgb):
        c = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in rgb[:3]]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_every_outcome_grid_cell_text_meets_wcag_aa_contrast_on_its_colour():
    from matplotlib.colors import to_rgba

    # shares 0, 1/4, 1/2, 3/4 and 1 (the colour map's dark red, orange, yellow, light and dark green), and no run
    runs = pd.DataFrame([{"a": str(k), "b": "x", "status": "ready" if i < k else "failed", "valid": True}
                         for k in range(5) for i in range(4)]
                        + [{"a": "none", "b": "x", "status": "error", "valid": False}])
    fig = plots.outcome_grid(runs, ["a", "b"])
    ax = fig.axes[0]
    [image] = ax.get_images()
    texts = [t for t in ax.texts if "ready" in t.get_text() or "valid" in t.get_text()]
    assert len(texts) == 6
    for text in texts:
        _, row = text.get_position()
        value = image.get_array()[int(row)][0]
        blank = value is None or value is np.ma.masked or value != value  # NaN: imshow leaves the cell white
        cell = (1.0, 1.0, 1.0) if blank else image.cmap(image.norm(value))
        assert _contrast(to_rgba(text.get_color()), cell) >= 4.5, (text.get_text(), text.get_color(), cell)


def test_the_timelines_phase_labels_overlap_none_and_sit_above_every_trace():
    # a fast start: dist init, weights and the KV pool end within 0.4 s of each other
    telemetry = pd.DataFrame([{"run_id": "r1", "t_s": t / 10, "gpu": 0, "mem_used_mib": 1024 * min(90, t),
                               "mem_total_mib": 97_887} for t in range(0, 400)])
    runs = pd.DataFrame([{"run_id": "r1", "variant": "v=1", "status": "ready", "repetition": 1}])
    events = pd.DataFrame([{"run_id": "r1", "field": f, "t_s": t} for f, t in
                           (("dist_init_mem_gib", 3.0), ("weights_mem_gib", 3.2), ("kv_gib", 3.4),
                            ("graph_mem_gib", 30.0))])
    fig = plots.mark_phases(plots.memory_timeline(telemetry, runs), events, runs)
    ax = fig.axes[0]
    phases = set(plots.PHASE_ENDS.values())
    labels = [t for t in ax.texts if set(t.get_text().strip().split(" · ")) <= phases]
    assert sorted(p for t in labels for p in t.get_text().strip().split(" · ")) == sorted(phases)
    # issue 67, 7: phases that end within a moment of each other are one label, not a pile of rows at t≈0
    assert [t.get_text().strip() for t in labels] == ["dist init · weights · KV pool", "CUDA graphs"], \
        [t.get_text() for t in labels]
    assert overlapping(boxes(fig, labels)) == []
    top = max(line.get_ydata().max() for line in ax.get_lines() if len(line.get_ydata()) > 2)
    assert all(t.get_position()[1] > top and t.get_position()[1] < ax.get_ylim()[1] for t in labels)
    # issue 67, 7: the axis's numbers stop at the card (96 GiB here), the labels' band above has none — the axis of
    # a 96 GiB card read up to 150 GiB
    assert ax.get_ylim()[1] > 150 and max(ax.get_yticks()) <= 97_887 / 1024 * 1.1, ax.get_yticks()


def _kv_marks(ax) -> dict[str, float]:
    """The panel's KV pool lines, by run id (mark_phases names each `KV pool: <run_id>`)."""
    return {line.get_gid().split(": ", 1)[1]: line.get_xdata()[0] for line in ax.get_lines()
            if (line.get_gid() or "").startswith("KV pool: ")}


def test_each_real_vllm_runs_kv_pool_mark_sits_where_nvml_saw_its_pool_allocated(example_frames):
    """examples/h200-vllm-kv: vLLM 0.26 writes the line that gives the pool's size ("Current kv cache memory in use
    is 41.21 GiB") after the CUDA graphs, 1-3 s after the allocation, and the three runs of a variant allocate
    seconds apart (49.4, 45.5 and 54.8 s with graphs), so one median mark matched none of them."""
    from conftest import ROOT

    [run_dir] = ROOT.glob("examples/h200-vllm-kv/2*")
    built = example_frames(run_dir)
    runs, events, telemetry = built.runs, built.events, built.telemetry
    fig = plots.mark_phases(plots.memory_timeline(telemetry, runs), events, runs, telemetry)
    ready = runs[runs["status"] == "ready"]
    assert len(ready) == 6
    for ax, variant in zip(fig.axes, runs["variant"].drop_duplicates(), strict=False):
        mine = runs[runs["variant"] == variant]
        # the NVML jump: the pool is 41.21 GiB; nothing else in these runs ever holds 20 GiB
        jumps = {r: telemetry[(telemetry["run_id"] == r) & (telemetry["mem_used_mib"] > 20 * 1024)]["t_s"].min()
                 for r in mine["run_id"]}
        verticals = [line.get_xdata()[0] for line in ax.get_lines() if len(set(line.get_xdata())) == 1]
        for run_id, jump in jumps.items():
            if run_id in set(ready["run_id"]):
                assert min(abs(x - jump) for x in verticals) <= 0.5, (run_id, jump, verticals)
            else:
                assert pd.isna(jump)  # a failed run (-0.17 GiB available) allocated no pool
        marks = _kv_marks(ax)
        assert set(marks) == set(mine["run_id"]) & set(ready["run_id"]), variant
        for run_id, x in marks.items():
            assert abs(x - jumps[run_id]) <= 0.5, (run_id, x, jumps[run_id])
        labels = [t.get_text().strip() for t in ax.texts]
        assert any("KV pool" in label.split(" · ") for label in labels) == bool(marks)


def test_each_real_vllm_run_has_its_own_phase_marks_in_the_order_it_went_through_them(example_frames):
    """examples/h200-vllm-kv: the runs of a variant start seconds apart (a cold compile cache), so a variant's
    median weights mark stood after one run's KV pool (41 s against 48 s with --enforce-eager) and matched no run:
    each run gets its own marks, and within a run the weights end before its pool is allocated."""
    from conftest import ROOT

    [run_dir] = ROOT.glob("examples/h200-vllm-kv/2*")
    built = example_frames(run_dir)
    runs, events, telemetry = built.runs, built.events, built.telemetry
    fig = plots.mark_phases(plots.memory_timeline(telemetry, runs, sampler="nvml"), events, runs, telemetry)
    assert "(NVML," in fig.get_suptitle()
    for ax, variant in zip(fig.axes, runs["variant"].drop_duplicates(), strict=False):
        marks: dict[str, dict[str, float]] = {}
        for line in ax.get_lines():
            if ": " in (line.get_gid() or ""):
                phase, run_id = line.get_gid().split(": ", 1)
                marks.setdefault(run_id, {})[phase] = line.get_xdata()[0]
        assert set(marks) == set(runs[runs["variant"] == variant]["run_id"]), variant  # every run has its marks
        for run_id, phases in marks.items():
            assert "weights" in phases, run_id
            if "KV pool" in phases:
                assert phases["weights"] < phases["KV pool"], (run_id, phases)
        labels = [t.get_text().strip() for t in ax.texts]
        assert [p for label in labels for p in label.split(" · ")].count("weights") == 1  # once, however many runs


def test_a_simulated_sglang_pool_is_marked_at_its_step_not_at_its_log_lines_second():
    """SGLang writes "KV Cache is allocated" just after the allocation, in whole seconds (here 0.5 s before the step);
    the simulated host loads its 70 GiB of weights in five steps of 14 GiB, 0.2 s apart, close to the 12 GiB pool
    that follows 0.1 s after the last (sampled every 0.1 s, as the demo's nvidia-smi is)."""
    def gib(i: int) -> float:
        return min(5, max(0, (i - 80) // 2)) * 14 + (12 if i >= 91 else 0)

    telemetry = pd.DataFrame([{"run_id": "r1", "t_s": i / 10, "gpu": 0, "mem_used_mib": 1024 * gib(i),
                               "mem_total_mib": 97_887} for i in range(0, 200)])
    runs = pd.DataFrame([{"run_id": "r1", "variant": "v=1", "status": "ready", "repetition": 1}])
    events = pd.DataFrame([{"run_id": "r1", "field": f, "t_s": t, "value": v} for f, t, v in
                           (("weights_mem_gib", 8.6, 70.0), ("kv_tokens", 8.6, 80_000), ("kv_gib", 8.6, 12.0),
                            ("graph_mem_gib", 11.6, 0.5))])
    fig = plots.mark_phases(plots.memory_timeline(telemetry, runs), events, runs, telemetry)
    assert _kv_marks(fig.axes[0]) == {"r1": pytest.approx(9.1, abs=1e-9)}
    # without a trace the mark stays at the log's line
    fig = plots.mark_phases(plots.memory_timeline(telemetry, runs), events, runs)
    assert _kv_marks(fig.axes[0]) == {"r1": pytest.approx(8.6, abs=1e-9)}


def test_the_envelope_leaves_out_only_points_on_a_flat_stretch_so_the_drawing_is_the_same():
    """A server that holds its memory for a minute drew hundreds of identical points (310 kB of SVG for the H100
    diagnose example's 14 runs): each bucket equal to both neighbours is left out, every other one kept."""
    held = [0, 0, 5, 80, 80, 80, 80, 80, 80, 80, 3, 3, 3, 0]
    telemetry = pd.DataFrame([{"run_id": run, "t_s": float(t), "gpu": 0, "mem_used_mib": float(m),
                               "mem_total_mib": 97_887} for run in ("r1", "r2") for t, m in enumerate(held)])
    env = plots.fullest_envelope(telemetry, buckets=len(held))
    for run, kept in env.groupby("run_id"):
        assert list(kept["hi_mib"]) == [0, 0, 5, 80, 80, 3, 3, 0], run
        # the kept points drawn as a polyline pass through every left-out sample
        assert list(np.interp(np.arange(len(held)), kept["t_s"], kept["hi_mib"])) == held
