"""Nothing a test session started outlives it: a pytest plugin (loaded by conftest.py) and a watchdog.

Every daemon, server, kernel and browser the tests start lives in, or names in its command line or environment, a
folder under the session's base temporary folder (sshd and Slurm keep their config and pid files there, simulated
boxes and outputs folders are there). So the session's base folder identifies what the session started:

- at session start the controller writes its pid (and start time, so a reused pid is not mistaken for it) into
  `owner.pid` there, and starts a watchdog — this file run as a program — in a session of its own. The watchdog
  waits for that process to end; when it does, however it ended (a timeout's SIGKILL included, when no finaliser
  can run), it stops every process that names the folder.
- at session start the controller also sweeps earlier sessions' folders: one whose owner is gone but where some
  process still names the folder (its watchdog was killed too) has those processes stopped.
- SIGTERM and SIGHUP to the controller become a KeyboardInterrupt, so the fixtures' finalisers run as after a
  Ctrl-C; the watchdog is the backstop when they cannot.

Sessions of other checkouts or engineers on the same machine are never touched: their owner is alive, or their
folder has no owner file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OWNER = "owner.pid"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def claim(folder: Path, pid: int | None = None) -> None:
    """Record `pid` (default: this process) as the owner of folder."""
    pid = pid or os.getpid()
    (folder / OWNER).write_text(f"{pid} {_start_time(pid)}\n")


def owner_alive(folder: Path) -> bool:
    try:
        pid, started = (folder / OWNER).read_text().split()
    except (OSError, ValueError):
        return False
    return _start_time(int(pid)) == started


def naming(folder: Path) -> list[int]:
    """Live processes (not this one) whose command line or environment names a path inside folder. A shell's
    PWD and OLDPWD do not count: an engineer's shell looking at a session's files is not the session's."""
    needle = (str(folder).rstrip("/") + "/").encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            blob = b"\0".join([(entry / "cmdline").read_bytes(),
                               *(v for v in environ if not v.startswith((b"PWD=", b"OLDPWD=")))])
        except OSError:
            continue
        if needle in blob and _start_time(int(entry.name)) is not None:
            found.append(int(entry.name))
    return found


def stop_naming(folder: Path, grace_s: float = 5.0) -> list[int]:
    """SIGTERM every process that names folder, SIGKILL what is left after grace_s; returns the pids found."""
    pids = naming(folder)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_start_time(p) for p in pids):
            time.sleep(0.1)
    return pids


def sweep(root: Path) -> dict[Path, list[int]]:
    """Stop what earlier sessions under root (pytest's /tmp/pytest-of-USER) left running: the processes naming a
    session folder whose owner has ended. Returns what was stopped, by folder."""
    stopped = {}
    for owner in sorted(root.glob(f"*/{OWNER}")):
        folder = owner.parent
        if not owner_alive(folder) and (pids := stop_naming(folder)):
            stopped[folder] = pids
    return stopped


def start_watchdog(folder: Path, pid: int | None = None) -> subprocess.Popen:
    """A detached process that stops everything naming folder once `pid` (default: this process) has ended."""
    claim(folder, pid)
    return subprocess.Popen([sys.executable, __file__, str(folder)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            cwd="/")


def _watch(folder: Path) -> None:
    while owner_alive(folder):
        time.sleep(0.5)
    stop_naming(folder)


def _interrupt(signum, frame):
    """The first SIGTERM/SIGHUP stops the session as Ctrl-C does; a later one is ignored, so it cannot cut short the
    finalisers that stop the fixtures' daemons (a second signal once escaped pytest's session end mid-teardown). A
    session stuck beyond that is SIGKILLed, and its watchdog stops what it left."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


# --- the pytest plugin -------------------------------------------------------------------------------------------

def pytest_sessionstart(session):
    if hasattr(session.config, "workerinput"):  # an xdist worker: its controller watches the whole base folder
        return
    base = session.config._tmp_path_factory.getbasetemp()
    sweep(base.parent)
    # left running when the session ends normally too: it finds nothing to stop unless a fixture failed to
    start_watchdog(base)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


if __name__ == "__main__":
    _watch(Path(sys.argv[1]))
