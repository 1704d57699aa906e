"""Issue 65: `launchlab diagnose` of multi-GPU logs — the parallel sizes from everything the log shows, a draft whose
host has the GPUs the launch used, custom all-reduce varied with levels that act on that box — and a file that is no
log refused.

The logs are real excerpts users posted (tests/fixtures/real-logs-multigpu, -tp2; SOURCES.md names each thread); the
sizes each shows are its INDEX.md entry's `parallel` oracle, written from the text before the parser read it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import DATA, LAUNCHLAB, ROOT
from launchlab import params
from launchlab.runner import diagnose, draft
from test_real_logs import FOLDER, ORACLES

# (an excerpt whose kind the test names, `server_named`, has no line diagnose could tell a server's from)
MULTI = sorted(name for name, oracle in ORACLES.items() if "parallel" in oracle and not oracle.get("server_named"))
SGLANG_PCIE = DATA / "real-logs-multigpu" / "sglang-issue29562-tp8-custom-ar-v2-pcie-disabled-per-rank.log"
VLLM_PCIE = DATA / "real-logs-multigpu" / "vllm-issue15340-v0-workerprocess-pcie-custom-ar-disabled.log"
VLLM_CUH = DATA / "real-logs-tp2" / "vllm-issue42609-tp2-dp1-custom-allreduce-cuh-455-worker1-died.log"
SGLANG_CUH = DATA / "real-logs-multigpu" / "sglang-issue1509-0.3-tp2-custom-ar-cuh307-peer-access-failed.log"
SPANS_NODES = DATA / "real-logs-multigpu" / "vllm-issue12256-ray-nranks32-custom-ar-spans-nodes-wrapped.log"


# SGLang's DP attention shares the TP group's GPUs among the DP ranks (`DP7 TP7`: DP rank 7 holds TP rank 7): 8 GPUs
GPUS = {"sglang-issue6017-dp8-tp8-load-weight-end-kv-pool.log": 8,
        "sglang-issue7691-dp8-tp8-negative-profiled-kv-tokens.log": 8}
ACROSS_NODES = {SPANS_NODES.name, "sglang-issue4598-tp8-spans-nodes-dist-init-ends-load-weight-begin.log"}


def _draft(log: Path, tmp_path: Path, host: str | None = "gpu-box") -> tuple[diagnose.Diagnosis, params.Experiment, str]:
    found = diagnose.diagnose([log])
    out = tmp_path / "params" / "draft.yaml"
    draft.write(draft.make(found, draft.Options(host=host)), out, force=True)
    return found, params.load(out), out.read_text()


def test_the_excerpts_span_tensor_parallel_2_to_16_both_kinds_with_and_without_the_argument_dump():
    shown = {name: ORACLES[name]["parallel"] for name in MULTI}
    assert {o["tp"] for o in shown.values()} >= {2, 4, 8, 16, 32}
    assert {ORACLES[name]["server"] for name in MULTI} >= {"sglang", "vllm"}
    assert {o["tp_at_least"] for o in shown.values()} == {True, False}, "rank tags alone, and a stated size"


@pytest.mark.parametrize("name", MULTI)
def test_diagnose_reads_the_sizes_the_log_shows_and_the_draft_host_has_those_gpus(name, tmp_path):
    want = ORACLES[name]["parallel"]
    found, exp, text = _draft(FOLDER[name] / name, tmp_path)
    assert (found.tp, found.parallel["tp_at_least"]) == (want["tp"], want["tp_at_least"])
    line = diagnose.text(found).splitlines()[0]
    assert f"tensor parallel {want['tp']} (" in line
    if want["tp_at_least"]:
        assert f"at least {want['tp']}: rank" in line, line  # a lower bound, said as one
    host = exp.hosts["gpu"]
    if name in ACROSS_NODES:  # the log says the group spans nodes, not how many: left to the host's nvidia-smi
        assert host.gpus is None and "`gpus:` is left out" in text
    else:
        gpus = GPUS.get(name, want["tp"] * want["pp"] * want["dp"]) // found.parallel.get("nodes", 1)
        assert host.gpus == gpus, text
    assert "tensor parallel 1" not in text


def test_the_seed_box_eight_pcie_ranks_with_custom_all_reduce_off_by_the_server_drafts_it_forced_on(tmp_path):
    """The seed's situation: 8 × RTX PRO 6000 on PCIe, SGLang saying custom all-reduce is 'not supported on more than
    two PCIe-only GPUs' per rank. The draft varies it, with an "on" that forces it where a build can."""
    found, exp, text = _draft(SGLANG_PCIE, tmp_path)
    assert found.tp == 8 and exp.hosts["gpu"].gpus == 8
    custom_ar = exp.factors["custom_ar"]
    assert custom_ar["off"].flags == {"--disable-custom-all-reduce": True}
    assert custom_ar["on"].env["SGLANG_FORCE_CUSTOM_AR_PCIE"] == "1" and custom_ar["on"].flags == {}
    assert exp.baseline["custom_ar"] == "off", "the level the log's launch ran at"
    assert "no upstream SGLang release" in text, "the file says which builds the forcing reaches"
    assert "cannot take effect at tensor parallel" not in text
    said = diagnose.text(found)
    assert "off by the server: custom all-reduce (switched off by the server on ranks 0, 1, 4, 5, 6, 7" in said


