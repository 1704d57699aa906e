"""The ssh transport against a real OpenSSH server on 127.0.0.1."""

import json
import subprocess
import sys

import pytest

from conftest import LAUNCHLAB, connect, write_params
from launchlab import params
from launchlab.errors import HostError
from launchlab.run import lifecycle, recovery
from launchlab.runner import runview
from launchlab.runner.plan import make_plan
from launchlab.store import rundir

pytestmark = pytest.mark.ssh


def ssh_params(tmp_path, server, body_server: str, address: str | None = None, extra: str = "") -> params.Experiment:
    host = (f"{{transport: ssh, address: {address}, workdir: {tmp_path / 'remote'}{extra}}}" if address else
            f"{{transport: ssh, address: 127.0.0.1, port: {server.port}, identity_file: {server.client_key}, "
            f"workdir: {tmp_path / 'remote'}{extra}}}")
    path = write_params(tmp_path, f"experiment: over-ssh\nhosts:\n  gpu: {host}\n{body_server}")
    return path


# An absolute interpreter path, as on a real host: sshd runs the login shell non-interactively, and its rc
# files (here pyenv's) decide what a bare `python3` means.
SIM_SERVER = f"""\
server:
  kind: sglang
  command: [{sys.executable}, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  mem_fraction:
    "0.55": {{flags: {{--mem-fraction-static: "0.55"}}}}
    "0.85": {{flags: {{--mem-fraction-static: "0.85"}}}}
baseline: {{mem_fraction: "0.85"}}
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""

HTTP_SERVER = """\
server:
  kind: generic
  command: [python3, -m, http.server, "{port}", --bind, 127.0.0.1]
  ready: {timeout_s: 30, health_url: "http://127.0.0.1:{port}/"}
  stop_grace_s: 5
"""


def test_commands_run_over_ssh_and_the_ssh_config_alias_is_honoured(tmp_path, sshd):
    exp = params.load(ssh_params(tmp_path, sshd, HTTP_SERVER, address=sshd.host_alias))
    host = connect(exp)
    assert host.run("echo $LAUNCHLAB_SIM_STATE").stdout.strip().endswith("sshbox")
    assert "2 runs" not in host.run("nvidia-smi -L").stdout and host.run("nvidia-smi -L").stdout.count("GPU ") == 2
    host.close()


def test_an_unknown_host_key_is_refused_with_how_to_trust_it(tmp_path, sshd, monkeypatch):
    other = tmp_path / "empty_known_hosts"
    other.write_text("")
    monkeypatch.setenv("LAUNCHLAB_KNOWN_HOSTS", str(other))
    exp = params.load(ssh_params(tmp_path, sshd, HTTP_SERVER))
    with pytest.raises(HostError, match="unknown") as info:
        connect(exp).run("true")
    assert "ssh-keyscan" in str(info.value) or "known_hosts" in str(info.value)


def test_a_changed_host_key_is_refused(tmp_path, sshd, monkeypatch):
    forged = tmp_path / "forged_known_hosts"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    forged.write_text(f"[127.0.0.1]:{sshd.port} {' '.join((tmp_path / 'other.pub').read_text().split()[:2])}\n")
    monkeypatch.setenv("LAUNCHLAB_KNOWN_HOSTS", str(forged))
    exp = params.load(ssh_params(tmp_path, sshd, HTTP_SERVER))
    with pytest.raises(HostError, match="CHANGED"):
        connect(exp).run("true")


def test_a_generic_server_runs_over_ssh_and_nothing_is_left_behind(tmp_path, sshd):
    path = ssh_params(tmp_path, sshd, HTTP_SERVER)
    exp = params.load(path)
    run = make_plan(exp)[0]
    host = connect(exp)
    result = lifecycle.run_one(exp, run, runview.ensure_run_dir(path), host)
    assert result.status == "ready", result
    assert result.stopped_with == "TERM"
    assert recovery.leftovers(host) == []
    host.close()


def test_the_demo_design_runs_over_ssh_end_to_end(tmp_path, sshd):
    path = ssh_params(tmp_path, sshd, SIM_SERVER)
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = rundir.RunDir.check(__import__("pathlib").Path(proc.stdout.strip())).path
    statuses = {f.name: json.loads((f / "status.json").read_text()) for f in (run_dir / "runs").iterdir()}
    by_level = {s["levels"]["mem_fraction"]: s for s in statuses.values()}
    assert by_level["0.55"]["status"] == "failed" and by_level["0.55"]["failure_reason"] == "kv_cache_no_memory"
    assert by_level["0.85"]["status"] == "ready"
    for folder in (run_dir / "runs").iterdir():
        assert (folder / "server.log").stat().st_size > 0 and (folder / "nvidia-smi.csv.gz").stat().st_size > 0
        provenance = json.loads((folder / "provenance.json").read_text())
        assert provenance["transport"] == "ssh"
    assert (run_dir / "report.md").is_file()
    assert not list((tmp_path / "remote").rglob("server.log")), "run folders on the host are removed after collection"


def test_provenance_over_ssh_names_the_host_gpus_driver_topology_and_packages(tmp_path, sshd):
    from launchlab.hosts import provenance

    exp = params.load(ssh_params(tmp_path, sshd, SIM_SERVER))
    host = connect(exp)
    facts = provenance.host_facts(host)
    assert facts["hostname"] and facts["kernel"]
    assert (facts["driver"], facts["cuda"]) == ("580.159.04", "13.0")
    assert [g["index"] for g in facts["gpus"]] == [0, 1] and all(g["uuid"].startswith("GPU-") for g in facts["gpus"])
    assert facts["topology"] and facts["nvlink_pairs"] == 0  # the simulated box is PCIe-only
    interp = provenance.interpreter_facts(host, [sys.executable, "-m", "launchlab.sim.sglang_server"])
    assert interp["executable"] == sys.executable
    assert "pydantic" in interp["packages"] and interp["python"].startswith("3.")
    assert provenance.interpreter_facts(host, ["bash", "-c", "true"]) is None
    host.close()
