"""Each point of issue 41's point 5, on the functions that make it: numbers, tables, the charts' geometry, the
sampler's name, the kinds' units notes, the import banner."""

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402

from conftest import ROOT  # noqa: E402
from launchlab import numtext, params  # noqa: E402
from launchlab.logparse.kinds import KINDS  # noqa: E402
from launchlab.reporting import budgetchart, plots, report  # noqa: E402
from launchlab.reporting.reporttables import markdown, styled  # noqa: E402
from launchlab.store.verdictrecord import Effect  # noqa: E402
from launchlab.verdicts import budget, question  # noqa: E402


def test_a_break_even_has_three_significant_digits_and_no_number_reads_minus_zero():
    assert numtext.significant(0.0052214) == "0.00522"
    assert numtext.significant(0.7444) == "0.744" and numtext.significant(0.1) == "0.100"
    assert numtext.significant(0.0004, signed=True) == "+0.000400"
    assert numtext.fixed(-0.0001, 2) == "0.00" and numtext.fixed(-0.5, 1) == "-0.5"
    summary = pd.DataFrame({"variant": ["a"], "break_even_utilization": [0.0052214]})
    assert "0.00522" in budget.break_even_markdown(summary.rename(columns={"break_even_utilization":
                                                                           KINDS["vllm"].break_even.column}))


def test_tables_write_whole_numbers_as_integers_drop_empty_columns_and_keep_ids_whole():
    frame = pd.DataFrame({"run_id": ["01_a-b.c_rep1", "02_a-b.c_rep2"], "kv_tokens": [137178.0, 2.0],
                          "repetitions_to_settle": [4.0, None], "diff_gib": [-0.0001, 1.5],
                          "break_even_fraction": [0.0052214, 0.7444], "note": ["a free text", ""],
                          "host_only": [None, None]})
    html = styled(frame, precision=3).to_html()
    assert "137,178<" in html and ">4<" in html and "137,178.000" not in html and "4.000" not in html
    assert "-0.000" not in html and ">0.000<" in html
    assert "0.00522" in html and "host_only" not in html
    assert "text-align: left;\n  white-space: nowrap" in html  # the run ids' column
    table = markdown(frame)
    assert "137,178 |" in table and "0.00522" in table and "-0.000" not in table


def test_the_value_a_launch_asked_for_is_written_as_given_in_the_budget_tables():
    # issue 48: the budget showed --mem-fraction-static 0.0025 as 0.003, a value nobody asked for
    frame = pd.DataFrame({"variant": ["a", "b", "c"], "fraction": [0.0025, 0.85, 1.0], "rest_gib": [-0.0081, 2.0, 3.5]})
    html, table = styled(frame, precision=3).to_html(), markdown(frame)
    for written in (">0.0025<", ">0.85<", ">1<"):
        assert written in html
    assert "| 0.0025 |" in table and "| 0.85 |" in table and "| 1 |" in table and "0.003 |" not in table
    assert "-0.008" in table, "the other columns keep their precision"
    vllm = markdown(pd.DataFrame({"utilization": [0.0051, 0.3], "rest_gib": [0.5, 0.25]}))
    assert "| 0.0051 |" in vllm and "| 0.3 |" in vllm
    assert [numtext.as_given(v) for v in (0.1 + 0.2, 1e-05, -0.0071)] == ["0.3", "0.00001", "-0.0071"]


def test_a_long_table_writes_a_quantity_of_whole_numbers_as_integers_beside_one_of_decimals():
    # the effects table: one row per metric, its KV tokens beside its GiB (5,401,344.000 read as a measured fraction)
    frame = pd.DataFrame({"metric": ["weights_mem_gib", "kv_tokens", "kv_tokens"], "mean": [0.3, 5401344.0, 137178.0],
                          "sd": [0.0, 0.0, 12.0], "diff": [-0.0001, 0.0, -4.0]})
    html = styled(frame, precision=3, rows_of="metric").to_html()
    assert ">5,401,344<" in html and ">137,178<" in html and ">-4<" in html and "5,401,344.000" not in html
    assert ">0.300<" in html and "-0.000" not in html, "the GiB row keeps its decimals"


