"""What every host does whatever its transport: it closes, the batch closes every host it opened, and leftovers
of dead batches are stopped only when the user says so (the CLI asks on its terminal; the library never does)."""

import builtins
import os

import pytest

from conftest import write_params
from launchlab import cli, params
from launchlab.errors import HostError
from launchlab.hosts.sim import SimHost
from launchlab.runner import batch

# per worker: the local tests share this machine's process table, and another worker's leftover must not count
OLD_RUN = f"old-run-{os.getpid()}"


def leftover(host: SimHost, tmp_path) -> int:
    """A process group tagged as a run of a batch that is gone, on the host's simulated box."""
    work = tmp_path / "left"
    host.make_dir(str(work))
    host.write_text(str(work / "tag.env"), f"LAUNCHLAB_RUN_ID={OLD_RUN}\nLAUNCHLAB_BATCH=gone-batch\n")
    return host.start_detached("server", ["sleep", "60"], cwd=str(work), log_name="log", env_file="tag.env").pgid


def test_a_leftover_is_stopped_only_when_the_confirm_callback_says_yes(tmp_path, sim_root):
    host = SimHost("box", params.SimSpec(transport="sim", gpus=1), sim_root / "b")
    pgid = leftover(host, tmp_path)
    try:
        asked: list[str] = []
        with pytest.raises(HostError, match="--stop-leftovers"):
            batch._handle_leftovers(host, False, print, "this-batch", confirm=lambda q: asked.append(q) or False)
        assert len(asked) == 1 and OLD_RUN in asked[0] and asked[0].endswith("Stop them? [y/N] ")
        assert host.group_alive(pgid)
        said: list[str] = []
        batch._handle_leftovers(host, False, said.append, "this-batch", confirm=lambda q: True)
        assert not host.group_alive(pgid) and "stopped leftover process group" in said[0]
    finally:
        host.kill_group(pgid, 1)


def test_without_a_callback_the_library_refuses_and_never_reads_the_terminal(tmp_path, sim_root, monkeypatch):
    host = SimHost("box", params.SimSpec(transport="sim", gpus=1), sim_root / "b")
    pgid = leftover(host, tmp_path)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr(builtins, "input", lambda *a: pytest.fail("the library asked on the terminal"))
    try:
        with pytest.raises(HostError, match="Nothing was launched"):
            batch._handle_leftovers(host, False, print, "this-batch", confirm=None)
        batch._handle_leftovers(host, True, print, "this-batch", confirm=None)  # --stop-leftovers needs no question
        assert not host.group_alive(pgid)
    finally:
        host.kill_group(pgid, 1)


def test_the_cli_asks_only_on_a_terminal(monkeypatch):
    monkeypatch.setattr(builtins, "input", lambda question: "y")
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert cli._ask_on_terminal("Stop them? [y/N] ") is False  # a script or CI: no, and the batch refuses
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    assert cli._ask_on_terminal("Stop them? [y/N] ") is True
    monkeypatch.setattr(builtins, "input", lambda question: "")
    assert cli._ask_on_terminal("Stop them? [y/N] ") is False


