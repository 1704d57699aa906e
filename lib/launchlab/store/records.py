"""The store's values of one run: the planned run (Run: what to launch, as the manifest lists it) and the run
record (what the kit observed — status.json while it runs and after, and one row of runs.parquet). The one
definition of a run's fields, states and statuses."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from launchlab import __version__
from launchlab.errors import RunDirError
from launchlab.store import jsontypes, rundir
from launchlab.store.manifest import ManifestEntry

if TYPE_CHECKING:  # annotations only: the store does not import the params model or the search
    from launchlab.params import Variant
    from launchlab.search import Probe

# unknown: an imported log that ends before the server was ready or failed (the kit did not watch the run)
Status = Literal["ready", "failed", "timeout", "degraded", "error", "unknown"]
State = Literal["preflight", "patching", "starting", "queued", "watching", "smoke request", "stopping", "collecting", "done"]
STATUSES: tuple[str, ...] = get_args(Status)
STATES: tuple[str, ...] = get_args(State)
# what the server did, so a run with one of these is an observation of it; `error` is the kit's (a kit error, an
# interruption), `unknown` an imported log that stops before the launch ended
VALID_STATUSES: tuple[str, ...] = ("ready", "failed", "timeout", "degraded")
KIT_STATUSES: tuple[str, ...] = (*VALID_STATUSES, "error")  # what a run the kit watched can end as
# the runs whose sampled peak GPU memory is a value: their server stood ready and held its memory while sampled. A
# launch that failed may have freed it before the sampler looked (two failing levels of one launch read 73.9 and
# 45.2 GiB): its peak is a lower bound, never compared (effects, compare) nor taken as a level's trace (varied)
STOOD_READY: tuple[str, ...] = ("ready", "degraded")
LOWER_BOUND = "a failed launch's sampled peak is a lower bound"  # why the others' peaks are left out, as said


@dataclass(frozen=True)
class Run:
    """One launch of one variant: the unit papermill executes and the row of runs.parquet."""

    run_id: str
    seq: int
    variant: Variant
    repetition: int
    host: str
    nodes: tuple[str, ...] = ()  # a multi-node run: its hosts in node-rank order (host is nodes[0])
    probe: Probe | None = None  # a run of a threshold search: its stratum, flag value and why
    warmup: bool = False  # a warm-up launch of the baseline (`warmup:`): recorded, never compared; repetition = n

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.nodes or (self.host,)

    @classmethod
    def from_entry(cls, entry: ManifestEntry, variant: Variant, *, nodes: tuple[str, ...] = (),
                   probe: Probe | None = None) -> Run:
        """The run a manifest lists (manifest_entry), with its variant as the params render its levels."""
        return cls(entry.run_id, entry.seq, variant, entry.repetition, entry.host, nodes, probe, warmup=entry.warmup)

    def manifest_entry(self) -> ManifestEntry:
        """The run as the manifest lists it (a probe: with its stratum and why it was chosen)."""
        probe = self.probe
        return ManifestEntry(self.run_id, self.seq, self.variant.name, self.variant.levels, self.repetition,
                                    self.host, stratum=probe.stratum if probe else None, why=probe.why if probe else None,
                                    warmup=self.warmup)


# the reason of a run not ready by its deadline whose two ready signals disagree: the server logged its ready line and
# the kit's probe never answered 200, or the probe answered 200 and the ready line never came (the watch's)
READY_SIGNALS = "ready_signals_disagree"


@dataclass(frozen=True)
class Outcome:
    """How the watch (and the smoke request) ended: the status, a reason when the kit knows one, what it saw; and
    both ready signals as the watch saw them — when the server's own ready line came (seconds from the launch) and
    what the kit's probe of the health URL got (`200 ×1 after 404 ×3`)."""

    status: Status
    reason: str | None
    message: str
    ready_after_s: float | None = None
    ready_line_s: float | None = None
    probe: str | None = None