def test_a_ratio_beside_them_leaves_the_counts_of_a_row_whole():
    # issue 67, 7: the demo's kv_tokens row read 137,178.000, sd 0.000 — its ratio (0.944) kept the whole row decimal
    frame = pd.DataFrame({"metric": ["kv_tokens"], "mean": [137178.0], "sd": [0.0], "baseline_mean": [145296.0],
                          "diff": [-8118.0], "ratio": [0.944]})
    html = styled(frame, precision=3, rows_of="metric").to_html()
    assert ">137,178<" in html and ">0<" in html and ">-8,118<" in html and ">0.944<" in html
    assert ".000<" not in html


def test_the_sampler_is_named_as_the_runs_had_it():
    assert report.sampler_name(params.SamplerSpec(kind="nvml", interval_ms=5)) == "NVML every 5 ms"
    assert report.sampler_name(params.SamplerSpec()) == "nvidia-smi every 100 ms"
    effect = Effect(factor="f", level="b", metric="peak_mem_used_mib", strata=[], n=2, mean=2048.0, sd=0.0,
                    min=2048.0, max=2048.0, baseline_n=2, baseline_mean=1024.0, diff=1024.0, ci_low=None,
                    ci_high=None, ratio=2.0, signs_disagree=False)
    said = question.markdown("how much GPU memory?", [effect], {"f": "a"}, sampler="NVML every 5 ms")
    assert "peak GPU memory (NVML every 5 ms)" in said and "nvidia-smi" not in said


def test_each_kind_has_its_own_units_note():
    assert "`GB` is GiB" in KINDS["sglang"].units_note
    assert "SGLang" not in KINDS["vllm"].units_note and "vLLM" in KINDS["vllm"].units_note


def test_the_import_banner_shows_code_not_backticks():
    shown = report.imported_banner()
    assert shown.startswith("> IMPORTED") and "`launchlab import`" in shown and "\\`" not in shown


def _telemetry(peak_mib: float, total_mib: float = 143_771) -> tuple[pd.DataFrame, pd.DataFrame]:
    t = [i * 0.1 for i in range(100)]
    telemetry = pd.DataFrame({"run_id": "r1", "t_s": t, "gpu_index": 0, "mem_total_mib": total_mib,
                              "mem_used_mib": [peak_mib * min(1, i / 50) for i in range(100)]})
    runs = pd.DataFrame({"run_id": ["r1"], "variant": ["v"], "status": ["ready"], "repetition": [1]})
    return telemetry, runs


def _inside(inner, outer) -> bool:
    return inner.x0 < outer.x1 and inner.x1 > outer.x0 and inner.y0 < outer.y1 and inner.y1 > outer.y0


def test_the_timeline_scales_to_its_data_its_legend_is_outside_and_no_phase_is_marked_before_0():
    telemetry, runs = _telemetry(2 * 1024)  # 2 GiB on a 140 GiB card
    fig = plots.memory_timeline(telemetry, runs, sampler="NVML every 5 ms")
    ax = fig.axes[0]
    assert ax.get_ylim()[1] < 4, "the axis runs to the card's capacity, not the data"
    assert "140 GiB, off this scale" in fig._suptitle.get_text() and "NVML every 5 ms" in fig._suptitle.get_text()
    renderer = fig.canvas.get_renderer()
    assert not _inside(ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer))
    events = pd.DataFrame({"run_id": ["r1"], "field": ["dist_init_mem_gib"], "t_s": [-0.6], "value": [1.0]})
    plots.mark_phases(fig, events, runs, telemetry)
    marks = [line for line in ax.lines if (line.get_gid() or "").startswith("dist init")]
    assert marks and all(x >= 0 for line in marks for x in line.get_xdata())
    texts = [t for a in fig.axes for t in a.texts] + [ax.get_legend().get_texts()[0]]
    assert min(t.get_fontsize() for t in texts) >= plots.MIN_FONT_PT


