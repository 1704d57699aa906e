"""Finding and stopping a run's processes by the run id every process the kit starts carries in its environment.

Stopping a run's process groups misses a child that left its group (`setsid`, a daemonizing helper), and a
kernel that died between starting a process and recording it leaves that process unrecorded. Both still carry
LAUNCHLAB_RUN_ID=<experiment>/<run-dir>/<run-id> (children inherit the environment), so the run id finds them.
Every listing is checked: one that did not run to its end raises HostError, it never reads as "nothing left".
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from launchlab.errors import HostError
from launchlab.hosts import Host, commands
from launchlab.polling import backoff
from launchlab.tags import RUN_ID_ENV

POLL_S = 0.2
KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class Tagged:
    """A live process on a host that carries a run id."""

    pid: int
    pgid: int
    run: str


@dataclass(frozen=True)
class Sweep:
    """What stopping a run's remaining processes found and did: the pids, and the last signal sent (None: none left)."""

    pids: tuple[int, ...]
    signal: str | None


def tagged(host: Host) -> list[Tagged]:
    """Every live process on the host that carries a run id, of any run."""
    out = host.tagged_listing(RUN_ID_ENV)
    lines = out.splitlines()
    if not lines or lines[-1] != commands.TAGGED_END:
        raise HostError(host.name, "the listing of processes carrying a run id did not run to its end "
                                   f"(it printed {out[-200:]!r}), so it cannot tell which are left")
    found = []
    for line in lines[:-1]:
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
            found.append(Tagged(int(parts[0]), int(parts[1]), parts[2]))
    return found


def of_run(host: Host, tag: str, spare_pgids: Collection[int] = ()) -> list[Tagged]:
    """The live processes of one run (exactly its run id), except those in the spared process groups."""
    return [p for p in tagged(host) if p.run == tag and p.pgid not in spare_pgids]


def stop_run(host: Host, tag: str, grace_s: float, spare_pgids: Collection[int] = ()) -> Sweep:
    """TERM every process of the run but the spared groups, wait up to grace_s, KILL what is left; raise HostError
    when something survives SIGKILL. Processes that appear meanwhile (a supervisor respawning) are stopped too."""
    left = of_run(host, tag, spare_pgids)
    seen = {p.pid for p in left}
    if not left:
        return Sweep((), None)
    for signal, wait_s in (("TERM", grace_s), ("KILL", KILL_WAIT_S)):
        deadline = time.monotonic() + wait_s
        sent: set[int] = set()  # each process gets each signal once: a second TERM can cut its own shutdown short
        pauses = backoff(longest_s=POLL_S)
        while left:
            if new := [p.pid for p in left if p.pid not in sent]:
                host.run(commands.signal_tagged(RUN_ID_ENV, tag, new, signal), timeout=30)
                sent.update(new)
            if time.monotonic() > deadline:
                break
            time.sleep(next(pauses))
            left = of_run(host, tag, spare_pgids)
            seen.update(p.pid for p in left)
        if not left:
            return Sweep(tuple(sorted(seen)), signal)
    pids = " ".join(str(p.pid) for p in left)
    raise HostError(host.name, f"processes of run {tag} survived SIGKILL (pids {pids}); stop them by hand: kill -KILL {pids}")
