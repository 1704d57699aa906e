"""A real OpenSSH server on 127.0.0.1 for tests: its own host key, config, authorized key and a free port.

The sessions it opens see a simulated GPU box (`SetEnv` puts the simulated nvidia-smi and the kit's Python
first on PATH), so the whole run pipeline can be exercised over real SSH. No root is needed except for the
privilege-separation folder sshd insists on when it does run as root.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
SSH_KEYGEN = shutil.which("ssh-keygen")


@dataclass
class SshServer:
    folder: Path
    port: int
    client_key: Path
    known_hosts: Path
    ssh_config: Path
    host_alias: str
    config: Path
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=subprocess.DEVNULL,
                                     stderr=open(self.folder / "sshd.log", "ab"), start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"sshd exited: {(self.folder / 'sshd.log').read_text()[-2000:]}") from None
                time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def stop(self) -> None:
        """Stop the listener and every session it forked: established connections drop too."""
        if self.proc is None:
            return
        sessions = _children(self.proc.pid)  # per-connection sshd processes (they retitle themselves)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid in sessions:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc = None

    def drop_sessions(self) -> list[int]:
        """Kill the sshd processes serving the established connections; the listener keeps accepting new ones."""
        sessions = _children(self.proc.pid)
        for pid in sessions:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return sessions

    def running(self, needle: str) -> bool:
        """Whether a command containing needle runs right now in one of the sessions."""
        return any(needle.encode() in _cmdline(pid) for pid in _descendants(self.proc.pid))


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def _descendants(parent: int) -> list[int]:
    """Every process below parent (sshd sessions and the shells they run)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(entry.name))
    found, frontier = [], [parent]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found


def _children(parent: int) -> list[int]:
    """Processes whose parent is `parent`, and their sshd children in turn (privilege-separated sessions)."""
    found, frontier = [], [parent]
    while frontier:
        current = frontier.pop()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                comm = (entry / "comm").read_text().strip()
            except OSError:
                continue
            ppid = int(stat[stat.rfind(")") + 2:].split()[1])
            if ppid == current and comm.startswith("sshd"):
                found.append(int(entry.name))
                frontier.append(int(entry.name))
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_server(folder: Path, session_env: dict[str, str]) -> SshServer:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("host_ed25519", "client_ed25519"):
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True)
    (folder / "authorized_keys").write_text((folder / "client_ed25519.pub").read_text())
    port = free_port()
    host_pub = (folder / "host_ed25519.pub").read_text().split()[:2]
    known = folder / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {' '.join(host_pub)}\n")
    # SHLVL=1: bash, started by sshd for each command, counts itself a nested shell (2) and so skips the test
    # machine's own ~/.bashrc (root's runs `pyenv init`: ~100 processes, 0.13 s of CPU per command, most of what
    # a batch over this sshd cost). Nothing the kit does over SSH depends on the login user's startup files.
    set_env = " ".join(f"{k}={v}" for k, v in {**session_env, "SHLVL": "1"}.items())
    config = folder / "sshd_config"
    config.write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {folder / 'host_ed25519'}
PidFile {folder / 'sshd.pid'}
AuthorizedKeysFile {folder / 'authorized_keys'}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
Subsystem sftp internal-sftp
LogLevel ERROR
{('SetEnv ' + set_env) if set_env else ''}
""")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    alias = "gpubox"
    ssh_config = folder / "ssh_config"
    ssh_config.write_text(f"Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {_user()}\n"
                          f"  IdentityFile {folder / 'client_ed25519'}\n")
    return SshServer(folder, port, folder / "client_ed25519", known, ssh_config, alias, config)


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name
