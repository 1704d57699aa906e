"""The `local` transport: this machine, through bash, with the same shell commands a remote host gets."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from launchlab.hosts import commands, httpask, local_spec, ports
from launchlab.hosts.base import CommandResult
from launchlab.hosts.shell import ShellHost


def open_host(name: str, spec: local_spec.LocalSpec, *, sim_box: Path | None = None) -> LocalHost:
    """The host of a `transport: local` entry (sim_box: only sim hosts live in one)."""
    return LocalHost(name, workdir=spec.workdir)


def default_workdir() -> str:
    """In the user's home, as for SSH and Slurm hosts (not the shared temp directory, where another user could
    make the folder first; the work folder is checked to be the user's alone either way: claim_workdir)."""
    return os.path.expanduser("~/.launchlab/work")


class LocalHost(ShellHost):
    transport = "local"
    simulated = False
    concurrent_commands = True

    def __init__(self, name: str, workdir: str | None = None, env: dict[str, str] | None = None):
        self.name = name
        self.workdir = os.path.expanduser(workdir) if workdir else default_workdir()
        self.env = dict(env or {})

    def execute(self, command: str, *, timeout: float, idempotent: bool) -> CommandResult:
        """bash -c COMMAND, straight through subprocess: a run issues some twenty of these, and invoke's polling
        of its pipes added about 70 ms to each (bench/run_overhead.py). idempotent does not matter here: no
        connection can drop under a local command."""
        with subprocess.Popen(["/bin/bash", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, **self.env}, start_new_session=True) as proc:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                # the command's own session: a timed-out command goes with whatever it started in the foreground
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise self.timed_out(command, timeout) from None
        return CommandResult(command, out.decode("utf-8", errors="replace"), err.decode("utf-8", errors="replace"),
                             proc.returncode)

    def group_alive(self, pgid: int) -> bool:
        """The shell's check (a process of the group that is not a zombie) read from /proc here: a run asks a
        dozen times (watch, stop), and bash, ps and awk cost each ask 15–25 ms of CPU a starting server needs
        (bench/run_overhead.py). Without /proc (macOS) the shell's check."""
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False  # no process at all in the group, zombies included
        except PermissionError:
            pass  # another user's group exists: look at its states
        if not os.path.isdir("/proc/self"):
            return super().group_alive(pgid)
        # the group's leader (the process the kit started) alive: the usual answer, from one file rather than from
        # every process's — the scan below took 1.4 of a demo's 27 CPU seconds, asked at every poll of every run
        if _alive_in_group(str(pgid), pgid):
            return True
        # the leader has exited or is a zombie: is any other process of its group left?
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and _alive_in_group(entry.name, pgid):
                return True
        return False

    def tagged_listing(self, env_name: str) -> str:
        """commands.find_tagged's listing read from /proc here: the same lines (this user's live processes that carry
        env_name, zombies left out), without the shell loop's five processes per tagged process — a run lists
        three times (bench/run_overhead.py). Without /proc (macOS) the shell's listing."""
        if not os.path.isdir("/proc/self"):
            return super().tagged_listing(env_name)
        prefix = env_name.encode() + b"="
        lines = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as fh:
                    value = next((v[len(prefix):] for v in fh.read().split(b"\0") if v.startswith(prefix)), None)
                if value is None:
                    continue
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue  # another user's process (not readable, as for grep -s), or one that exited meanwhile
            state, _ppid, group = stat[stat.rfind(b")") + 2:].split(maxsplit=3)[:3]
            if state != b"Z":
                lines.append(f"{entry.name} {int(group)} {value.decode('utf-8', errors='replace')}")
        return "\n".join([*lines, commands.TAGGED_END]) + "\n"

    def write_text(self, path: str, text: str, private: bool = False) -> None:
        if not private:
            Path(path).write_text(text, encoding="utf-8")
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)

    def read_bytes(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                return fh.read(size)
        except FileNotFoundError:
            return b""

    def file_size(self, path: str) -> int | None:
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            return None

    def fetch(self, remote_path: str, local_path: str) -> None:
        if os.path.abspath(remote_path) != os.path.abspath(local_path):
            shutil.copyfile(remote_path, local_path)

    def remove_dir(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def free_port(self) -> int:
        """A TCP port free on 127.0.0.1 right now (the server binds it a moment later): ports.py."""
        return ports.pick()

    def http_post(self, url: str, body: dict, timeout: float) -> tuple[int | None, str]:
        """POST a JSON body from this machine: (status or None when nothing answered, response text), the whole
        answer within `timeout` (httpask)."""
        status, text = httpask.ask(url, timeout, method="POST", body=json.dumps(body).encode(),
                                   headers={"Content-Type": "application/json"})
        return (status, text) if isinstance(status, int) else (None, text)

    def http_status(self, url: str, timeout: float = 2.0) -> int | str:
        return httpask.ask(url, timeout)[0]  # a URL from the params (http/https only), answered whole in time


def _alive_in_group(pid: str, pgid: int) -> bool:
    """Whether /proc/<pid> is a process of group pgid that is not a zombie (False when it exited meanwhile)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    state, _ppid, group = stat[stat.rfind(b")") + 2:].split(maxsplit=3)[:3]  # after the command's name
    return int(group) == pgid and state not in (b"Z", b"X")
