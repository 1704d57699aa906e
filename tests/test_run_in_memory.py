"""The run path's logic in-process, against MemoryHost (tests/memhost.py): every outcome of one run, what the run
folder keeps, and that nothing is left running on the host. The same path against real processes is
tests/test_lifecycle.py (the simulated box, a local host) and the ssh and Slurm tests."""

import dataclasses
import json

import pandas as pd
import pytest

from conftest import MULTI_NODE, SMALL_SIM, write_params
from launchlab import params
from launchlab.run import lifecycle
from launchlab.runner import runview
from launchlab.runner.plan import make_plan
from launchlab.store import rundir
from launchlab.verdicts import confounds
from memhost import MemoryHost, Program

STARTUP = [
    "server_args=ServerArgs(model_path='/models/m', tp_size=2, mem_fraction_static={fraction})",
    "[TP0] Init torch distributed begin.",
    "[TP0] Init torch distributed ends. mem usage=1.63 GB",
    "[TP0] Load weight begin. avail mem=93.999 GB",
    "[TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=21.697 GB, mem usage=72.30 GB.",
]
READY = ["[TP0] KV Cache is allocated. #tokens: 120000, K size: 6.00 GB, V size: 6.00 GB",
         "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
         "The server is fired up and ready to roll!"]
NO_MEMORY = ["[TP0] Scheduler hit an exception: Traceback (most recent call last):",
             "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
             "Received sigquit from a child process. It usually means the child failed."]


def sglang(argv: list[str], *, step_s: float = 0.02) -> Program:
    """A server that starts as SGLang does at the fraction its argv gives: ready at 0.85, out of KV-cache memory
    at 0.55 (the small experiment's two levels)."""
    fraction = argv[argv.index("--mem-fraction-static") + 1]
    lines = [line.format(fraction=fraction) for line in STARTUP]
    if fraction == "0.55":
        lines += NO_MEMORY
        return Program([(i * step_s, line) for i, line in enumerate(lines)], exit_s=len(lines) * step_s,
                       exit_code=1, mib={0: 74000, 1: 74000}, hold_s=3 * step_s)
    lines += READY
    return Program([(i * step_s, line) for i, line in enumerate(lines)], ready_s=len(lines) * step_s,
                   mib={0: 86000, 1: 86000}, hold_s=3 * step_s)


@pytest.fixture
def experiment(tmp_path, sim_root):
    """The small experiment (tests/conftest.py), its host to be a MemoryHost, its run directory."""

    def make(extra: str = "", timeout: float = 30):
        text = SMALL_SIM.format(pace=0.01, timeout=timeout, workdir=tmp_path / "hostwork")
        path = write_params(tmp_path, text.replace("  stop_grace_s: 5\n", "  stop_grace_s: 5\n" + extra))
        return params.load(path), runview.ensure_run_dir(path)

    return make


def run(exp, run_dir, host, index):
    plan = make_plan(exp)[index]
    record = lifecycle.run_one(exp, plan, run_dir, {"box": host})
    return record, rundir.RunDir(run_dir).run(plan.run_id).path


def assert_nothing_left(host: MemoryHost) -> None:
    assert all(p.ended is not None for p in host.processes), "a process still runs on the host"
    assert not [name for name in host.files if name.startswith(host.workdir + "/")], "the host's run folder stayed"


def test_a_ready_run_is_stopped_drained_and_collected(experiment):
    exp, run_dir = experiment()
    host = MemoryHost(server=sglang, gpus=2)
    record, folder = run(exp, run_dir, host, 1)
    assert (record.status, record.stopped_with, record.drained) == ("ready", "TERM", True)
    assert 0 < record.startup_s < 5 and record.peak_mem_used_mib == 86000
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "done" and status["status"] == "ready"
    assert (folder / "server.log").read_text().splitlines()[-1] == READY[-1]
    trace = pd.read_csv(folder / "nvidia-smi.csv.gz", skipinitialspace=True)
    assert trace["memory.used [MiB]"].max() == 86000 and set(trace["index"]) == {0, 1}
    assert {p["role"]: p["stopped_with"] for p in json.loads((folder / "processes.json").read_text())} == \
        {"server": "TERM", "sampler": "TERM"}
    provenance = json.loads((folder / "provenance.json").read_text())
    assert [g["mem_used_mib"] for g in provenance["preflight"]["gpus"]] == [0, 0]
    assert provenance["gpu_state"], "the kit's looks at the GPUs' processes were recorded"
    assert_nothing_left(host)


def test_a_server_out_of_memory_for_its_kv_cache_fails_in_that_phase_with_the_servers_words(experiment):
    exp, run_dir = experiment()
    host = MemoryHost(server=sglang, gpus=2)
    record, _ = run(exp, run_dir, host, 0)
    assert (record.status, record.failure_reason, record.failure_phase) == ("failed", "kv_cache_no_memory", "kv_cache")
    assert "Not enough memory" in record.failure_message and record.stopped_with == "gone"
    assert_nothing_left(host)


def test_a_server_not_ready_by_the_deadline_times_out_and_is_stopped(experiment):
    exp, run_dir = experiment(timeout=1.0)
    host = MemoryHost(server=Program([(0.0, STARTUP[1])], mib={0: 1000}), gpus=2)
    record, _ = run(exp, run_dir, host, 1)
    assert (record.status, record.failure_reason, record.stopped_with) == ("timeout", None, "TERM")
    assert "not ready after 1 s" in record.failure_message and record.failure_phase == "dist_init"
    assert_nothing_left(host)


