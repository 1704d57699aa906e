"""What keeps `launchlab report` fast on a large run directory, checked on real captures: the sampler CSV read at
C speed is the frame the line-by-line reader gives, and the timeline's envelope keeps every extreme of the
fullest GPU while drawing at most a bucket per point. The time itself is measured in bench/report_scale.py."""

import glob

import numpy as np
import pandas as pd
import pytest

from conftest import DATA
from launchlab.gpu import telemetry
from launchlab.reporting import plots

CAPTURES = sorted({*glob.glob(str(DATA / "**/*.csv"), recursive=True),
                   *glob.glob(str(DATA / "nvsmi-samples" / "*.txt"))})


def slow(path) -> pd.DataFrame:
    """read_query_csv's frame, every line read by its line-by-line reader (no C-speed path, no thinning, the text
    whole): what read_query_csv must give, for files small enough to read so."""
    with telemetry.open_trace(path) as fh:
        columns, frames = telemetry._parse_lines(fh.read().split("\n"), None)
    return (pd.concat(frames, ignore_index=True, sort=False) if frames
            else pd.DataFrame([], columns=columns or list(telemetry.SAMPLER_FIELDS)))


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.rsplit("/", 1)[-1])
def test_a_real_capture_reads_at_c_speed_into_the_frame_the_line_by_line_reader_gives(path):
    expected = _with_timestamps(slow(path))
    pd.testing.assert_frame_equal(telemetry.read_query_csv(path), expected)


def test_a_capture_of_several_queries_reads_each_field_by_its_name_never_by_its_position():
    # a real file of several queries: the sampler's 17 fields in four formats, then 7 other fields under a header of
    # their own. Before, every row went under the last header's columns by position (pandas then raised)
    path = DATA / "nvsmi-samples" / "measured-h200-580-query-gpu-csv-variants.txt"
    frame = telemetry.read_query_csv(path)
    sampler = [line.split(", ") for line in path.read_text().splitlines()
               if line.startswith("2026/") and line.count(", ") == 16]
    assert len(sampler) == 8 and list(frame.columns[:3]) == ["timestamp", "index", "name"]
    with_memory = frame.dropna(subset=["memory.used"])
    assert len(with_memory) == 8 and set(with_memory["name"]) == {"NVIDIA H200"}
    assert with_memory["fan.speed"].isna().all() and with_memory["timestamp"].notna().all()
    others = frame.dropna(subset=["temperature.memory"])
    assert list(others["temperature.memory"]) == [37.0, 38.0] and list(others["index"]) == [0.0, 1.0]
    assert others["memory.used"].isna().all() and list(others["fabric.state"]) == ["Completed"] * 2
    assert telemetry.peak_memory_mib(path) == max(float(cells[8].split()[0]) for cells in sampler)