def test_the_batch_closes_every_host_it_opened_also_when_it_refuses_to_launch(tmp_path, sim_root, monkeypatch):
    (tmp_path / "p.diff").write_text("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    path = write_params(tmp_path, """\
        experiment: closes
        host: [one, two]
        hosts:
          one: {transport: sim, gpus: 1}
          two: {transport: sim, gpus: 1}
        server:
          kind: generic
          command: [bash, -c, "sleep 1"]
          ready: {log_pattern: never}
        factors:
          patched:
            "no": {}
            "yes": {patches: [p.diff]}
        baseline: {patched: "no"}
        repetitions: 2
        """)
    closed: list[str] = []
    monkeypatch.setattr(SimHost, "close", lambda self: closed.append(self.name))
    with pytest.raises(HostError, match="patches need the server to be started as"):  # after connecting and locking
        batch.run_batch(path, out_root=tmp_path / "out")
    assert sorted(closed) == ["one", "two"]


# -- the registry -------------------------------------------------------------------------------------------

def test_every_registered_transport_names_its_spec_and_opens_a_host_that_closes():
    import importlib
    import typing

    from launchlab.hosts import TRANSPORTS, Host

    assert list(TRANSPORTS) == ["sim", "local", "ssh", "slurm"]
    for name, transport in TRANSPORTS.items():
        assert typing.get_args(transport.spec.model_fields["transport"].annotation) == (name,)
        module = importlib.import_module(transport.module)
        assert callable(module.open_host)
        hosts = [v for v in vars(module).values() if isinstance(v, type) and getattr(v, "transport", None) == name]
        assert hosts and all(callable(getattr(h, m)) for h in hosts for m in dir(Host) if not m.startswith("_")
                             and callable(getattr(Host, m)))


def test_connect_opens_the_transport_the_params_name_and_ssh_connects_only_when_used(tmp_path, sim_root):
    from conftest import connect
    from launchlab.hosts import local as local_mod
    from launchlab.hosts import sim as sim_mod
    from launchlab.hosts import ssh as ssh_mod

    exp = params.loads(f"""\
experiment: t
host: [a, b, c]
hosts:
  a: {{transport: sim, gpus: 1}}
  b: {{transport: local, workdir: {tmp_path / 'w'}}}
  c: {{transport: ssh, address: 203.0.113.1, port: 2222}}
server: {{kind: generic, command: [python3], ready: {{log_pattern: x}}}}
""")
    a, b, c = (connect(exp, n, sim_box=sim_root / "box") for n in ("a", "b", "c"))
    assert (type(a), type(b), type(c)) == (sim_mod.SimHost, local_mod.LocalHost, ssh_mod.SshHost)
    assert a.state_dir == sim_root / "box" / "a" and b.workdir == str(tmp_path / "w")
    assert c._conn is None  # nothing dialled yet: 203.0.113.1 is a documentation address
    for host in (a, b, c):
        host.close()


def test_params_take_the_transports_their_messages_and_master_addr_from_the_registry():
    from launchlab.errors import ParamsError

    body = "experiment: t\nhosts:\n  box: {{{host}}}\nserver: {{kind: generic, command: [x], ready: {{log_pattern: x}}}}\n"
    with pytest.raises(ParamsError) as unknown:
        params.loads(body.format(host="transport: telnet"))
    assert "unknown transport 'telnet'; use one of: sim, local, ssh, slurm" in str(unknown.value)
    with pytest.raises(ParamsError) as missing:
        params.loads(body.format(host="gpus: 1"))
    assert "needs `transport:` (sim, local, ssh or slurm)" in str(missing.value)
    nodes = ("experiment: t\nnodes: [n0, n1]\nhosts:\n  n0: {{{first}}}\n  n1: {{transport: sim}}\n"
             "server: {{kind: generic, command: [x], ready: {{log_pattern: x}}}}\n")
    assert params.master_addr(params.loads(nodes.format(first="transport: ssh, address: gpu-head"))) == "gpu-head"
    assert params.master_addr(params.loads(nodes.format(first="transport: sim"))) == "127.0.0.1"
    assert params.loads(nodes.format(first="transport: local")).simulated is True  # n1 is simulated
    assert params.loads(body.format(host="transport: local")).simulated is False


def test_validating_params_loads_no_transport_implementation():
    import subprocess
    import sys

    code = ("import sys, launchlab.params; "
            "print([m for m in ('fabric', 'paramiko', 'invoke', 'launchlab.hosts.ssh', 'launchlab.hosts.local') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_local_host_reads_whether_a_group_is_alive_from_proc_as_the_shells_check_answers(tmp_path):
    # read from /proc, not with bash, ps and awk (a dozen asks per run; bench/run_overhead.py): the same answers
    import signal
    import subprocess
    import time

    from launchlab.hosts.local import LocalHost
    from launchlab.hosts.shell import ShellHost

    host = LocalHost("here", workdir=str(tmp_path))
    running = subprocess.Popen(["sleep", "30"], start_new_session=True)
    zombie = subprocess.Popen(["true"], start_new_session=True)  # not waited for: a zombie in its own group
    try:
        deadline = time.monotonic() + 10
        while open(f"/proc/{zombie.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        for pgid, alive in ((running.pid, True), (zombie.pid, False), (2**22 + 1, False)):
            assert host.group_alive(pgid) is alive and ShellHost.group_alive(host, pgid) is alive, pgid
    finally:
        running.kill()
        running.wait()
        zombie.wait()
    assert host.group_alive(running.pid) is False

    # a group whose leader has exited, a zombie and then reaped, while a process it started lives on: alive until
    # that one ends too (the leader's own entry answers first; here only the other processes can)
    leader = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    member = int(leader.stdout.readline())
    try:
        deadline = time.monotonic() + 10
        while open(f"/proc/{leader.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the leader never became a zombie"
            time.sleep(0.01)
        assert host.group_alive(leader.pid) is True and ShellHost.group_alive(host, leader.pid) is True
        leader.wait()
        assert host.group_alive(leader.pid) is True and ShellHost.group_alive(host, leader.pid) is True
    finally:
        os.kill(member, signal.SIGKILL)
        leader.stdout.close()
    deadline = time.monotonic() + 10
    while host.group_alive(leader.pid):  # the member, killed, is reaped by init
        assert time.monotonic() < deadline, "the group outlived its last process"
        time.sleep(0.01)


def test_a_local_host_lists_the_kits_tagged_processes_from_proc_as_the_shells_listing_does(tmp_path, sim_root):
    # a run lists them three times (sweep, drain, last sweep); the shell's loop starts five processes per process
    from launchlab import tags
    from launchlab.hosts import commands, reaper
    from launchlab.hosts.shell import ShellHost

    host = SimHost("box", params.SimSpec(transport="sim", gpus=1), sim_root / "b")
    pgid = leftover(host, tmp_path)
    try:
        ours, shells = host.tagged_listing(tags.RUN_ID_ENV), ShellHost.tagged_listing(host, tags.RUN_ID_ENV)
        assert f"{pgid} {pgid} {OLD_RUN}\n" in ours
        # (this shared machine's other tagged processes may come and go between the two listings)
        assert [line for line in shells.splitlines() if line.startswith(f"{pgid} ")] == [f"{pgid} {pgid} {OLD_RUN}"]
        assert ours.splitlines()[-1] == shells.splitlines()[-1] == commands.TAGGED_END
        assert [p.pid for p in reaper.of_run(host, OLD_RUN)] == [pgid]
    finally:
        host.kill_group(pgid, 1)
    assert reaper.of_run(host, OLD_RUN) == []


@pytest.mark.slow
def test_a_server_whose_setsid_runs_late_is_started_not_refused(tmp_path, monkeypatch):
    # on a busy host the pid is printed before the child has run setsid: the group check waits for it (the overhead
    # bench once lost a run to "not leading its own process group" under full load)
    import shutil
    import time

    from launchlab.hosts.local import LocalHost

    slow = tmp_path / "bin"
    slow.mkdir()
    (slow / "setsid").write_text(f"#!/bin/sh\nsleep 0.5\nexec {shutil.which('setsid')} \"$@\"\n")
    (slow / "setsid").chmod(0o755)
    monkeypatch.setenv("PATH", f"{slow}:{os.environ['PATH']}")
    host = LocalHost("here", workdir=str(tmp_path))
    work = tmp_path / "run"
    host.make_dir(str(work))
    tic = time.monotonic()
    ref = host.start_detached("server", ["sleep", "30"], cwd=str(work), log_name="log")
    try:
        assert ref.pgid == ref.pid and time.monotonic() - tic >= 0.4, "the check waited for setsid"
        assert host.group_alive(ref.pgid)
    finally:
        host.kill_group(ref.pgid, 1)
    assert not host.group_alive(ref.pgid)
