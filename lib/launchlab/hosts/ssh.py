"""The `ssh` transport: a GPU box reached over SSH with fabric, strict about host keys, robust to drops.

Fabric accepts any host key unless told otherwise (it hard-codes paramiko's AutoAddPolicy and never reads
known_hosts), so the connection loads the user's known_hosts files and rejects unknown or changed keys — and so
does every ProxyJump hop of ~/.ssh/config (fabric makes each hop a Connection of its own, as trusting as the first).
It also ignores ServerAliveInterval, so keepalive is set on the transport. Every command is one shell string
built in hosts/commands/ and run with pty=False; a dropped connection is reopened (bounded) before a
command is given up, and a host that stays unreachable raises HostError.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from pathlib import Path

import paramiko
from fabric import Config, Connection
from invoke.exceptions import CommandTimedOut

from launchlab import config as launchlab_config  # `config` is fabric's Config below
from launchlab.errors import HostError
from launchlab.hosts import ssh_spec
from launchlab.hosts.base import CommandResult
from launchlab.hosts.shell import ShellHost

KEEPALIVE_S = 15
log = logging.getLogger(__name__)
_DROPPED = (paramiko.SSHException, EOFError, OSError, socket.timeout)


def open_host(name: str, spec: ssh_spec.SshSpec, *, sim_box: Path | None = None) -> SshHost:
    """The host of a `transport: ssh` entry; it connects on its first command (sim_box: only sim hosts live in one)."""
    return SshHost(name, spec)


def _known_hosts_files() -> list[Path]:
    if (configured := launchlab_config.known_hosts()) is not None:
        return configured
    return [Path("~/.ssh/known_hosts").expanduser(), Path("/etc/ssh/ssh_known_hosts")]


def _strict(client: paramiko.SSHClient) -> None:
    for path in _known_hosts_files():
        if path.is_file():
            client.load_host_keys(str(path))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())


def _unknown_hop(message: str, conn: Connection) -> Connection | None:
    """The ProxyJump hop whose key paramiko did not find (its message names the server), or None: not a hop's."""
    hop = conn.gateway
    while isinstance(hop, Connection):
        for name in (hop.host, f"[{hop.host}]:{hop.port}"):
            if f"'{name}' not found in known_hosts" in message:
                return hop
        hop = hop.gateway
    return None


def _no_exit_status(res) -> bool:
    """paramiko's exit status of a channel that closed without reporting one is -1."""
    return res.exited is None or res.exited < 0


