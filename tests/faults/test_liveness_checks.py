"""Every liveness answer comes from a check that ran: "the group is dead" is never read from a command that a
dropped connection cut off or that could not run at all."""

import os
import subprocess
import threading
import time

import pytest

from launchlab import params
from launchlab.errors import HostError
from launchlab.hosts import commands
from launchlab.hosts.local import LocalHost
from launchlab.hosts.shell import ShellHost
from launchlab.hosts.ssh import SshHost


def test_the_liveness_check_prints_alive_or_dead_and_fails_when_ps_fails():
    cmd = commands.group_alive(4242)
    assert cmd.startswith("out=$(ps -e -o pgid=,stat=) || exit 2; ")
    assert "-v g=4242 " in cmd and 'print (n ? "alive" : "dead")' in cmd

    def ask(pgid: int, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["/bin/sh", "-c", commands.group_alive(pgid)], capture_output=True, text=True, **kw)

    assert ask(os.getpgid(0)).stdout == "alive\n"
    assert ask(2 ** 22 + 7).stdout == "dead\n"
    no_ps = ask(os.getpgid(0), env={"PATH": "/nonexistent"})
    assert no_ps.returncode == 2 and no_ps.stdout == ""


class ShellCheckedHost(LocalHost):
    """A local host that asks the shell whether a group lives, as SSH and Slurm hosts do (LocalHost reads /proc)."""

    group_alive = ShellHost.group_alive


def test_a_liveness_check_that_cannot_run_raises_instead_of_answering_dead(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        broken = ShellCheckedHost("box", workdir=str(tmp_path), env={"PATH": "/nonexistent"})  # no `ps` to run
        with pytest.raises(HostError, match="box"):
            broken.group_alive(sleeper.pid)
        with pytest.raises(HostError):  # and killing it is not reported as "gone" either
            broken.kill_group(sleeper.pid, 1)
        assert sleeper.poll() is None
        assert ShellCheckedHost("box", workdir=str(tmp_path)).group_alive(sleeper.pid) is True
        # a local host reads /proc instead, which needs no command: it still answers, and answers right
        assert LocalHost("box", workdir=str(tmp_path), env={"PATH": "/nonexistent"}).group_alive(sleeper.pid) is True
    finally:
        sleeper.kill()
        sleeper.wait()
    assert LocalHost("box", workdir=str(tmp_path)).group_alive(sleeper.pid) is False
    assert ShellCheckedHost("box", workdir=str(tmp_path)).group_alive(sleeper.pid) is False


def ssh_host(server, reconnect_s: float = 10) -> SshHost:
    spec = params.SshSpec(transport="ssh", address="127.0.0.1", port=server.port, identity_file=str(server.client_key),
                          reconnect_s=reconnect_s)
    return SshHost("gpu", spec)


def drop_once_started(server, marker) -> threading.Thread:
    """Cut the connection once the command has written its marker (it is then sleeping)."""

    def cut() -> None:
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.2)
        server.drop_sessions()

    thread = threading.Thread(target=cut, daemon=True)
    thread.start()
    return thread


@pytest.mark.ssh
def test_a_command_cut_off_by_a_dropped_connection_is_run_again_on_a_new_one(sshd, tmp_path):
    host = ssh_host(sshd)
    marker = tmp_path / "runs"
    cutter = drop_once_started(sshd, marker)
    result = host.run(f"echo x >> {marker}; sleep 1.5; echo finished", check=False)
    cutter.join()
    assert (result.exit_code, result.stdout) == (0, "finished\n")
    assert marker.read_text() == "x\nx\n", "cut off once, then run again to its end"
    host.close()


@pytest.mark.ssh
def test_a_command_that_must_not_run_twice_raises_when_it_was_cut_off(sshd, tmp_path):
    host = ssh_host(sshd)
    marker = tmp_path / "runs"
    cutter = drop_once_started(sshd, marker)
    with pytest.raises(HostError, match="may or may not have done its work"):
        host.run(f"echo x >> {marker}; sleep 1.5; echo finished", idempotent=False)
    cutter.join()
    assert marker.read_text() == "x\n"
    assert host.run("echo back").stdout == "back\n", "the next command reconnects"
    host.close()
