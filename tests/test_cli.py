import json
import subprocess

import pytest

from conftest import DATA, LAUNCHLAB, ROOT, write_params


def cli(*args, **kw):
    return subprocess.run([*LAUNCHLAB, *args], capture_output=True, text=True, timeout=120, **kw)


@pytest.mark.slow
def test_validate_accepts_the_demo():
    res = cli("validate", str(ROOT / "params/demo.yaml"))
    assert res.returncode == 0
    assert "16 runs" in res.stdout and "simulated" in res.stdout


@pytest.mark.slow
def test_validate_prints_every_problem_and_exits_2(tmp_path):
    path = write_params(tmp_path, "experiment: x\nhosts: {box: {transport: sim, gpuz: 2}}\nserver: {kind: sglang}\n")
    res = cli("validate", str(path))
    assert res.returncode == 2
    assert str(path) in res.stderr
    assert "hosts.box.gpuz" in res.stderr and "server.command" in res.stderr
    assert "Traceback" not in res.stderr


def test_run_with_bad_params_launches_nothing_and_exits_nonzero(tmp_path, sim_root):
    path = write_params(tmp_path, "experiment: x\nhosts: {box: {transport: sim}}\nserver: {kind: sglang, command: []}\n")
    res = cli("run", str(path), "--out", str(tmp_path / "out"))
    assert res.returncode == 2
    assert not (tmp_path / "out").exists()


def test_parse_json_has_the_stable_keys():
    log = DATA / "real-logs/sglang-pr11830-tp1-kv-alloc-capture-end.log"
    res = cli("parse", str(log), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert list(data) == ["server", "ready", "phase_reached", "failure", "ranks", "custom_ar", "debug", "args",
                          "adjusted_args", "overrides", "not_finite", "parallel", "nccl_version", "phase_lines",
                          "draft_phase_lines", "spec", "reload"]
    assert data["server"] == "sglang"
    assert data["ranks"]["0"]["kv_tokens"] == 2243474
    assert data["ranks"]["0"]["graph_mem_gib"] == 1.44


def test_parse_without_json_prints_a_table():
    res = cli("parse", str(DATA / "real-logs/sglang-pr11830-tp1-kv-alloc-capture-end.log"))
    assert res.returncode == 0
    assert "phase reached: cuda_graph" in res.stdout and "kv_tokens" in res.stdout


def test_parse_says_on_which_line_the_failure_and_each_phase_are():
    """Issue 12: a user can jump into the log — `--json` gives the lines, the human output shows them."""
    log = DATA / "real-logs-more/vllm-issue53013-worker-dp1-tp1-ep3-estimated-graph-no-memory.log"
    data = json.loads(cli("parse", str(log), "--json").stdout)
    assert data["failure"]["line"] == 2 and data["phase_lines"] == {"kv_cache": 1}
    res = cli("parse", str(log))
    assert res.returncode == 0
    assert "failure: kv_cache_no_memory in kv_cache (line 2): ValueError: No available memory" in res.stdout
    assert "phases: kv_cache from line 1" in res.stdout


def test_parse_without_json_says_each_ranks_custom_all_reduce_state_and_the_nccl_version():
    """Issue 28: a log whose only news is that custom all-reduce could not start (no peer access) says so."""
    log = DATA / "real-logs/sglang-issue12496-docker-tp2-custom-ar-peer-access-failed.log"
    data = json.loads(cli("parse", str(log), "--json").stdout)
    res = cli("parse", str(log))
    assert res.returncode == 0
    for rank, state in data["custom_ar"].items():
        assert f"custom all-reduce, rank {rank}: {state['state']} ({state['reason']}): " in res.stdout
    assert "peer access is not supported" in res.stdout
    assert f"NCCL version: {data['nccl_version']}" in res.stdout


def test_parse_prints_the_ranks_of_two_stages_in_order_under_one_rank_column():
    log = DATA / "real-logs-more/sglang-pr10741-dp0-pp0-dp1-pp1-load-end-capture-begin.log"
    res = cli("parse", str(log))
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    table = [line for line in out[[line.split()[0] for line in out].index("rank"):] if line.strip()]
    assert [line.split()[0] for line in table] == ["rank", "pp0.0", "pp1.0"]
    assert len({len(line) for line in table}) == 1  # the columns line up: the rank column is as wide as its keys


def test_parse_of_a_missing_file_is_a_clear_error(tmp_path):
    res = cli("parse", str(tmp_path / "nope.log"))
    assert res.returncode == 1 and "no such log file" in res.stderr


@pytest.mark.slow
def test_the_real_seed_experiment_validates():
    res = cli("validate", str(ROOT / "params/sglang-custom-ar.yaml"))
    assert res.returncode == 0, res.stderr
    assert "8 runs on host 'box'" in res.stdout and "simulated" not in res.stdout


def test_help_cites_only_sections_that_the_architecture_page_has():
    import re

    res = cli("--help")
    assert res.returncode == 0
    cited = re.findall(r'section "([^"]+)"', " ".join(res.stdout.split()))
    assert cited, res.stdout
    headings = {line[3:].strip() for line in (ROOT / "docs/architecture.md").read_text().splitlines()
                if line.startswith("## ")}
    assert set(cited) <= headings, (cited, headings)
