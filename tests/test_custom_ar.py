"""Custom all-reduce per rank, from the statement texts of reference/log-formats.md sections 2.5 and 3.4."""

import json
import subprocess

from conftest import DATA, LAUNCHLAB
from launchlab.logparse import sglang, vllm
from launchlab.logparse.parsedlog import CustomAR

PCIE = ("is disabled because it's not supported on more than two PCIe-only GPUs. To silence this warning, "
        "specify disable_custom_all_reduce=True explicitly.")
NO_P2P = ("Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed. "
          "To silence this warning, specify disable_custom_all_reduce=True explicitly.")


def lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def states(parsed) -> dict[str, tuple[str, str | None]]:
    return {rank: (c.state, c.reason) for rank, c in parsed.custom_ar.items()}


def test_sglang_pcie_warning_disables_custom_ar_on_the_rank_that_printed_it():
    parsed = sglang.parse(lines(
        f"[2025-12-28 10:40:01 TP0] Custom allreduce {PCIE}\n"
        f"[2025-12-28 10:40:01 TP3] Custom allreduce {PCIE}\n"))
    assert states(parsed) == {"0": ("disabled", "pcie_more_than_two_gpus"), "3": ("disabled", "pcie_more_than_two_gpus")}
    assert parsed.custom_ar["3"].message == f"Custom allreduce {PCIE}"


def test_sglang_0_5_10_class_names_disable_every_rank_once():
    text = "".join(f"[2026-06-28 10:00:00 TP{r}] {cls} {PCIE}\n" for r in range(8)
                   for cls in ("CustomAllReduceV2", "CustomAllreduce"))
    parsed = sglang.parse(lines(text))
    assert states(parsed) == {str(r): ("disabled", "pcie_more_than_two_gpus") for r in range(8)}
    assert parsed.custom_ar["5"].message.startswith("CustomAllReduceV2 is disabled")  # the first statement is kept


def test_sglang_setup_failure_with_a_peer_access_error_is_a_failed_no_p2p():
    parsed = sglang.parse(lines(
        "sglang-1  | [2025-11-01 16:50:36 TP1] Setup Custom allreduce failed with CUDART error: peer access is not "
        "supported between these two devices. To silence this warning, specify --disable-custom-all-reduce explicitly.\n"))
    assert states(parsed) == {"1": ("failed", "no_p2p")}
    assert parsed.failure is None  # SGLang falls back to NCCL: the launch goes on


def test_sglang_setup_failure_for_another_reason_is_an_init_failure():
    parsed = sglang.parse(lines(
        "[2025-11-01 16:50:36 TP0] Setup Custom allreduce failed with RuntimeError: invalid device ordinal. "
        "To silence this warning, specify --disable-custom-all-reduce explicitly.\n"))
    assert states(parsed) == {"0": ("failed", "init_failed")}


def test_a_cudart_peer_access_error_on_its_own_line_is_a_failed_no_p2p():
    parsed = sglang.parse(lines(
        "[2025-11-01 16:50:36 TP1] CUDART error: peer access is not supported between these two devices\n"))
    assert states(parsed) == {"1": ("failed", "no_p2p")}


def test_every_disable_reason_of_the_reference_has_its_code():
    parsed = vllm.parse(lines(
        "(Worker_TP0 pid=11) WARNING 11-06 10:51:36 [custom_all_reduce.py:84] Custom allreduce is disabled because "
        "this process group spans across nodes.\n"
        "(Worker_TP1 pid=12) WARNING 11-06 10:51:36 [custom_all_reduce.py:91] Custom allreduce is disabled due to an "
        "unsupported world size: 3. Supported world sizes: [2, 4, 6, 8]. To silence this warning, specify "
        "disable_custom_all_reduce=True explicitly.\n"
        f"(Worker_TP2 pid=13) WARNING 11-06 10:51:36 [custom_all_reduce.py:119] {NO_P2P}\n"
        "(Worker_TP3 pid=14) INFO 11-06 10:51:36 [custom_all_reduce.py:60] Custom allreduce is disabled because "
        "of missing custom allreduce library\n"
        f"(Worker_TP4 pid=15) WARNING 11-06 10:51:36 [custom_all_reduce.py:109] Custom allreduce {PCIE}\n"
        "(Worker_TP5 pid=16) WARNING 11-06 10:51:36 [custom_all_reduce.py:99] Custom allreduce is disabled because "
        "the moon is full.\n"))
    assert states(parsed) == {"0": ("disabled", "spans_nodes"), "1": ("disabled", "unsupported_world_size"),
                              "2": ("disabled", "no_p2p"), "3": ("disabled", "missing_library"),
                              "4": ("disabled", "pcie_more_than_two_gpus"), "5": ("disabled", None)}


def test_vllm_rank_tags_of_every_generation_name_the_rank():
    parsed = vllm.parse(lines(
        f"(VllmWorkerProcess pid=8913) WARNING 07-18 00:04:59 custom_all_reduce.py:128] {NO_P2P}\n"
        f"WARNING 07-18 00:04:59 custom_all_reduce.py:128] {NO_P2P}\n"  # the V0 driver: rank 0, untagged
        f"(VllmWorker rank=2 pid=31) WARNING 04-30 10:20:30 [custom_all_reduce.py:128] {NO_P2P}\n"
        f"(VllmWorker TP3 pid=32) WARNING 08-19 14:58:40 [custom_all_reduce.py:128] {NO_P2P}\n"
        f"(Worker_TP4_EP4 pid=33) WARNING 11-06 10:51:36 [custom_all_reduce.py:128] {NO_P2P}\n"))
    assert sorted(parsed.custom_ar) == ["0", "1", "2", "3", "4"]


