"""GPU state during a run: the GPU memory that processes outside the run held while it ran, and each GPU's free
memory at its start — what provenance.json keeps of them (`gpu_state`, and `mem_free_mib` in the preflight's GPUs).

Which processes are the run's is told by the run id every process the kit starts carries (tags.RUN_ID_ENV),
and by the session each server starts (a process that renamed itself no longer shows its environment), both read
on the host in the same command that lists the compute apps (hosts/commands/gpus.py `gpu_owners`): a process
with the run's id or in its server's session is the run's; any other (another run's, another user's) is foreign; a pid
that is no process of the host (nvidia-smi shows another pid namespace's pids, e.g. inside a container) is
unattributed and never counted as foreign, so a container cannot make the run's own server look like a
stranger. A run directory without `gpu_state` (an old or imported run) was not observed: absent, never zero.

The looks: the preflight (the start, before the server), one every second or so while the kit watches the server
start (watch.GpuLooks: provenance.json `gpu_watching` keeps how many, and the look that saw the most foreign memory,
at `peak`, with each process at its most), when watching ends and just before the stop (`gpu_state`). `of_run`
reads both, so a process that takes memory after the preflight and frees it before watching ends is still seen.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from launchlab.errors import HostError
from launchlab.gpu.telemetry import APP_FIELDS
from launchlab.hosts.commands import OWNERS_END, OWNERS_MARK

# when the kit looks during a run (the start is the preflight, before the server): when watching it ended (ready,
# failed or timed out: the server's memory at its most for a ready one), and just before the kit stops it
WATCHED, END = "watched", "end"
PEAK = "peak"  # of the looks while watching (gpu_watching), the one that saw the most foreign memory on its host
NOT_OURS, NOT_HERE = "-", "?"  # gpu_owners' run column: no run id (or unreadable), no such process on the host


@dataclass(frozen=True)
class GpuProcess:
    """A process holding GPU memory on a host of the run, at the most the kit saw it hold on that GPU."""

    host: str
    pid: int
    process_name: str
    gpu_uuid: str
    used_mib: float


@dataclass(frozen=True)
class Moment:
    """What the processes on one host's GPUs of the run held at one look (MiB, summed over the GPUs)."""

    at: str
    host: str
    run_mib: float
    foreign_mib: float
    unattributed_mib: float
    t_s: float | None = None  # seconds since the server was started (the looks while watching say when)


@dataclass(frozen=True)
class DuringRun:
    """Every look of the kit at a run's GPUs while it ran, and the foreign and unattributed processes seen."""

    moments: tuple[Moment, ...] = ()
    foreign: tuple[GpuProcess, ...] = ()
    unattributed: tuple[GpuProcess, ...] = ()

    @property
    def foreign_peak_mib(self) -> float:
        """The most foreign memory seen at once (over the hosts of one look); 0 when none was seen."""
        at: dict[str, float] = {}
        for m in self.moments:
            at[m.at] = at.get(m.at, 0.0) + m.foreign_mib
        return max(at.values(), default=0.0)

    def to_json(self) -> dict:
        return {"moments": [asdict(m) for m in self.moments], "foreign": [asdict(p) for p in self.foreign],
                "unattributed": [asdict(p) for p in self.unattributed], "foreign_peak_mib": self.foreign_peak_mib}

    @classmethod
    def from_json(cls, record: dict) -> DuringRun:
        return cls(tuple(Moment(**_known(Moment, m)) for m in record.get("moments") or []),
                   tuple(GpuProcess(**_known(GpuProcess, p)) for p in record.get("foreign") or []),
                   tuple(GpuProcess(**_known(GpuProcess, p)) for p in record.get("unattributed") or []))