def test_the_budget_draws_the_card_on_its_scale_and_each_phase_readable_on_a_log_scale():
    memory = pd.DataFrame({"variant": ["low"], "dist_init_mem_gib": [0.001], "weights_mem_gib": [0.6],
                           "kv_gib": [0.3], "graph_mem_gib": [0.0]})
    fig = budgetchart.memory_budget(memory, 140.0)
    card_ax, log_ax = fig.axes
    assert card_ax.get_xlim()[1] >= 140.0, "the card's panel spans the card"
    assert log_ax.get_xscale() == "log"
    low, high = log_ax.get_xlim()
    assert low <= 0.001 and high >= 140.0, "0.001 GiB and the card on one readable scale"
    dots = sorted(float(x) for line in log_ax.lines if line.get_marker() == "o" for x in line.get_xdata())
    assert dots == [0.001, 0.3, 0.6], "every phase that took memory (none for the CUDA graphs' 0)"


def test_probe_runs_of_one_value_are_drawn_apart_and_the_interval_and_tick_beside_them():
    offsets = plots.probe_offsets(pd.Series([0.005, 0.005, 0.005, 0.005, 0.006]))
    assert len(set(offsets[:4])) == 4 and offsets[4] == 0
    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(4)], "status": ["failed"] * 4, "flag": ["0.005"] * 4})
    table = pd.DataFrame({"stratum": ["s"], "interval_low": [0.005], "interval_high": [0.006],
                          "predicted_break_even": [0.0052]})
    fig = plots.threshold_outcomes(runs, {f"r{i}": "s" for i in range(4)}, "flag", "--flag", table)
    ax = fig.axes[0]
    dots = ax.collections[0].get_offsets()
    assert len({round(float(y), 3) for _, y in dots}) == 4
    [tick] = [line for line in ax.lines if line.get_color() == "black"]
    assert min(tick.get_ydata()) > max(float(y) for _, y in dots), "the predicted tick sits on the probes"


def test_the_commands_give_the_baseline_its_whole_environment_and_mask_every_variant_s_secrets():
    """Issue 67, 7: the Commands section left out the baseline's environment and ran each command into the next
    variant's label. And a variable named in `secrets:` was masked in the first variant only: the loop reused the
    secrets' name for its notes."""
    from types import SimpleNamespace

    text = (ROOT / "params" / "demo.yaml").read_text().replace("  env: {}\n", "  env: {LOG_LEVEL: info}\n").replace(
        '"on": {}', '"on": {env: {MY_ENDPOINT: "hunter2-abc"}}').replace(
        "repetitions: 4", "repetitions: 4\nsecrets: [MY_ENDPOINT]")
    exp = params.loads(text)
    shown = report.Report.variant_commands(SimpleNamespace(exp=exp))
    by_name = {name: notes for name, _, notes in shown}
    base = "custom_ar=off, mem_fraction=0.75 (baseline)"
    assert by_name[base] == ["env LOG_LEVEL=info", "env SGLANG_FORCE_CUSTOM_AR_PCIE=0"]
    on = [notes for name, _, notes in shown if name.startswith("custom_ar=on")]
    assert len(on) == 2 and all("env MY_ENDPOINT=****" in notes for notes in on), on
    assert "hunter2" not in repr(shown)
    html = report.Report.commands(SimpleNamespace(exp=exp, imported=False,
                                                  variant_commands=lambda: shown)).data
    assert html.count('<div class="ll-command">') == 4 and html.count("</div>") == 4


def test_a_header_is_in_words_its_name_in_the_title_and_a_factor_keeps_its_own_name():
    """Issue 67, 7: headers wrapped after an underscore read as two names (`peak_mem_` / `used_gib`)."""
    import re

    frame = pd.DataFrame({"custom_ar": ["on"], "peak_mem_used_gib_max": [1.5], "failure_reason": ["x"], "n": [2]})
    heads = re.findall(r"<th[^>]*>(.*?)</th>", styled(frame, as_written=("custom_ar",)).to_html())
    assert heads == ["custom_<wbr>ar", '<span title="peak_mem_used_gib_max">peak mem used GiB max</span>',
                     '<span title="failure_reason">failure reason</span>', "n"]