def test_odd_cells_headers_in_the_middle_and_cut_off_lines_read_as_line_by_line(tmp_path):
    cases = {
        "units-na-errors.csv": "timestamp, index, memory.used [MiB], utilization.gpu [%]\n"
                               "2026/11/29 21:16:31.592, 0, 616 MiB, [N/A]\n"
                               "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.\n"
                               "2026/11/29 21:16:31.692, 0, 700 MiB, [Not Supported]\n"
                               "2026/11/29 21:16:31.7",
        "cut-in-last-cell.csv": "timestamp, index, memory.used [MiB]\n2026/11/29 21:16:31.592, 0, 616\n"
                                "2026/11/29 21:16:31.692, 0, 7",
        "blank-line.csv": "timestamp, index, memory.used [MiB]\n2026/11/29 21:16:31.592, 0, 616\n\n"
                          "2026/11/29 21:16:31.692, 1, N/A\n",
        "name-with-comma.csv": "index, name, memory.used [MiB]\n0, Card,Ti, 5\n1, Card, 6\n",
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        pd.testing.assert_frame_equal(telemetry.read_query_csv(path).drop(columns="timestamp", errors="ignore"),
                                      _with_timestamps(slow(path)).drop(columns="timestamp", errors="ignore"),
                                      obj=name)
    assert list(telemetry.read_query_csv(tmp_path / "cut-in-last-cell.csv")["memory.used"]) == [616.0, 7.0]


def _with_timestamps(frame: pd.DataFrame) -> pd.DataFrame:
    if "timestamp" in frame:
        frame["timestamp"] = pd.to_datetime(frame["timestamp"], format=telemetry.TIMESTAMP_FORMAT, errors="coerce")
    return frame


def test_the_envelope_of_a_real_h200_trace_keeps_the_fullest_gpus_extremes_in_few_points():
    samples = telemetry.tidy(telemetry.read_query_csv(DATA / "h200-transformers-serve/trace-cb90.csv"), "r1", None)
    fullest = samples.groupby("t_s")["mem_used_mib"].max()
    env = plots.fullest_envelope(samples, buckets=10)
    assert len(env) <= 10 < len(fullest)
    assert env["hi_mib"].max() == fullest.max() and env["lo_mib"].min() == fullest.min()
    assert (env["lo_mib"] <= env["hi_mib"]).all() and env["t_s"].is_monotonic_increasing
    # with a bucket per sample or more, the envelope is the line itself less the points on flat stretches: drawn
    # through the points it keeps, it gives every sample's value back, and it keeps fewer points than the line
    every = plots.fullest_envelope(samples, buckets=100_000)
    assert list(every["hi_mib"]) == list(every["lo_mib"])
    assert len(every) < len(fullest)
    redrawn = np.interp(fullest.index.to_numpy(), every["t_s"].to_numpy(), every["hi_mib"].to_numpy())
    assert list(redrawn) == list(fullest.values)


def test_runs_keep_their_own_envelopes_and_no_trace_is_no_envelope():
    a = pd.DataFrame({"run_id": "a", "t_s": [0.0, 0.1, 0.1], "gpu_index": [0, 0, 1], "mem_used_mib": [1.0, 2.0, 9.0]})
    b = a.assign(run_id="b", mem_used_mib=[5.0, 5.0, 5.0])
    env = plots.fullest_envelope(pd.concat([a, b], ignore_index=True), buckets=1)
    assert env.set_index("run_id")[["lo_mib", "hi_mib"]].to_dict("index") == {"a": {"lo_mib": 1.0, "hi_mib": 9.0},
                                                                            "b": {"lo_mib": 5.0, "hi_mib": 5.0}}
    assert plots.fullest_envelope(a.iloc[:0]).empty


def test_the_report_reads_only_the_telemetry_columns_it_uses_and_those_a_directory_has(tmp_path):
    from launchlab.reporting import report
    from launchlab.store import rundir
    from launchlab.verdicts import frames

    directory = rundir.RunDir(tmp_path)
    samples = telemetry.tidy(telemetry.read_query_csv(DATA / "h200-transformers-serve/trace-cb90.csv"), "r1", None)
    samples.insert(2, "node", 0)
    tables = frames.Frames(pd.DataFrame({"run_id": ["r1"]}), pd.DataFrame(columns=frames.EVENT_COLUMNS),
                           samples.drop(columns=["gpu_index"]))  # as if an older directory lacked one
    (tmp_path / "manifest.json").write_text("{}")
    frames.write(tmp_path, tables)
    loaded = frames.load(tmp_path, telemetry_columns=report.SUMMARY_TELEMETRY_COLUMNS).telemetry
    assert list(loaded.columns) == ["run_id", "t_s", "node", "mem_used_mib", "mem_total_mib"]
    assert loaded["mem_used_mib"].max() == samples["mem_used_mib"].max()
    assert "util_gpu_pct" in frames.load(tmp_path).telemetry  # everything, unless asked for less
    assert directory.frame("telemetry").is_file()