class SshHost(ShellHost):
    transport = "ssh"
    simulated = False

    def __init__(self, name: str, spec: ssh_spec.SshSpec):
        self.name = name
        self.spec = spec
        self.workdir = spec.workdir or ".launchlab/work"
        self.reconnect_s = spec.reconnect_s
        self._conn: Connection | None = None
        self._lost = False

    # -- connection ---------------------------------------------------------------------------------------

    def _connect(self) -> Connection:
        overrides = {"load_ssh_configs": True}
        config = Config(overrides=overrides, runtime_ssh_path=launchlab_config.ssh_config())
        kwargs: dict = {"banner_timeout": 15, "auth_timeout": 15}
        if self.spec.identity_file:
            kwargs["key_filename"] = [str(Path(self.spec.identity_file).expanduser())]
        conn = Connection(self.spec.address, user=self.spec.user, port=self.spec.port, config=config,
                          connect_kwargs=kwargs, connect_timeout=15)
        # fabric would trust any key, of the host and of every ProxyJump hop: load known_hosts, refuse what is not in it
        hop = conn
        while isinstance(hop, Connection):
            _strict(hop.client)
            hop = hop.gateway
        try:
            conn.open()
        except paramiko.BadHostKeyException as exc:
            raise HostError(self.name, f"the host key of {self._where()} CHANGED since it was trusted ({exc}). "
                                       "If the host was reinstalled, remove its old line with "
                                       f"`ssh-keygen -R {self._known_name()}` and connect once with ssh to trust it again; "
                                       "otherwise someone may be intercepting the connection.") from None
        except paramiko.SSHException as exc:
            if (hop := _unknown_hop(str(exc), conn)) is not None:
                raise HostError(self.name, f"the host key of {hop.host} (port {hop.port}), a ProxyJump hop on the way "
                                           f"to {self._where()}, is unknown, so the hop cannot be verified (a machine "
                                           "in between could read and change everything). Trust it by connecting once "
                                           f"with `ssh -p {hop.port} {hop.user}@{hop.host}` and checking its "
                                           "fingerprint (it is then in ~/.ssh/known_hosts).") from None
            if "not found in known_hosts" in str(exc):
                raise HostError(self.name, f"the host key of {self._where()} is unknown, so the host cannot be "
                                           f"verified. Trust it by connecting once with `ssh {self._ssh_args()}` "
                                           "and accepting the key (it is then in ~/.ssh/known_hosts), or add it "
                                           f"with `ssh-keyscan -p {conn.port} {conn.host} >> ~/.ssh/known_hosts` "
                                           "after checking its fingerprint.") from None
            raise HostError(self.name, f"cannot connect to {self._where()}: {exc}") from None
        except (TimeoutError, OSError) as exc:
            raise HostError(self.name, f"cannot connect to {self._where()}: {exc}") from None
        conn.transport.set_keepalive(KEEPALIVE_S)
        return conn

    def _where(self) -> str:
        user = f"{self.spec.user}@" if self.spec.user else ""
        port = f":{self.spec.port}" if self.spec.port else ""
        return f"{user}{self.spec.address}{port}"

    def _known_name(self) -> str:
        return f"[{self.spec.address}]:{self.spec.port}" if self.spec.port else self.spec.address

    def _ssh_args(self) -> str:
        port = f"-p {self.spec.port} " if self.spec.port else ""
        user = f"{self.spec.user}@" if self.spec.user else ""
        return f"{port}{user}{self.spec.address}"

    def connection(self) -> Connection:
        if self._conn is None or not self._conn.is_connected:
            self._conn = self._connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            # closing a connection that dropped can fail itself (paramiko sends a goodbye down the dead socket:
            # EOFError): it is closed all the same, and the caller is reconnecting or done with it
            with contextlib.suppress(*_DROPPED):
                conn.close()

    def _with_reconnect(self, what: str, action):
        """Run action(connection); on a dropped connection reopen it and retry until reconnect_s has passed."""
        # once the host was given up on, later calls (the cleanup's) try once each instead of waiting again
        deadline = time.monotonic() + (0 if self._lost else self.reconnect_s)
        delay = 0.5
        dropped = self._lost
        while True:
            if self._conn is not None and not self._conn.is_connected:
                dropped = True
                self.close()
            try:
                result = action(self.connection())
                self._lost = False
                return result
            except HostError as exc:
                if not dropped:
                    raise  # the first connection failed: unknown key, bad address, … (no retrying those)
                if time.monotonic() > deadline:
                    self._lost = True
                    raise HostError(self.name, f"{what}: the connection to {self._where()} dropped and could not be "
                                               f"reopened within {self.reconnect_s:.0f} s (last error: {exc})") from None
            except _DROPPED as exc:
                dropped = True
                self.close()
                if time.monotonic() > deadline:
                    self._lost = True
                    raise HostError(self.name, f"{what}: the connection to {self._where()} dropped and could not be "
                                               f"reopened within {self.reconnect_s:.0f} s ({exc})") from None
                log.warning("host %s: connection dropped during %s (%s); reconnecting", self.name, what, exc)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    # -- commands and files -------------------------------------------------------------------------------

    def execute(self, command: str, *, timeout: float, idempotent: bool) -> CommandResult:
        def action(conn: Connection):
            try:
                res = conn.run(command, hide=True, warn=True, pty=False, in_stream=False, timeout=timeout)
            except CommandTimedOut:
                raise self.timed_out(command, timeout) from None
            if _no_exit_status(res) and idempotent and not conn.is_connected:
                # paramiko reports a channel that died with its connection as exit -1: the command was cut off,
                # its output says nothing (a liveness check would read "dead"); run it again on a new connection
                raise EOFError("the connection dropped while a command ran")
            return res

        res = self._with_reconnect("running a command", action)
        if _no_exit_status(res):
            raise HostError(self.name, "the command ended without an exit status (the connection dropped under it, "
                                       "or the remote shell was killed by a signal), so it may or may not have done "
                                       f"its work: {command}")
        return CommandResult(command, res.stdout, res.stderr, res.exited)

    def write_text(self, path: str, text: str, private: bool = False) -> None:
        def action(conn: Connection):
            sftp = conn.sftp()
            with sftp.open(path, "w") as fh:
                if private:  # before the first byte is written
                    sftp.chmod(path, 0o600)
                fh.write(text.encode("utf-8"))

        self._with_reconnect(f"writing {path}", action)

    def read_bytes(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        def action(conn: Connection):
            try:
                with conn.sftp().open(path, "rb") as fh:
                    fh.seek(offset)
                    return fh.read(None if size < 0 else size)
            except FileNotFoundError:
                return b""

        return self._with_reconnect(f"reading {path}", action)

    def file_size(self, path: str) -> int | None:
        def action(conn: Connection):
            try:
                return conn.sftp().stat(path).st_size
            except FileNotFoundError:
                return None

        return self._with_reconnect(f"looking at {path}", action)

    def fetch(self, remote_path: str, local_path: str) -> None:
        self._with_reconnect(f"fetching {remote_path}", lambda conn: conn.get(remote_path, local_path))