def test_vllm_on_more_than_two_pcie_gpus_forces_with_the_fork_variable_and_says_upstream_cannot(tmp_path):
    found, exp, text = _draft(VLLM_PCIE, tmp_path)
    assert exp.factors["custom_ar"]["on"].env == {"VLLM_ENABLE_PCIE_ALLREDUCE": "1"}
    assert "upstream vLLM has no way to force it" in text and exp.hosts["gpu"].gpus == 8


@pytest.mark.parametrize("log", [VLLM_CUH, SGLANG_CUH], ids=lambda p: p.name.split("-")[0] + "-" + p.name.split("-")[1])
def test_a_failure_in_custom_all_reduce_own_code_makes_it_the_factor(log, tmp_path):
    """The tp2 crash of issue 65's report drafted `factors: {}`: now the failure names its suspect and the draft
    varies it, the log's level (on) the baseline."""
    found, exp, text = _draft(log, tmp_path)
    assert found.failure.reason == "custom_allreduce_failed" and found.tp == 2
    assert set(exp.factors["custom_ar"]) == {"on", "off"}
    assert exp.factors["custom_ar"]["off"].flags == {"--disable-custom-all-reduce": True}
    assert exp.baseline["custom_ar"] == "on"
    assert "custom all-reduce, failed in the log" in text and exp.hosts["gpu"].gpus == 2


def test_custom_all_reduce_the_server_cannot_run_across_nodes_is_left_out_and_said_why(tmp_path):
    found, exp, text = _draft(SPANS_NODES, tmp_path)
    assert "custom_ar" not in exp.factors
    assert "left out: custom all-reduce is switched off by the server on this box by itself (spans_nodes)" in text


def test_parse_json_states_the_same_sizes(tmp_path):
    res = subprocess.run([*LAUNCHLAB, "parse", "--json", str(SGLANG_PCIE)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    shown = json.loads(res.stdout)["parallel"]
    assert shown == {"tp": 8, "tp_at_least": True, "pp": 1, "dp": 1, "gpus": 8, "said": "at least 8: ranks 0–7 in the log"}


@pytest.mark.parametrize("name", ["README.md", "params/demo.yaml", "pyproject.toml"])
def test_diagnose_of_a_file_that_is_no_log_refuses_and_writes_nothing(name, tmp_path):
    proc = subprocess.run([*LAUNCHLAB, "diagnose", str(ROOT / name)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert "nothing in it is a line a server writes" in proc.stderr and name.split("/")[-1] in proc.stderr
    assert not list(tmp_path.rglob("*.yaml")), "no draft of a README"


def test_the_drafts_placeholders_and_inits_model_are_refused_by_validate_and_run_naming_the_line(tmp_path):
    _, _, text = _draft(SGLANG_PCIE, tmp_path, host=None)  # no dump: the command is TODO; no --host: TODO host
    out = tmp_path / "params" / "draft.yaml"
    lines = text.splitlines()
    todo = [n for n, line in enumerate(lines, start=1) if "TODO-the-server-command" in line or "# TODO" in line]
    assert len(todo) == 2
    for command in (["validate"], ["run", "--dry-run"], ["run"]):
        refused = subprocess.run([*LAUNCHLAB, *command, str(out)], capture_output=True, text=True, cwd=tmp_path,
                                 timeout=120)
        assert refused.returncode == 2, refused.stdout
        for n in todo:
            assert f"line {n}: `" in refused.stderr, refused.stderr
    assert not (tmp_path / "outputs").exists(), "nothing launched, no run directory"
    mine = tmp_path / "my-server.yaml"
    mine.write_text((ROOT / "params/my-server.yaml").read_text())
    refused = subprocess.run([*LAUNCHLAB, "validate", str(mine)], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "line 16: `/models/your-model` is a placeholder" in refused.stderr
