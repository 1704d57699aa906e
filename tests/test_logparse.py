from conftest import DATA
from launchlab import logparse
from launchlab.logparse import sglang

LOGS = DATA / "real-logs"


def lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def test_ranks_come_from_the_tp_tag_and_untagged_lines_are_rank_0():
    parsed = sglang.parse(lines(
        "[2025-10-16 10:00:00 TP3] Load weight begin. avail mem=137.29 GB\n"
        "[2025-10-16 10:00:00 DP1 TP1] Load weight begin. avail mem=137.30 GB\n"
        "[2025-10-16 10:00:00] Load weight begin. avail mem=20.00 GB\n"))
    assert parsed.ranks == {"3": {"weights_begin_avail_gib": 137.29}, "1": {"weights_begin_avail_gib": 137.30},
                            "0": {"weights_begin_avail_gib": 20.0}}


def test_a_foreign_prefix_ansi_and_a_progress_bar_do_not_hide_a_line():
    parsed = sglang.parse(lines(
        "sglang-1  | \x1b[32m[2025-10-16 10:00:00 TP0] Memory pool end. avail mem=40.03 GB\x1b[0m\n"
        "Capturing batches (bs=1 avail_mem=38.07 GB): 100%|███| 52/52\r[2025-10-16 10:00:05 TP0] Capture cuda graph end."
        " Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB.\n"))
    assert parsed.ranks["0"] == {"pool_end_avail_gib": 40.03, "graph_s": 5.37, "graph_mem_gib": 1.44,
                                 "graph_end_avail_gib": 38.05}
    assert parsed.phase_reached == "cuda_graph"


def test_a_log_cut_off_mid_startup_has_no_failure():
    parsed = logparse.parse_file(LOGS / "sglang-pr11716-tp8-init-dist-load-begin.log")
    assert parsed.ready is False and parsed.failure is None
    assert parsed.phase_reached == "weights"
    assert parsed.ranks["1"]["dist_init_mem_gib"] == 2.01
    assert parsed.ranks["0"]["weights_begin_avail_gib"] == 137.34


def test_a_traceback_gives_the_failure_and_its_phase():
    parsed = logparse.parse_file(LOGS / "sglang-issue7227-tp1-capture-begin-exception.log")
    assert parsed.failure is not None
    assert parsed.failure.phase == "cuda_graph"


def test_debug_instrumentation_lines_become_records():
    parsed = sglang.parse(lines(
        "[2025-10-16 10:00:00 TP0] DEBUG profile_max_num_token: avail=21.697 GiB, total=93.999 GiB, "
        "fraction=0.55, reserved=42.300 GiB, rest=-20.603 GiB\n"))
    assert parsed.debug[0] == {"name": "profile_max_num_token", "key": "avail", "value": 21.697, "unit": "GiB"}
    assert {d["key"]: d["value"] for d in parsed.debug}["rest"] == -20.603
    assert parsed.debug[2]["unit"] is None


def test_the_ready_line_makes_a_log_ready():
    parsed = sglang.parse(lines("[2025-10-16 10:00:00] The server is fired up and ready to roll!\n"))
    assert parsed.ready and parsed.phase_reached == "ready"


def test_detect_tells_sglang_from_other_logs(tmp_path):
    other = tmp_path / "x.log"
    other.write_text("hello\nworld\n")
    assert logparse.detect(other) == "generic"
    assert logparse.detect(LOGS / "sglang-pr11830-tp1-kv-alloc-capture-end.log") == "sglang"
