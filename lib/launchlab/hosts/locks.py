"""Host locks: one batch at a time on each GPU of a shared host, and who holds it.

A lock is a file per GPU (`gpu3.lock`, or `host.lock` where the GPUs cannot be listed) in a folder every
user of the host can write (`/tmp/launchlab-locks`, or the simulated box's own folder), created atomically: a
complete file hard-linked to the lock's name (hosts/commands/locks.py, where no name is followed or read whole, and
a folder that is a link or open to all without the sticky bit is refused). It names its owner — user, the kit's
pid and machine, the experiment, the run directory, since when — so a second batch can say who holds the host,
wait for it (`--wait`) or refuse; being someone else's input, what it says is checked field by field before it is
believed. The owner touches its files while it runs: a lock whose file has not been touched for STALE_S seconds on
the host's own clock, or whose owner ran on this machine and is gone, is stale and taken over. A batch's processes
carry its id (LAUNCHLAB_BATCH), so leftovers are only the processes of batches that no live lock accounts for —
never another batch's live runs.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from datetime import datetime

from launchlab import config
from launchlab.errors import HostError
from launchlab.escaping import visible
from launchlab.hosts import Host, commands

HEARTBEAT_S = 10
log = logging.getLogger(__name__)
STALE_S = 60
WAIT_REPORT_S = 30


@dataclass(frozen=True)
class Owner:
    """Who holds a lock (what its file says)."""

    batch: str
    user: str
    kit_pid: int
    kit_host: str
    experiment: str
    run_dir: str
    since: str

    @classmethod
    def me(cls, experiment: str, run_dir: str) -> Owner:
        return cls(uuid.uuid4().hex[:16], getpass.getuser(), os.getpid(), socket.gethostname(), experiment, run_dir,
                   datetime.now().isoformat(timespec="seconds"))

    def describe(self) -> str:
        return (f"{self.user} (launchlab pid {self.kit_pid} on {self.kit_host}, experiment {self.experiment}, "
                f"run directory {self.run_dir}, since {self.since})")


    @classmethod
    def from_text(cls, text: str) -> Owner | None:
        """The owner a lock file names, or None when it is not a record the kit wrote: every field there and of
        its type, the pid one a process can have (os.kill(0 or -1, …) would reach a whole group)."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(cls)}:
            return None
        pid = data["kit_pid"]
        if not (isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 2**31):
            return None
        if not all(isinstance(data[f.name], str) for f in fields(cls) if f.name != "kit_pid"):
            return None
        return cls(**data)


@dataclass(frozen=True)
class Holder:
    owner: Owner | None  # None: the lock file could not be read as an owner record
    age_s: float  # seconds since the owner last touched the file (host clock)
    name: str
    planted: str | None = None  # what is at the lock's name when it is no regular file (a link, a FIFO, a folder)

    def describe(self) -> str:
        if self.owner is not None:
            return self.owner.describe()
        if self.planted is not None:
            return (f"{self.planted}, not a lock file of the kit's (someone put it there: remove it if it is yours, "
                    "else ask its owner or the host's admin to)")
        return "an unreadable lock file"

    @property
    def stale(self) -> bool:
        if self.age_s > STALE_S:
            return True
        o = self.owner
        return o is not None and o.kit_host == socket.gethostname() and not _pid_alive(o.kit_pid)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder(name: str, text: str) -> Holder | None:
    """Parse what the lock commands print (hosts/commands/locks.py): what the name is and its owner, its mtime, the
    host's clock, then the file's first bytes (a regular file's only)."""
    lines = text.lstrip("\n").split("\n", 3)
    if len(lines) < 3:
        return None
    kind, _, user = lines[0].partition(":")
    try:
        mtime, now = int(lines[1]), int(lines[2])
    except ValueError:
        return None
    if kind == "missing":
        return None
    if kind != "regular file":
        return Holder(None, max(0, now - mtime), name, planted=f"a {visible(kind or 'something')} made by {visible(user)}")
    return Holder(Owner.from_text(lines[3] if len(lines) > 3 else ""), max(0, now - mtime), name)