def test_a_server_that_exits_without_a_known_error_is_failed_process_exited_and_its_log_kept(experiment):
    exp, run_dir = experiment()
    host = MemoryHost(server=Program([(0.0, "starting up")], exit_s=0.1, exit_code=3), gpus=2)
    record, folder = run(exp, run_dir, host, 1)
    assert (record.status, record.failure_reason) == ("failed", "process_exited")
    assert (folder / "server.log").read_text() == "starting up\n"


def test_a_server_that_ignores_term_is_killed(experiment):
    exp, run_dir = experiment()
    host = MemoryHost(server=lambda argv: dataclasses.replace(sglang(argv), ignores_term=True), gpus=2)
    record, _ = run(exp, run_dir, host, 1)
    assert (record.status, record.stopped_with) == ("ready", "KILL")
    assert_nothing_left(host)


SMOKE = '  smoke: {url: "http://127.0.0.1:{port}/v1/completions", body: {prompt: hi, max_tokens: 4}}\n'


@pytest.mark.parametrize(("answer", "status"), [((200, '{"text": "hi there"}'), "ready"),
                                                ((500, "KV cache could not be sized"), "degraded")])
def test_the_smoke_request_keeps_a_ready_run_ready_or_makes_it_degraded_with_the_servers_answer(experiment, answer,
                                                                                                status):
    exp, run_dir = experiment(SMOKE)

    def server(argv):
        program = sglang(argv)
        program.smoke = answer
        return program

    host = MemoryHost(server=server, gpus=2)
    record, _ = run(exp, run_dir, host, 1)
    assert (record.status, record.smoke_status) == (status, answer[0])
    assert answer[1] in record.smoke_response


def test_another_process_holding_gpu_memory_before_a_run_is_recorded_and_named_a_confound(experiment):
    exp, run_dir = experiment()
    host = MemoryHost(server=sglang, gpus=2)
    first, _ = run(exp, run_dir, host, 1)
    holder = host.foreign({0: 3000})
    second, _ = run(exp, run_dir, host, 0)
    facts = {r.run_id: json.loads(rundir.RunDir(run_dir).run(r.run_id).provenance.read_text())
             for r in (first, second)}
    assert facts[second.run_id]["preflight"]["compute_apps"][0]["pid"] == holder
    runs = pd.DataFrame([{"run_id": r.run_id, "variant": r.variant, "status": r.status} for r in (first, second)])
    gpu = [c for c in confounds.find(runs, facts, first.variant) if c["kind"] == "gpu state"]
    assert gpu and gpu[0]["runs"] == [second.run_id]
    assert f"pid {holder}" in gpu[0]["detail"] and "GPU 0 3000 MiB" in gpu[0]["detail"]


def two_nodes(tmp_path, *, worker_fails: bool):
    """The run of a two-node server whose node 0 serves once its worker is up; the worker stays up, or exits 3."""
    exp = params.load(write_params(tmp_path, MULTI_NODE.format(w=tmp_path, script="the node")))

    def node(argv):
        said = [(0.0, "node {} of {} master {}".format(*argv[3:6]))]
        if argv[3] == "0":
            return Program([*said, (0.1, "serving")], ready_s=0.1, mib={0: 2000})
        return Program(said, exit_s=0.05, exit_code=3) if worker_fails else Program(said, mib={0: 2000})

    hosts = {name: MemoryHost(name, server=node, workdir=f"/mem/{name}") for name in ("head", "worker")}
    run_dir = runview.ensure_run_dir(tmp_path / "exp.yaml")
    record = lifecycle.run_one(exp, make_plan(exp)[0], run_dir, hosts)
    return record, rundir.RunDir(run_dir).run(record.run_id).path, hosts


def test_a_multi_node_server_starts_on_every_node_and_is_ready_when_node_0_is(tmp_path, sim_root):
    record, folder, hosts = two_nodes(tmp_path, worker_fails=False)
    assert (record.status, record.nodes) == ("ready", ["head", "worker"])
    assert (folder / "server.log").read_text().startswith("node 0 of 2 master 127.0.0.1")
    assert (folder / "server.node1.log").read_text() == "node 1 of 2 master 127.0.0.1\n"
    assert (folder / "nvidia-smi.node1.csv.gz").is_file() and not (folder / "nvidia-smi.node1.csv").exists()
    processes = json.loads((folder / "processes.json").read_text())
    assert sorted((p["node"], p["host"], p["role"], p["stopped_with"]) for p in processes) == [
        (0, "head", "sampler", "TERM"), (0, "head", "server", "TERM"),
        (1, "worker", "sampler", "TERM"), (1, "worker", "server", "TERM")]
    assert [n["host"] for n in json.loads((folder / "provenance.json").read_text())["nodes"]] == ["head", "worker"]
    for host in hosts.values():
        assert_nothing_left(host)


def test_when_one_node_fails_every_node_is_stopped(tmp_path, sim_root):
    record, folder, hosts = two_nodes(tmp_path, worker_fails=True)
    assert record.status == "failed" and "node 1 (worker)" in record.failure_message
    stopped = {(p["node"], p["role"]): p["stopped_with"] for p in json.loads((folder / "processes.json").read_text())}
    assert stopped[(0, "server")] == "TERM" and stopped[(1, "server")] == "gone"
    for host in hosts.values():
        assert_nothing_left(host)