def test_registering_graph_addresses_means_custom_ar_was_active():
    parsed = sglang.parse(lines(
        "[2025-12-28 10:40:12 TP0] Registering 4368 cuda graph addresses\n"
        "[2025-12-28 10:40:12 TP1] Registering 4368 cuda graph addresses\n"))
    assert states(parsed) == {"0": ("active", None), "1": ("active", None)}


def test_a_tp1_log_without_tags_is_rank_0():
    parsed = vllm.parse(lines(
        "INFO 04-30 10:20:30 [custom_all_reduce.py:203] Registering 210 cuda graph addresses\n"))
    assert states(parsed) == {"0": ("active", None)}
    assert parsed.phase_reached == "cuda_graph"


def test_a_kernel_error_after_registering_makes_the_rank_failed():
    parsed = vllm.parse(lines(
        "(Worker_TP0 pid=3682509) INFO 09-10 09:37:40 [custom_all_reduce.py:203] Registering 4200 cuda graph addresses\n"
        "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'invalid argument'\n"
        "(Worker_TP0 pid=3682509) INFO 09-10 09:37:40 [custom_all_reduce.py:203] Registering 4200 cuda graph addresses\n"))
    assert parsed.custom_ar["0"] == CustomAR("failed", "cuda_error",
                                             "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'invalid argument'")
    assert parsed.failure.reason == "custom_allreduce_failed"


def test_a_disable_warning_is_not_undone_by_a_later_registering_line():
    parsed = sglang.parse(lines(
        f"[2025-12-28 10:40:01 TP0] Custom allreduce {PCIE}\n"
        "[2025-12-28 10:40:12 TP0] Registering 4368 cuda graph addresses\n"))
    assert states(parsed) == {"0": ("disabled", "pcie_more_than_two_gpus")}


def test_sglang_server_args_flag_disables_every_rank_that_said_nothing_more_specific():
    parsed = sglang.parse(lines(
        "[2025-12-28 10:39:50] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=4, "
        "disable_custom_all_reduce=True, cuda_graph_bs=[1, 2, 4])\n"
        f"[2025-12-28 10:40:01 TP2] Custom allreduce {PCIE}\n"))
    assert states(parsed) == {"0": ("disabled", "disabled_by_user"), "1": ("disabled", "disabled_by_user"),
                              "2": ("disabled", "pcie_more_than_two_gpus"), "3": ("disabled", "disabled_by_user")}
    assert parsed.custom_ar["0"].message == "disable_custom_all_reduce=True (server_args)"
    assert list(parsed.to_json()["custom_ar"]) == ["0", "1", "2", "3"]


def test_sglang_server_args_with_the_flag_off_states_nothing():
    parsed = sglang.parse(lines(
        "[2025-12-28 10:39:50] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=4, "
        "disable_custom_all_reduce=False)\n"))
    assert parsed.custom_ar == {}


def test_a_rank_that_registered_addresses_despite_the_flag_keeps_its_observed_state():
    """The flag says what was asked; `Registering …` says what happened — a level check must see the contradiction."""
    parsed = sglang.parse(lines(
        "[2025-12-28 10:39:50] server_args=ServerArgs(tp_size=2, disable_custom_all_reduce=True)\n"
        "[2025-12-28 10:40:12 TP1] Registering 4368 cuda graph addresses\n"))
    assert states(parsed) == {"0": ("disabled", "disabled_by_user"), "1": ("active", None)}


def test_vllm_non_default_args_flag_disables_every_tp_rank():
    parsed = vllm.parse(lines(
        "(APIServer pid=1) INFO 11-06 10:50:01 [utils.py:328] non-default args: {'model_tag': 'Qwen/Qwen3-8B', "
        "'model': 'Qwen/Qwen3-8B', 'tensor_parallel_size': 2, 'disable_custom_all_reduce': True}\n"))
    assert states(parsed) == {"0": ("disabled", "disabled_by_user"), "1": ("disabled", "disabled_by_user")}
    assert parsed.custom_ar["1"].message == "disable_custom_all_reduce=True (non-default args)"


def test_parse_json_of_the_peer_access_log_shows_both_ranks_failed():
    log = DATA / "real-logs/sglang-issue12496-docker-tp2-custom-ar-peer-access-failed.log"
    res = subprocess.run([*LAUNCHLAB, "parse", str(log), "--json"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    message = ("Setup Custom allreduce failed with CUDART error: peer access is not supported between these two "
               "devices. To silence this warning, specify --disable-custom-all-reduce explicitly.")
    assert data["custom_ar"] == {"0": {"state": "failed", "reason": "no_p2p", "message": message},
                                 "1": {"state": "failed", "reason": "no_p2p", "message": message}}
    assert data["nccl_version"] == "2.27.3"
    assert data["failure"] is None and data["phase_reached"] == "dist_init"


def test_a_kernel_error_inside_an_sglang_traceback_fails_the_rank_that_raised_it():
    parsed = sglang.parse(lines(
        "[2025-12-28 10:40:12 TP1] Registering 4368 cuda graph addresses\n"
        "[2025-12-28 10:40:13 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl/cuda_graph_runner.py", line 380, in capture\n'
        "RuntimeError: Capture cuda graph failed: Failed: Cuda error /sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:368 "
        "'invalid argument'\n"))
    assert states(parsed) == {"1": ("failed", "cuda_error")}
    # the kernel's error names the cause; the capture is where it met it (issue 27)
    assert (parsed.failure.reason, parsed.failure.phase) == ("custom_allreduce_failed", "cuda_graph")
