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


def read_look(text: str, at: str, host: str, tag: str, *, sessions: frozenset[int] = frozenset(),
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


# -- the confounds GPU state makes: a run's GPUs busy at its start, held by others while it ran, emptier than the
# baseline's at its start, or other cards altogether (their memory before the weights, as the servers measured it)

def busy_gpus(ids: list[str], facts: dict[str, dict], tolerance_mib: float) -> list[dict]:
    found = []
    for r in ids:
        pre = facts[r].get("preflight") or {}
        busy = [g for g in pre.get("gpus", []) if (g.get("mem_used_mib") or 0) > tolerance_mib]
        apps = pre.get("compute_apps") or []
        if busy or apps:
            what = ", ".join(f"GPU {g['index']} {g['mem_used_mib']:.0f} MiB" for g in busy)
            procs = ", ".join(f"pid {a['pid']} ({a['process_name']})" for a in apps)
            found.append({"kind": "gpu state", "runs": [r],
                          "detail": f"before run {r} the GPUs were not idle: {what}{'; ' if what and procs else ''}{procs}"})
    return found


def _cut(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def foreign_gpu_memory(ids: list[str], facts: dict[str, dict], tolerance_mib: float) -> list[dict]:
    """A run during which processes outside it held more of its GPUs' memory than the drain tolerance, seen by the
    kit's looks during the run (gpustate.py): a confound on that run alone, naming the processes. A run the kit
    did not look at (an old or imported run) is not compared."""
    found = []
    for r in ids:
        seen = of_run(facts[r])
        if seen is None or seen.foreign_peak_mib <= tolerance_mib:
            continue
        names = gpu_names(facts[r])
        hosts = {p.host for p in seen.foreign}
        procs = ", ".join(f"pid {p.pid} ({_cut(p.process_name)}) {p.used_mib:.0f} MiB on "
                          f"{names.get(p.gpu_uuid, p.gpu_uuid)}{f' of {p.host}' if len(hosts) > 1 else ''}"
                          for p in sorted(seen.foreign, key=lambda p: -p.used_mib)[:5])
        more = f" and {len(seen.foreign) - 5} more" if len(seen.foreign) > 5 else ""
        found.append({"kind": "gpu state", "runs": [r],
                      "detail": f"during run {r} processes outside it held up to {seen.foreign_peak_mib:.0f} MiB of "
                                f"its GPUs (drain tolerance {tolerance_mib:.0f} MiB): {procs}{more}"})
    return found


def less_free_at_start(ids: list[str], facts: dict[str, dict], reference: list[str], tolerance_mib: float,
                       *, skip: set[str] = frozenset()) -> list[dict]:
    """A run whose GPUs had less free memory at its start (the preflight; the least over its GPUs) than the
    reference runs' (the baseline's: the most of theirs, other than itself; a lone baseline run's: the other
    runs') by more than the drain tolerance: a confound on that run alone. skip: runs already named for their GPU
    state at the start (busy_gpus)."""
    free = {r: min(v.values()) for r in ids if (v := free_at_start(facts[r]))}
    found = []
    for r, mine in free.items():
        others = [free[b] for b in reference if b in free and b != r] or \
            [free[b] for b in free if b != r]  # a lone baseline run is compared with the others
        if r in skip or not others or max(others) - mine <= tolerance_mib:
            continue
        found.append({"kind": "gpu state", "runs": [r],
                      "detail": f"run {r} started with {mine:.0f} MiB free on its fullest GPU, {max(others) - mine:.0f} "
                                f"MiB less than the baseline runs ({max(others):.0f} MiB; drain tolerance "
                                f"{tolerance_mib:.0f} MiB)"})
    return found


OTHER_CARD_SHARE = 0.05  # memory before the weights that differs by more than this share is another card's


def memory_before_weights(ids: list[str], before: dict[str, float], *, break_evens: dict[str, float] | None = None,
                          named: set[str] = frozenset()) -> list[dict]:
    """The GPU memory the server had before its weights (the budget's `total_gib`, from its own log: what it
    measured, imports included) differs between runs by more than OTHER_CARD_SHARE: they ran on other cards (80 GB
    against 96 GB is 17 %), or on a card something else held — and a KV budget sized from it is another budget.
    What a level allocates before the weights (custom all-reduce's buffers, well under a GiB) is not. Values within
    that share of each other are one group; the largest group is the reference (of two as large, the one with more
    memory: less is a smaller card or one something else held), the others are named. named: runs
    other confounds name already (a busy GPU at the start): not named twice. break_evens: the budget's break-even
    per variant, shown with it (they differ with the memory)."""
    values = sorted((before[r], r) for r in ids if before.get(r) is not None and before[r] == before[r])
    groups: list[list[tuple[float, str]]] = []
    for value, r in values:
        if groups and value - groups[-1][0][0] <= OTHER_CARD_SHARE * value:
            groups[-1].append((value, r))
        else:
            groups.append([(value, r)])
    if len(groups) < 2:
        return []
    groups.sort(key=lambda g: (len(g), g[0][0]), reverse=True)  # a tie: the most memory is the reference
    odd = sorted(r for g in groups[1:] for _, r in g if r not in named)
    if not odd:
        return []
    text = "; ".join(f"{sum(v for v, _ in g) / len(g):.1f} GiB: {', '.join(r for _, r in g)}" for g in groups)
    shown_be = "; ".join(f"{v}: {b:.3g}" for v, b in (break_evens or {}).items() if b == b)
    return [{"kind": "host", "runs": odd,
             "detail": f"GPU memory before the weights (as each server's log measured it) differs by more than "
                       f"{OTHER_CARD_SHARE:.0%}: {text} — other cards, or a card something else held"
                       + (f"; the budget's break-even per variant: {shown_be}" if shown_be else "")}]