def _known(cls, data: dict) -> dict:
    """The keys of a record that are fields of cls (a newer kit's record may hold more)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def read_look(text: str, at: str, host: str, tag: str, sessions: frozenset[int] = frozenset(), *,
              t_s: float | None = None) -> tuple[Moment, list[GpuProcess], list[GpuProcess]]:
    """One look (gpu_owners' output on a host) as its moment, the foreign processes and the unattributed ones.
    A process is the run's when it carries the run's id (tag) or sits in one of the run's sessions (the server's
    process groups: each server is started as a session leader, and a worker that renamed itself, as vLLM's
    EngineCore does through setproctitle, no longer shows its environment but keeps its session).
    Raises HostError when the listing did not run to its end (it cannot say who is foreign)."""
    apps_text, mark, owners_text = text.partition(OWNERS_MARK + "\n")
    if not mark or OWNERS_END not in owners_text.splitlines():
        raise HostError(host, f"the listing of the GPU's processes and their runs did not run to its end (it "
                              f"printed {text[-200:]!r})")
    owners = {}
    for line in owners_text.splitlines():
        pid, run, sid = (line.split() + ["", "", ""])[:3]
        if pid.isdigit():
            owners[int(pid)] = tag if sid.isdigit() and int(sid) in sessions else run
    mine = foreign = unknown = 0.0
    strangers, unattributed = [], []
    for cells in (line.split(", ") for line in apps_text.splitlines()):
        if len(cells) != len(APP_FIELDS) or not cells[1].strip().isdigit():
            continue
        pid, used = int(cells[1]), _mib(cells[3])
        process = GpuProcess(host, pid, cells[2].strip(), cells[0].strip(), used)
        owner = owners.get(pid, NOT_HERE)  # gone between the two reads: nothing can be said of it
        if owner == tag:
            mine += used
        elif owner == NOT_HERE:
            unknown += used
            unattributed.append(process)
        else:
            foreign += used
            strangers.append(process)
    return Moment(at, host, mine, foreign, unknown, t_s), strangers, unattributed


def _mib(text: str) -> float:
    try:
        value = float(text.strip().removesuffix("MiB"))
    except ValueError:
        return 0.0  # `[N/A]` (a process whose usage the driver does not report): nothing can be counted
    return 0.0 if math.isnan(value) else value


def _most(found: list[GpuProcess]) -> tuple[GpuProcess, ...]:
    """Each process once (per host and GPU), at the most it was seen to hold."""
    best: dict[tuple[str, int, str], GpuProcess] = {}
    for p in found:
        key = (p.host, p.pid, p.gpu_uuid)
        if key not in best or p.used_mib > best[key].used_mib:
            best[key] = p
    return tuple(best.values())


def gather(looks: list[tuple[Moment, list[GpuProcess], list[GpuProcess]]]) -> DuringRun:
    """The looks of one run as its record: each process once, at the most it was seen to hold on its GPU."""
    return DuringRun(tuple(m for m, _, _ in looks), _most([p for _, f, _ in looks for p in f]),
                     _most([p for _, _, u in looks for p in u]))


def watching(looks: list[tuple[Moment, list[GpuProcess], list[GpuProcess]]], *, every_s: float, count: int) -> dict:
    """The looks while watching as provenance.json keeps them (`gpu_watching`): how often and how many, each
    host's look with the most foreign memory (its peak, at PEAK; on a tie the first), and every process seen at the
    most it held."""
    peaks: dict[str, Moment] = {}
    for moment, _, _ in looks:
        if moment.host not in peaks or moment.foreign_mib > peaks[moment.host].foreign_mib:
            peaks[moment.host] = moment
    during = gather(looks)
    moments = tuple(Moment(**{**asdict(m), "at": PEAK}) for m in peaks.values())
    return {"every_s": every_s, "looks": count, **DuringRun(moments, during.foreign, during.unattributed).to_json()}


def of_run(facts: dict) -> DuringRun | None:
    """A run's record from its provenance.json — the looks while watching (`gpu_watching`) and when it ended and
    before the stop (`gpu_state`) together; None when the kit did not look (an old or imported run)."""
    parts = [DuringRun.from_json(r) for r in ((facts or {}).get("gpu_state"), (facts or {}).get("gpu_watching"))
             if isinstance(r, dict)]
    if not parts:
        return None
    return DuringRun(tuple(m for p in parts for m in p.moments), _most([x for p in parts for x in p.foreign]),
                     _most([x for p in parts for x in p.unattributed]))


def free_at_start(facts: dict) -> dict[str, float] | None:
    """Each GPU's free memory (MiB) at the run's start, from its preflight, as `HOST GPU INDEX` → MiB; None when
    it was not recorded (no preflight, or a kit before memory.free was asked for)."""
    found = {}
    for node in [facts or {}, *((facts or {}).get("nodes") or [])[1:]]:
        for gpu in ((node.get("preflight") or {}).get("gpus") or []):
            free = gpu.get("mem_free_mib")
            if isinstance(free, (int, float)) and not math.isnan(free):
                found[f"{node.get('host') or '?'} GPU {gpu.get('index')}"] = float(free)
    return found or None


def gpu_names(facts: dict) -> dict[str, str]:
    """GPU uuid → `GPU INDEX` from the run's preflight (how a report names a GPU)."""
    names = {}
    for node in [facts or {}, *((facts or {}).get("nodes") or [])[1:]]:
        for gpu in ((node.get("preflight") or {}).get("gpus") or []):
            if gpu.get("uuid"):
                names[gpu["uuid"]] = f"GPU {gpu.get('index')}"
    return names