class HostLock:
    """The locks of one host's GPU set (all its GPUs, or a slot): acquired together or not at all."""

    def __init__(self, host: Host, names: list[str], owner: Owner, lock_dir: str):
        self.host, self.names, self.owner, self.dir = host, sorted(set(names)), owner, lock_dir
        self.held: list[str] = []

    def _path(self, name: str) -> str:
        return f"{self.dir}/{name}.lock"

    def holders(self) -> list[Holder]:
        """Every lock file in the folder (any GPU, any batch), with its owner and age."""
        out = self.host.run(commands.lock_list(self.dir), timeout=30, check=False).stdout
        found = []
        for block in out.split("\x1e"):
            name, _, body = block.lstrip("\n").partition("\n")
            holder = _holder(name, body) if name else None
            if holder is not None:
                found.append(holder)
        return found

    def try_acquire(self) -> Holder | None:
        """Take every lock, or none: the live holder that stands in the way, else None."""
        text = json.dumps(asdict(self.owner))
        for name in self.names:
            out = self.host.run(commands.lock_take(self._path(name), text, STALE_S), timeout=30, check=False).stdout
            self._usable(out)
            if out.startswith("ACQUIRED"):
                self.held.append(name)
                continue
            holder = _holder(name, out.partition("\n")[2])
            if holder is not None and holder.stale:  # its owner is gone: take it over
                stale = holder.owner.batch if holder.owner else None
                out = self.host.run(commands.lock_take_over(self._path(name), text, stale, STALE_S), timeout=30,
                                    check=False).stdout
                if out.startswith("ACQUIRED"):
                    self.held.append(name)
                    continue
            self.release()
            return holder or Holder(None, 0, name)
        return None

    def _usable(self, out: str) -> None:
        """HostError when the lock command found the folder unfit for locks (a link, no folder, open to all)."""
        if out.startswith(commands.LOCK_UNUSABLE):
            why = visible(out.splitlines()[0][len(commands.LOCK_UNUSABLE):].strip())
            raise HostError(self.host.name, f"the lock folder {self.dir} {why}: the kit keeps no locks there (another "
                                            "user could make two batches share a GPU). Nothing was launched. Remove "
                                            "it if it is yours (the kit makes it again, mode 1777), or set "
                                            "LAUNCHLAB_LOCK_DIR to a folder that is one")

    def acquire(self, wait: bool, say: Callable[[str], None]) -> None:
        """Take the locks; while another batch holds one, wait (saying who, now and then) or refuse."""
        last = 0.0
        while (holder := self.try_acquire()) is not None:
            who = holder.describe()
            where = f"host {self.host.name!r} ({holder.name}, lock {self._path(holder.name)})"
            if not wait:
                raise HostError(self.host.name, f"{where} is held by {who}. Nothing was launched. Wait for it with "
                                                "`launchlab run PARAMS --wait`, or use other GPUs (`gpu_slots`).")
            if time.monotonic() - last > WAIT_REPORT_S:
                say(f"launchlab: waiting for {where}: held by {who}")
                last = time.monotonic()
            time.sleep(2)

    def touch(self) -> None:
        for name in self.held:
            self.host.run(commands.lock_touch(self._path(name), self.owner.batch), timeout=30, check=False)

    def release(self) -> None:
        for name in self.held:
            try:
                self.host.run(commands.lock_release(self._path(name), self.owner.batch), timeout=30, check=False)
            except HostError:
                pass  # an unreachable host: the lock goes stale by itself
        self.held = []


class Heartbeat:
    """Touches the held locks every HEARTBEAT_S seconds until stopped (a daemon thread)."""

    def __init__(self, locks: list[HostLock]):
        self.locks, self.stop_event = locks, threading.Event()
        self.thread = threading.Thread(target=self._run, name="lock-heartbeat", daemon=True)

    def _run(self) -> None:
        while not self.stop_event.wait(HEARTBEAT_S):
            for lock in self.locks:
                try:
                    lock.touch()
                except Exception:  # whatever a touch meets, the lock only goes stale by itself
                    # a lost connection (the run's watch reports it), a full disk, a host closed as the batch ends:
                    # this thread must not die with a traceback on the batch's terminal (seen once in CI, full disk)
                    log.debug("touching the locks of %s failed", lock, exc_info=True)

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        for lock in self.locks:
            lock.release()


def live_batches(found: list[Holder]) -> set[str]:
    return {h.owner.batch for h in found if h.owner is not None and not h.stale}


def lock_dir(host: Host) -> str:
    """Where a host's locks live: a simulated box's own folder, else the machine's (config.lock_dir: one folder
    per machine, shared by its users)."""
    if host.state_dir is not None:
        return f"{host.state_dir}/locks"
    return config.lock_dir()


def holders(host: Host) -> list[Holder]:
    return HostLock(host, [], Owner("", "", 0, "", "", "", ""), lock_dir(host)).holders()


def gpu_lock_names(host: Host, slots: list[list[int]] | None) -> list[str]:
    """The locks a batch needs on a host: one per GPU it uses (its slots' GPUs, else every GPU the host
    lists), or `host` when the GPUs cannot be listed."""
    if slots:
        return [f"gpu{g}" for slot in slots for g in slot]
    out = host.run(commands.gpu_indices(), timeout=60, check=False).stdout
    indices = [line.strip() for line in out.splitlines() if line.strip().isdigit()]
    return [f"gpu{i}" for i in indices] or ["host"]
