"""What a run costs the kit in its kernel: the imports of the run notebook stay light, polling backs off instead
of sleeping a fixed time, the run's peak comes from its samples without a frame, and the notebook's tables
(pandas-free) still escape what the server wrote. The speed itself is measured in bench/run_overhead.py."""

import math
import subprocess
import sys

import pytest

from conftest import DATA
from launchlab import polling
from launchlab.gpu import telemetry
from launchlab.runner import runview
from launchlab.store import rundir
from launchlab.store.records import RunRecord

HEAVY = ("papermill", "nbformat", "nbconvert", "pandas", "numpy", "pyarrow", "matplotlib", "jsonschema")


def test_what_the_run_notebook_imports_loads_no_notebook_machinery_pandas_or_plotting():
    # the run notebook's setup cell; papermill (through jsonschema's grammars) alone cost each run seconds
    code = ("import sys; from launchlab.runner import batch, runview; "
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_polling_starts_within_milliseconds_and_backs_off_to_its_longest_pause():
    pauses = polling.backoff(0.01, 0.2)
    assert [next(pauses) for _ in range(8)] == [0.01, 0.02, 0.04, 0.08, 0.16, 0.2, 0.2, 0.2]


@pytest.mark.parametrize("path", sorted(DATA.glob("**/*.csv")) + sorted(DATA.glob("nvsmi-samples/*.txt")),
                         ids=lambda p: p.name)
def test_the_peak_of_a_real_trace_read_without_a_frame_is_the_frames_peak(path):
    frame = telemetry.read_query_csv(path)
    want = frame["memory.used"].max() if "memory.used" in frame else math.nan
    assert telemetry.peak_memory_mib(path) == (None if math.isnan(want) else want)


def test_the_run_kernel_reads_its_runs_peak_without_importing_pandas():
    """The kernel reads the peak as the run ends (lifecycle._read_results): pandas there cost each run a quarter
    of its kernel's CPU."""
    path = DATA / "h200-transformers-serve/trace-cb90.csv"
    code = ("import sys; from launchlab.gpu import telemetry; "
            f"print(telemetry.peak_memory_mib({str(path)!r}), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert float(out[0]) > 0 and out[1] == "False"


def test_a_trace_without_memory_samples_has_no_peak_not_zero(tmp_path):
    path = tmp_path / "smi.csv"
    path.write_text("timestamp, index, memory.used [MiB]\n2026/11/29 21:16:31.592, 0, [N/A]\n")
    assert telemetry.peak_memory_mib(path) is None
    assert math.isnan(telemetry.read_query_csv(path)["memory.used"].iloc[0])


def test_the_run_notebooks_tables_escape_what_the_server_log_said(tmp_path):
    folder = rundir.RunDir(tmp_path).run("r1")
    folder.path.mkdir(parents=True)
    rundir.write_json(folder.parsed, {"ranks": {"0": {"kv_gib": 12.5, "note": "<script>alert(1)</script>"},
                                                "1": {"kv_gib": 12.4}}})
    table = runview.rank_table(tmp_path, "r1")
    html = table._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # one column per rank, one row per field: ranks are few and fields many, so the table fits the notebook
    assert table.columns == ["rank 0", "rank 1"] and table.rows[0] == ("kv_gib", ["12.5", "12.4"])
    assert table.rows[1] == ("note", ["<script>alert(1)</script>", ""])
    assert repr(table).splitlines()[0].split() == ["field", "rank", "0", "rank", "1"]


def test_the_run_record_table_shows_what_was_recorded_and_leaves_out_empty_fields():
    record = RunRecord("r1", "baseline", 1, "box", {}, status="failed", failure_message="Not enough <memory>")
    table = runview.summary_table(record)
    assert ("failure_message", ["Not enough <memory>"]) in table.rows and table.rows[0][0] == "outcome"
    assert "Not enough &lt;memory&gt;" in table._repr_html_()
    assert all(index != "smoke_status" for index, _ in table.rows)


def test_a_batch_run_notebook_names_the_summary_for_its_gpu_trace_and_loads_no_pandas_or_matplotlib(tmp_path):
    # `launchlab run` passes draw_trace=False: the summary draws every run's trace, and drawing it in each run
    # notebook first cost a batch about 1.5 s per run (bench/run_overhead.py)
    code = ("import sys; from launchlab.runner import runview; "
            f"assert runview.gpu_trace({str(tmp_path)!r}, 'r1', draw=False) is None; "
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    said, loaded = out.strip().splitlines()[0], out.strip().splitlines()[1:]
    assert f"drawn in the batch's summary ({tmp_path / 'summary.html'}" in said
    assert "runview.gpu_trace(run_dir, 'r1')" in said
    assert loaded == []

