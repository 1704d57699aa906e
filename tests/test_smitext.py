import math

from conftest import DATA
from launchlab.gpu import smitext

SAMPLES = DATA / "nvsmi-samples"


def test_the_current_table_gives_gpus_versions_and_processes():
    table = smitext.parse_table((SAMPLES / "measured-h200-580-default-table-one-process.txt").read_text())
    assert (table["driver"], table["cuda"]) == ("580.159.04", "13.0")
    assert [(g["index"], g["mem_used_mib"], g["mem_total_mib"]) for g in table["gpus"]] == [(0, 783, 143771), (1, 4, 143771)]
    assert table["processes"] == [{"gpu_index": 0, "pid": 933, "type": "C", "process_name": "python3", "used_mib": 774.0}]


def test_a_cut_memory_value_is_missing_not_guessed():
    table = smitext.parse_table((DATA / "h200-transformers-serve/smi-during-cb90.txt").read_text())
    [process] = table["processes"]
    assert process["pid"] == 1570 and math.isnan(process["used_mib"])
    assert table["gpus"][0]["mem_used_mib"] == 124197


def test_processes_on_several_gpus_and_cut_names():
    table = smitext.parse_table((SAMPLES / "nvitop-152-processes-section.txt").read_text())
    assert [(p["gpu_index"], p["pid"], p["type"], p["used_mib"]) for p in table["processes"]] == [
        (0, 10734, "C", 160), (0, 58661, "G", 3), (1, 10734, "C", 160), (2, 18243, "G", 64), (2, 22720, "G", 34)]


def test_legacy_tables_with_4_digit_bus_ids_and_mb_units():
    old = smitext.parse_table((SAMPLES / "pytorch-910-old-4digit-busid-partial.txt").read_text())
    assert [(g["index"], g["mem_used_mib"], g["mem_total_mib"], g["bus_id"]) for g in old["gpus"]] == [
        (0, 11409, 12207, "0000:03:00.0"), (1, 698, 12204, "0000:06:00.0")]
    legacy = smitext.parse_table((SAMPLES / "cbio-cluster-24-legacy-325-MB-units-partial.txt").read_text())
    assert legacy["driver"] == "325.15"
    assert legacy["gpus"][0]["mem_total_mib"] == round(4095 * 1e6 / 2**20, 1)
    assert math.isnan(legacy["gpus"][0]["util_gpu_pct"])


def test_kmd_version_header():
    table = smitext.parse_table((SAMPLES / "club-3090-1322-kmd-version-header-partial.txt").read_text())
    assert table["driver"] == "610.57.04"
    assert [(g["mem_used_mib"], g["mem_total_mib"]) for g in table["gpus"]][:2] == [(29340, 32607), (30612, 32607)]


def test_topology_tells_nvlink_from_pcie():
    nv = smitext.parse_topo((SAMPLES / "measured-h200x2-580-topo-m-nv18-raw-ansi.txt").read_text())
    assert nv == [{"gpu_a": 0, "gpu_b": 1, "link": "NV18", "nvlink": True},
                  {"gpu_a": 1, "gpu_b": 0, "link": "NV18", "nvlink": True}]
    pcie = smitext.parse_topo((SAMPLES / "go-gpuallocator-17-topo-8x4090-all-sys.txt").read_text())
    assert len(pcie) == 8 * 7 and {p["link"] for p in pcie} == {"SYS"} and not any(p["nvlink"] for p in pcie)
