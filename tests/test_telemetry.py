import math

from conftest import DATA
from launchlab.gpu import telemetry
from launchlab.hosts import commands


def test_a_real_h200_trace_reads_into_numbers(tmp_path):
    frame = telemetry.read_query_csv(DATA / "h200-transformers-serve/trace-cb90.csv")
    assert list(frame.columns) == ["timestamp", "index", "memory.total", "memory.used", "memory.free", "utilization.gpu"]
    assert frame["memory.total"].iloc[0] == 143771
    assert frame["memory.used"].max() > 100_000
    tidy = telemetry.tidy(frame, "r1", None)
    assert list(tidy.columns) == ["run_id", "t_s", "gpu_index", "mem_used_mib", "mem_total_mib", "mem_free_mib",
                                  "util_gpu_pct"]
    assert tidy["t_s"].min() == 0


def test_values_with_units_na_cells_and_error_lines(tmp_path):
    path = tmp_path / "smi.csv"
    path.write_text("timestamp, index, memory.used [MiB], utilization.gpu [%]\n"
                    "2026/11/29 21:16:31.592, 0, 616 MiB, [N/A]\n"
                    "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.\n"
                    "2026/11/29 21:16:31.692, 0, 700 MiB, [Not Supported]\n"
                    "2026/11/29 21:16:31.7")
    frame = telemetry.read_query_csv(path)
    assert list(frame["memory.used"]) == [616.0, 700.0]
    assert all(math.isnan(v) for v in frame["utilization.gpu"])


def test_snapshot_and_compute_apps_without_header():
    gpus = telemetry.parse_snapshot("0, GPU-a, NVIDIA H200, 143771, 0\n1, GPU-b, NVIDIA H200, 143771, 124188\n")
    assert [(g.index, g.mem_used_mib) for g in gpus] == [(0, 0), (1, 124188)]
    apps = telemetry.parse_apps("GPU-b, 1570, python3, 124188\n")
    assert apps == [{"gpu_uuid": "GPU-b", "pid": 1570, "process_name": "python3", "used_mib": 124188.0}]


def test_the_sampler_command_is_the_documented_one():
    assert commands.gpu_sampler(100) == [
        "nvidia-smi", "--query-gpu=timestamp,index,uuid,memory.total,memory.used,memory.free,utilization.gpu",
        "--format=csv,nounits", "-lms", "100"]


def test_csv_without_a_header_uses_the_requested_fields(tmp_path):
    src = (DATA / "nvsmi-samples/systeminformation-pr367-noheader-nounits.txt").read_text().splitlines()
    path = tmp_path / "noheader.csv"
    path.write_text("\n".join(src[1:3]) + "\n")
    fields = src[0].split("--query-gpu=")[1].split(" ")[0].split(",")
    frame = telemetry.read_query_csv(path, fields)
    assert list(frame["memory.total"]) == [8119, 981]
    assert list(frame["memory.used"]) == [4856, 871]
    assert math.isnan(frame["temperature.memory"][0]) and math.isnan(frame["fan.speed"][1])  # `N/A` and `[N/A]`


def test_the_measured_loop_file_without_header_or_units(tmp_path):
    frame = telemetry.read_query_csv(DATA / "nvsmi-samples/measured-h200-580-lms10-noheader-nounits-head.csv",
                                     ["timestamp", "memory.used"])
    assert len(frame) == 10 and frame["timestamp"].is_monotonic_increasing
    assert frame["timestamp"].diff().dt.total_seconds().dropna().median() < 0.05


def test_the_fast_sampler_is_chosen_in_params_and_prints_the_same_csv(tmp_path):
    from launchlab import nvml_sampler, params

    exp = params.loads((DATA.parents[1] / "params/demo.yaml").read_text().replace(
        "repetitions: 4", "repetitions: 4\nsampler: {kind: nvml, interval_ms: 5}"))
    assert commands.gpu_sampler(exp.sampler.interval_ms, [1], exp.sampler.kind) == [
        "python3", "-m", "launchlab.nvml_sampler", "--interval-ms", "5", "-i", "1"]
    header = nvml_sampler.HEADER.split(", ")
    assert [telemetry._HEADER_UNIT.sub("", h) for h in header] == list(telemetry.SAMPLER_FIELDS)


def test_a_collected_trace_is_kept_compressed_and_reads_as_the_plain_one(tmp_path):
    import gzip
    import shutil

    import pandas as pd

    from launchlab.store import rundir

    folder = rundir.RunFolder(tmp_path / "run")
    folder.path.mkdir()
    plain = DATA / "h200-transformers-serve/trace-cb90.csv"
    shutil.copy(plain, folder.live_samples())
    assert folder.samples() == folder.live_samples()  # a run still going, or a run directory of an earlier kit
    before = telemetry.read_query_csv(folder.samples())
    folder.keep_samples()
    kept = folder.kept_samples()
    assert folder.samples() == kept and kept.name == "nvidia-smi.csv.gz" and not folder.live_samples().exists()
    assert gzip.decompress(kept.read_bytes()) == plain.read_bytes()  # the sampler's bytes, zcat gives them back
    assert kept.stat().st_size * 5 < plain.stat().st_size
    pd.testing.assert_frame_equal(telemetry.read_query_csv(kept), before)
    assert telemetry.peak_memory_mib(kept) == before["memory.used"].max()
    shutil.copy(plain, folder.live_samples())
    first = kept.read_bytes()
    folder.keep_samples()
    assert kept.read_bytes() == first  # no name or time in the header: the same trace, the same bytes


def test_a_trace_larger_once_decompressed_than_the_limit_is_not_read(tmp_path):
    import gzip

    import pytest

    path = tmp_path / "nvidia-smi.csv.gz"
    path.write_bytes(gzip.compress(b"index, memory.used\n" + b"0, 1\n" * 200_000))  # 1 MB from a few kB
    assert path.stat().st_size < 10_000
    with pytest.raises(OSError, match="larger than the limit of .* once decompressed"):
        telemetry.read_query_csv(path, limit=100_000)
    assert len(telemetry.read_query_csv(path)) == 200_000
