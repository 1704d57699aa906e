"""The contract of a transport: HostParams, the base of its params spec; the Host protocol every transport's host
follows; and what its commands return (CommandResult, ProcessRef). What shell-driven transports share is in
shell.py. Nothing here runs anything, so params can import it cheaply."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from launchlab.fields import StrictModel


@dataclass(frozen=True)
class CommandResult:
    command: str
    stdout: str
    stderr: str
    exit_code: int


@dataclass(frozen=True)
class ProcessRef:
    """A detached process on a host. It leads its own process group, so pgid == pid."""

    role: str
    pid: int
    pgid: int


@dataclass(frozen=True)
class JobStart:
    """How a scheduler started a server's process that it ran as a job (Host.job_start): how long the job waited
    in the queue, where it runs (job id, node, partition, GPUs; empty when the scheduler did not say), and what
    the provenance's commands printed on its node before the server started (None: the job ended, or took too
    long, before they were done)."""

    queue_s: float
    placement: dict
    facts: dict[str, CommandResult] | None


class HostParams(StrictModel):
    """The base of each transport's `hosts.<name>` entry in params (hosts/<transport>_spec.py). Every entry also
    has `transport` (a Literal of the transport's name: it picks the model), `gpus`, `workdir` and `gpu_slots`."""

    simulated: ClassVar[bool] = False  # its GPUs are simulated: said in the plan, the run records and the report

    def default_master_addr(self) -> str:
        """{master_addr} of a multi-node server whose node 0 is this host, when the params name none."""
        return "127.0.0.1"

    def worker_slots(self) -> list[list[int] | None]:
        """The runs a batch keeps in flight on this host at once: one per GPU slot (`gpu_slots`), else one on all
        of its GPUs (None). A scheduler's host (slurm) says how many jobs, and the scheduler picks the GPUs."""
        return list(getattr(self, "gpu_slots", None) or [None])


class Host(Protocol):
    """What the lifecycle, locks, reaper, provenance and patching call on a host, whatever its transport."""

    name: str
    transport: str
    simulated: bool
    workdir: str
    per_task: dict[str, str] | None  # {node_rank}, {nnodes}, {master_addr} as markers the host fills per task
    extra_logs: tuple[str, ...]  # server logs beside node 0's that the run's folder on the host holds
    # what the kit itself puts into the environment of every command there: a name's whole value, or (PATH) the
    # entries it puts in front of the caller's. Provenance records it so that the kit's own values (a simulated
    # box's folder, new for every batch and every --resume) are never compared as the server's environment
    kit_env: dict[str, str]

    def run(self, command: str, *, timeout: float = 60, check: bool = True,
            idempotent: bool = True) -> CommandResult: ...
    def start_detached(self, role: str, argv: list[str] | tuple[str, ...], *, cwd: str, log_name: str,
                       env_file: str | None = None) -> ProcessRef: ...
    def group_alive(self, pgid: int) -> bool: ...  # raises HostError when it cannot tell (the check did not run)
    def tagged_listing(self, env_name: str) -> str: ...  # what commands.find_tagged prints there (reaper.tagged)
    def kill_group(self, pgid: int, grace_s: float) -> str: ...
    def clock(self) -> str: ...
    def make_dir(self, path: str) -> None: ...
    def write_text(self, path: str, text: str, private: bool = False) -> None: ...
    # at most `size` bytes from offset (-1: to the end; b"" when the file is missing); a server's log is read in
    # bounded pieces, since a server can write GBs (issue 23)
    def read_bytes(self, path: str, offset: int = 0, size: int = -1) -> bytes: ...
    def file_size(self, path: str) -> int | None: ...  # None: no such file
    def fetch(self, remote_path: str, local_path: str) -> None: ...
    def remove_dir(self, path: str) -> None: ...
    # GET from the host: the HTTP status, or what stood in for one (commands.probes: refused, timed out, no answer)
    def http_status(self, url: str, timeout: float = 2.0) -> int | str: ...
    def free_port(self) -> int: ...
    def http_post(self, url: str, body: dict, timeout: float) -> tuple[int | None, str]: ...
    def close(self) -> None: ...  # what the host holds open (a connection); a no-op where nothing is open
    # several threads may run commands at once (a local shell); not over one SSH connection, which a thread that
    # finds it dropped reopens
    concurrent_commands: bool
    state_dir: Path | None  # a simulated box's own folder, where its locks live; None: the machine's lock folder
    # before anything is launched: HostError when a run could not start here (no nvidia-smi for the sampler, a
    # scheduler that would refuse the job)
    def check_launchable(self, sampler: str) -> None: ...
    def claim_workdir(self) -> None: ...  # before anything is launched: HostError unless `workdir` is the user's alone
    def gpu_indices(self) -> list[int] | None: ...  # the GPUs nvidia-smi lists there; None: it cannot tell (no
    #                                                nvidia-smi, or a scheduler's host, whose GPUs are its nodes')
    # this user's process groups (a scheduler's: jobs) of launchlab runs whose batch is not in `live`:
    # [{pgid, pids, run, batch}] (recovery.leftovers)
    def leftovers(self, live: set[str]) -> list[dict]: ...
    # A scheduler's host (slurm) runs a server as a job, on a node picked when the job runs, which the kit's own
    # commands do not reach; what differs is answered by these, so the lifecycle asks every host the same:
    # a command's output where the run's GPUs are, now (the preflight, a look at their processes); None where the
    # kit cannot reach them (a job samples its GPUs itself)
    def run_on_gpu_node(self, command: str, *, timeout: float = 60) -> str | None: ...
    # what the provenance's commands printed before the start where the kit does not run them itself: None (here:
    # provenance.node_record runs them on the host now); {} (a job runs them on its node once it runs: job_start)
    def facts_before_start(self) -> dict[str, CommandResult] | None: ...
    # after the server was started: None when it runs from that moment; a JobStart once the scheduler ran its job
    # (the queue waited out, on_wait(reason) while queued), whose start the ready clock then counts from
    def job_start(self, ref: ProcessRef, on_wait) -> JobStart | None: ...
    def ended_why(self, pgid: int) -> tuple[str, str] | None: ...  # (reason, message) when not the server's doing
    def final_state(self, ref: ProcessRef) -> dict | None: ...  # after the end: state, exit code, node, and source


class RunsAtOnce:
    """The Host protocol's scheduler questions, as a host that runs a process when it starts it answers them (every
    transport but a scheduler's, which overrides them, and the tests' in-memory host)."""

    def facts_before_start(self) -> dict[str, CommandResult] | None:
        """The provenance's commands run here, on the host itself, before the launch (provenance.node_record)."""
        return None

    def job_start(self, ref: ProcessRef, on_wait) -> JobStart | None:
        """A process started detached runs at once: no queue, and the host's facts were read before its start."""
        return None

    def ended_why(self, pgid: int) -> tuple[str, str] | None:
        """Nothing but the server itself (or the kit) ends its process here."""
        return None

    def final_state(self, ref: ProcessRef) -> dict | None:
        """No scheduler keeps a record of how a process ended here."""
        return None
