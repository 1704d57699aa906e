"""MemoryHost: the Host contract (hosts/base.py) in memory, a test double in the manner of httpx's MockTransport.

A test says what its server does (a Program: its log lines and when, when it answers its health URL, when and how
it ends, the GPU memory it holds) and the run path runs against it in-process: no process, no host file, no port.
Files live in a dict; a started process is a record that follows the clock since its start; the sampler's trace
and the kit's GPU commands (recognised as the commands module builds them) are answered in nvidia-smi's formats
(sim/nvidia_smi.query_text). Any other command goes to `handler`: by default exit 127, a fact not gathered.
Shell quoting, process groups, signals, SSH and Slurm are tested against the real parts, not here.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from launchlab.gpu.telemetry import APP_FIELDS, SAMPLER_FIELDS, SNAPSHOT_FIELDS
from launchlab.hosts import commands
from launchlab.hosts.base import CommandResult, ProcessRef, RunsAtOnce
from launchlab.hosts.commands.probes import REFUSED
from launchlab.sim import nvidia_smi
from launchlab.tags import RUN_ID_ENV

MIB_TOTAL = 81559  # an H100 80GB's memory.total


@dataclass
class Program:
    """What a started server does, each time in seconds after its start."""

    lines: list[tuple[float, str]] = field(default_factory=list)  # (when, log line)
    ready_s: float | None = None  # its health URL answers 200 from then on (while it runs)
    exit_s: float | None = None  # it ends by itself then, with exit_code
    exit_code: int = 0
    mib: dict[int, float] = field(default_factory=dict)  # GPU index -> MiB it holds while it runs, from hold_s on
    hold_s: float = 0.0
    smoke: tuple[int | None, str] = (200, '{"text": "ok"}')  # its answer to the smoke request
    ignores_term: bool = False  # the kit's TERM does not stop it: the kit's KILL does


@dataclass
class _Process:
    ref: ProcessRef
    argv: list[str]
    log: str
    program: Program
    tag: str
    started: float
    written: int = 0  # how many of the program's lines are in its log
    ended: float | None = None
    signal: str | None = None

    def at(self) -> float:
        """Seconds since its start, up to its end."""
        return (self.ended if self.ended is not None else time.monotonic()) - self.started


class MemoryHost(RunsAtOnce):
    """One host of `gpus` GPUs (80 GB each) whose server is `server`: a Program, or a function of the server's
    argv that returns one (so a factor's levels can change what the server does)."""

    transport = "memory"
    simulated = True
    concurrent_commands = True
    per_task = None
    extra_logs: tuple[str, ...] = ()
    kit_env: dict[str, str] = {}
    state_dir = None

    def __init__(self, name: str = "box", *, server: Program | Callable[[list[str]], Program], gpus: int = 1,
                 workdir: str = "/mem/work", handler: Callable[[str], CommandResult] | None = None):
        self.name, self.workdir, self.gpus = name, workdir, list(range(gpus))
        self.server = server if callable(server) else (lambda argv: server)
        self.handler = handler or (lambda command: CommandResult(command, "", "not modelled by MemoryHost", 127))
        self.files: dict[str, bytearray] = {}
        self.dirs: set[str] = set()
        self.processes: list[_Process] = []
        self.commands: list[str] = []
        self._pids = itertools.count(4000)
        self._lock = threading.RLock()  # the run path reads the host from a few threads (preflight, provenance)

    # --- processes ---------------------------------------------------------------------------------------------

    def start_detached(self, role: str, argv, *, cwd: str, log_name: str, env_file: str | None = None) -> ProcessRef:
        with self._lock:
            pid = next(self._pids)
            env = self.files.get(f"{cwd}/{env_file}", b"").decode() if env_file else ""
            tag = next((line.split("=", 1)[1].strip("'") for line in env.splitlines()
                        if line.startswith(RUN_ID_ENV + "=")), "-")
            program = self.server(list(argv)) if role == "server" else Program()
            proc = _Process(ProcessRef(role, pid, pid), list(argv), f"{cwd}/{log_name}", program, tag, time.monotonic())
            self.processes.append(proc)
            self.files[proc.log] = bytearray()
            return proc.ref

    def _settle(self) -> None:
        """Each process's log and end brought up to now."""
        now = time.monotonic()
        for proc in self.processes:
            if proc.ended is None and proc.program.exit_s is not None and now - proc.started >= proc.program.exit_s:
                proc.ended = proc.started + proc.program.exit_s
            if proc.ref.role == "foreign" or proc.log not in self.files:  # not the kit's, or its folder removed
                continue
            if proc.ref.role == "sampler":
                self._sample(proc)
                continue
            due = [text for when, text in proc.program.lines[proc.written:] if when <= proc.at()]
            self.files[proc.log] += "".join(line + "\n" for line in due).encode()
            proc.written += len(due)

    def _sample(self, proc: _Process) -> None:
        """The sampler's trace: a --query-gpu row per GPU every interval (-lms), the header first."""
        interval_s = int(proc.argv[proc.argv.index("-lms") + 1]) / 1000
        due = int(proc.at() // interval_s) + 1
        text = "".join(nvidia_smi.query_text(self._box(), self._allocations(), "gpu", list(SAMPLER_FIELDS),
                                             set(self.gpus), header=n == 0, units=False)
                       for n in range(proc.written, due))
        self.files[proc.log] += text.encode()
        proc.written = due

    def _box(self) -> dict:
        return {"gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-mem-{self.name}-{i}",
                          "bus_id": f"00000000:{0x18 + i * 0x10:02X}:00.0", "mem_total_mib": MIB_TOTAL,
                          "mem_reserved_mib": 0} for i in self.gpus]}

    def _allocations(self) -> list[dict]:
        return [{"gpu": gpu, "mib": mib, "pid": p.ref.pid, "name": p.argv[0], "util_pct": 0}
                for p in self.processes if p.ended is None and p.at() >= p.program.hold_s
                for gpu, mib in p.program.mib.items()]

    def _process(self, pgid: int) -> _Process:
        return next(p for p in self.processes if p.ref.pgid == pgid)

    def group_alive(self, pgid: int) -> bool:
        with self._lock:
            self._settle()
            return self._process(pgid).ended is None

    def kill_group(self, pgid: int, grace_s: float) -> str:
        with self._lock:
            self._settle()
            proc = self._process(pgid)
            if proc.ended is not None:
                return "gone"
            proc.ended, proc.signal = time.monotonic(), "KILL" if proc.program.ignores_term else "TERM"
            return proc.signal

    def tagged_listing(self, env_name: str) -> str:
        with self._lock:
            self._settle()
            return "".join(f"{p.ref.pid} {p.ref.pgid} {p.tag}\n" for p in self.processes if p.ended is None) + \
                commands.TAGGED_END + "\n"

    def foreign(self, mib: dict[int, float]) -> int:
        """A process the kit did not start (no run id) holding GPU memory until the test ends: its pid."""
        with self._lock:
            pid = next(self._pids)
            self.processes.append(_Process(ProcessRef("foreign", pid, pid), ["python3"], "", Program(mib=mib), "-",
                                           time.monotonic()))
            return pid

    def leftovers(self, live: set[str]) -> list[dict]:
        return []

    # --- commands ------------------------------------------------------------------------------------------------

    def run(self, command: str, *, timeout: float = 60, check: bool = True, idempotent: bool = True) -> CommandResult:
        with self._lock:
            self._settle()
            self.commands.append(command)
            answer = self._gpu_answers().get(command)
            return CommandResult(command, answer, "", 0) if answer is not None else self.handler(command)

    def _gpu_answers(self) -> dict[str, str]:
        """The GPU commands the kit runs, for every set of GPUs a run may be given, with what they print now."""
        box, allocs = self._box(), self._allocations()
        answers = {commands.gpu_indices(): "".join(f"{i}\n" for i in self.gpus)}
        slots = [None, *(list(c) for n in range(1, len(self.gpus) + 1) for c in itertools.combinations(self.gpus, n))]
        for slot in slots:
            chosen = set(slot or self.gpus)
            apps = nvidia_smi.query_text(box, allocs, "apps", list(APP_FIELDS), chosen, header=False, units=False)
            answers[commands.gpu_snapshot(slot)] = nvidia_smi.query_text(box, allocs, "gpu", list(SNAPSHOT_FIELDS),
                                                                         chosen, header=False, units=False)
            answers[commands.gpu_apps(slot)] = apps
            owners = "".join(f"{p.ref.pid} {p.tag} {p.ref.pgid}\n" for p in self.processes
                             if any(a["pid"] == p.ref.pid and a["gpu"] in chosen for a in allocs))
            answers[commands.gpu_owners(RUN_ID_ENV, slot)] = \
                f"{apps}{commands.OWNERS_MARK}\n{owners}{commands.OWNERS_END}\n"
        return answers

    def run_on_gpu_node(self, command: str, *, timeout: float = 60) -> str | None:
        return self.run(command, timeout=timeout).stdout

    def clock(self) -> str:
        return datetime.now().isoformat()

    def free_port(self) -> int:
        return 30000

    def check_launchable(self, sampler: str) -> None:
        pass

    def claim_workdir(self) -> None:
        pass

    def gpu_indices(self) -> list[int] | None:
        return list(self.gpus)

    def close(self) -> None:
        pass

    # --- files ---------------------------------------------------------------------------------------------------

    def make_dir(self, path: str) -> None:
        self.dirs.add(path)

    def write_text(self, path: str, text: str, private: bool = False) -> None:
        with self._lock:
            self.files[path] = bytearray(text.encode())

    def read_bytes(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        with self._lock:
            self._settle()
            data = bytes(self.files.get(path, b""))
            return data[offset:] if size < 0 else data[offset:offset + size]

    def file_size(self, path: str) -> int | None:
        with self._lock:
            self._settle()
            return len(self.files[path]) if path in self.files else None

    def fetch(self, remote_path: str, local_path: str) -> None:
        Path(local_path).write_bytes(self.read_bytes(remote_path))

    def remove_dir(self, path: str) -> None:
        with self._lock:
            for name in [n for n in self.files if n.startswith(path.rstrip("/") + "/")]:
                del self.files[name]
            self.dirs.discard(path)

    # --- HTTP ----------------------------------------------------------------------------------------------------

    def _server(self) -> _Process | None:
        return next((p for p in reversed(self.processes) if p.ref.role == "server"), None)

    def http_status(self, url: str, timeout: float = 2.0) -> int | str:
        with self._lock:
            self._settle()
            proc = self._server()
            up = proc is not None and proc.ended is None and proc.program.ready_s is not None \
                and proc.at() >= proc.program.ready_s
            return 200 if up else REFUSED

    def http_post(self, url: str, body: dict, timeout: float) -> tuple[int | None, str]:
        return self._server().program.smoke