@dataclass
class RunRecord:
    """What the kit observed of one run; status.json when done, and (ROW) its row of runs.parquet."""

    run_id: str
    variant: str
    repetition: int
    host: str
    levels: dict[str, str]
    status: Status = "error"
    failure_reason: str | None = None
    failure_phase: str | None = None
    failure_message: str | None = None
    phase_reached: str | None = None
    startup_s: float | None = None  # from the server's start (on a scheduler's host: when its job began to run)
    queue_s: float | None = None  # how long its job waited in the scheduler's queue (None: no scheduler)
    peak_mem_used_mib: float | None = None
    server_started_at: str | None = None
    stopped_with: str | None = None
    drained: bool | None = None
    drain_s: float | None = None
    simulated: bool = False
    nodes: list[str] = field(default_factory=list)
    gpus: list[int] | None = None  # the GPU slot the run was given (CUDA_VISIBLE_DEVICES); None: the whole host
    # both ready signals: when the server's own ready line came (s from the start) and what the kit's probe got
    ready_line_s: float | None = None
    probe_answers: str | None = None
    smoke_status: int | None = None
    smoke_s: float | None = None
    smoke_response: str | None = None
    scheduler: list[dict] | None = None  # per node, where its job ran: job id, node, partition, gres (slurm)
    scheduler_end: list[dict] | None = None  # per node, how its job ended: state, exit code, node, end time, source
    notes: list[str] = field(default_factory=list)
    # what the run folder keeps of each server log (keptlog.LogCut.to_json): {name, written_bytes, kept_bytes,
    # head_bytes, tail_bytes, cut_bytes, lines_cut, complete}; a log longer than its kept head and tail is cut
    logs: list[dict] = field(default_factory=list)
    # made by hand and brought in with `launchlab import`: the kit did not watch it, so what only watching shows
    # (preflight GPU state, installed files, environment, startup time) is None, never made up
    imported: bool = False
    # an imported run whose own log contradicts the levels it was filed under (what its log shows): it is not an
    # observation of that variant, so it is left out of every comparison (and shown as a confound)
    misfiled: str | None = None
    # a warm-up launch of the baseline (params `warmup:`): recorded like any run, never compared (it is not in the
    # manifest's run_ids, so not in runs.parquet); repetition says which warm-up it was
    warmup: bool = False

    # the columns of runs.parquet, in order (then one column per factor)
    ROW = ("run_id", "variant", "repetition", "host", "status", "failure_reason", "failure_phase", "failure_message",
           "startup_s", "peak_mem_used_mib", "phase_reached", "simulated", "smoke_status", "imported", "misfiled",
           "queue_s", "job_node", "ready_line_s", "probe_answers")
    # what a full disk still lets the kit write in place of the progress record
    ESSENTIAL = ("run_id", "variant", "repetition", "host", "levels", "status", "failure_message", "stopped_with")

    @classmethod
    def from_json(cls, data: dict, path: Path | str = "status.json") -> RunRecord:
        """A record read back: every known field of the type the kit writes (jsontypes), else RunDirError."""
        try:
            return cls(**jsontypes.checked(cls, data, path))
        except TypeError as exc:  # a required field missing
            raise RunDirError(f"{path} is not a run record the kit wrote ({exc})") from None

    @property
    def job_node(self) -> str | None:
        """The node(s) the run's job ran on (a scheduler's host), else None."""
        nodes = [p.get("NodeList") for p in self.scheduler or [] if p.get("NodeList")]
        return ",".join(nodes) or None

    def row(self) -> dict:
        return {c: getattr(self, c) for c in self.ROW}

    @property
    def started(self) -> datetime | None:
        """When the server was started, on the host's clock (what telemetry's t_s counts from); None: not known."""
        return datetime.fromisoformat(self.server_started_at[:26]) if self.server_started_at else None


@dataclass(frozen=True)
class StatusFile:
    """status.json as read: the run's state, and its record once the state is `done`."""

    state: State
    record: RunRecord | None
    elapsed_s: float | None = None
    detail: str | None = None  # what the state waits on (queued: the scheduler's reason)

    @property
    def done(self) -> bool:
        return self.state == "done"


def read_status(folder: rundir.RunFolder) -> StatusFile | None:
    """A run folder's status, or None when it has none (not started, or an earlier attempt was archived)."""
    if not folder.status.is_file():
        return None
    data = rundir.read_json(folder.status)  # one of the wrong shape is an error that names it, never "not started"
    state = data.get("state")
    if state not in STATES:
        raise RunDirError(f"{folder.status} has an unknown state {state!r}; rebuild the run with --resume")
    return StatusFile(state, RunRecord.from_json(data, folder.status) if state == "done" else None, data.get("elapsed_s"),
                      data.get("detail"))


def write_progress(folder: rundir.RunFolder, run_id: str, state: State, elapsed_s: float, *,
                   detail: str | None = None) -> None:
    progress = {"run_id": run_id, "state": state, "elapsed_s": round(elapsed_s, 2)}
    if detail:
        progress["detail"] = detail
    rundir.write_json(folder.status, progress)


def write_final(folder: rundir.RunFolder, record: RunRecord) -> None:
    """The final status.json. On a full disk the essentials still fit in place of the progress record, so the
    run is marked `error` with the reason — then the error is raised all the same."""
    try:
        rundir.write_json(folder.status, {**dataclasses.asdict(record), "state": "done", "kit_version": __version__})
    except RunDirError as exc:
        record.status, record.failure_message = "error", str(exc)
        essentials = {k: getattr(record, k) for k in RunRecord.ESSENTIAL}
        rundir.write_json(folder.status, {**essentials, "state": "done",
                                          "notes": ["the full status could not be written"]})
        raise


def finished(folder: rundir.RunFolder) -> bool:
    """The run ended and is not a kit error (what --resume skips)."""
    status = read_status(folder)
    return status is not None and status.done and status.record.status != "error"


def done(folder: Path | rundir.RunFolder) -> bool:
    status = read_status(folder if isinstance(folder, rundir.RunFolder) else rundir.RunFolder(Path(folder)))
    return status is not None and status.done
