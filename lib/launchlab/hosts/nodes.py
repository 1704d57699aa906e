"""The hosts of one run (its nodes): where the run's files live on each, what the kit started there, and the
secrets of each launch. A single-host run has one node; a multi-node server has one per host."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from launchlab import masking, params
from launchlab.hosts import Host, ProcessRef
from launchlab.store import rundir
from launchlab.store.keptlog import LogCut
from launchlab.store.records import Run

KIT_STOPS = ("TERM", "KILL")  # what Host.kill_group sent when the group was alive ("gone": it was not)


def by_name(hosts: Host | dict[str, Host]) -> dict[str, Host]:
    """The hosts of a run by name: a run on one host may be given that host alone."""
    return hosts if isinstance(hosts, dict) else {hosts.name: hosts}


@dataclass
class Node:
    """One host of a run."""

    rank: int
    host: Host
    dir: str  # the run's folder on the host
    tag: str  # the run id its processes carry (tags.RUN_ID_ENV)
    refs: list[ProcessRef] = field(default_factory=list)
    preflight: dict | None = None
    gpus: list[int] | None = None
    argv: tuple[str, ...] = ()
    patch_root: str | None = None
    patches_applied: list[str] = field(default_factory=list)
    masker: masking.Masker = field(default_factory=masking.Masker)  # the secrets of this node's launch
    sampled: bool = True  # False with `sampler: {kind: none}`: no GPU samples to take or collect
    # pgid → how the kit stopped that group already (a run's cleanup before its notebook failed, or the batch on an
    # interruption): a later look that finds it gone must not say it exited by itself
    stopped: dict[int, str] = field(default_factory=dict)
    kept: dict[str, LogCut] = field(default_factory=dict)  # what the run folder keeps of each server log, by name
    # how the scheduler ended the server's job (Host.ended_why: reason, message), read right after the stop: a
    # controller without accounting forgets a job after MinJobAge, sooner than a slow drain and collection end
    ended_why: tuple[str, str] | None = None

    @property
    def log_name(self) -> str:
        return rundir.RunFolder.log_name(self.rank)

    @property
    def csv_name(self) -> str:
        return rundir.RunFolder.samples_name(self.rank)

    @property
    def label(self) -> str:
        return f"node {self.rank} ({self.host.name})"

    @property
    def sampler_groups(self) -> set[int]:
        return {r.pgid for r in self.refs if r.role == "sampler"}


def run_tag(exp: params.Experiment, run_dir: Path, run_id: str) -> str:
    """The value of LAUNCHLAB_RUN_ID for a run: experiment/run-directory-where/run-id. `where` is a digest of
    the run directory's absolute path: two batches that start the same second (same directory name, other
    output folders or clones) must never take each other's processes for their own."""
    where = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:8]
    return f"{exp.experiment}/{Path(run_dir).name}-{where}/{run_id}"


def host_dir(host: Host, exp: params.Experiment, run_dir: Path, run_id: str) -> str:
    """Where the run's raw files are written on a host before they are collected."""
    return f"{host.workdir}/{exp.experiment}/{Path(run_dir).name}/{run_id}"


def make(exp: params.Experiment, run: Run, run_dir: Path, hosts: dict[str, Host],
         *, gpus: list[int] | None = None) -> list[Node]:
    """The run's nodes, in node-rank order, each with the experiment's secrets to mask."""
    masker = masking.for_run(exp)
    tag = run_tag(exp, run_dir, run.run_id)
    return [Node(rank, hosts[name], host_dir(hosts[name], exp, run_dir, run.run_id), tag, gpus=gpus, masker=masker)
            for rank, name in enumerate(run.hosts)]


def masker_of(nodes: list[Node]) -> masking.Masker:
    """Every secret of every node's launch."""
    masker = masking.Masker()
    for node in nodes:
        masker = masker.merge(node.masker)
    return masker


def write_processes(folder: rundir.RunFolder, nodes: list[Node], stopped: dict[tuple[int, int], str] | None = None
                    ) -> None:
    """processes.json: every process the run started, on which node, and how it was stopped."""
    rundir.write_json(folder.processes, [
        {"role": r.role, "pid": r.pid, "pgid": r.pgid, "host": n.host.name, "node": n.rank,
         "stopped_with": (stopped or {}).get((n.rank, r.pgid))}
        for n in nodes for r in n.refs
    ])


def recorded(exp: params.Experiment, run: Run, run_dir: Path, hosts: dict[str, Host]) -> list[Node]:
    """The run's nodes with the processes and preflight its folder recorded (for recovery)."""
    folder = rundir.RunDir(run_dir).run(run.run_id)
    found = make(exp, run, run_dir, hosts)
    try:
        processes = rundir.read_json(folder.processes, expect=list)
    except rundir.RunDirError:
        processes = []
    for p in processes:
        found[p.get("node", 0)].refs.append(ProcessRef(p["role"], p["pid"], p["pgid"]))
        if p.get("stopped_with") in KIT_STOPS:
            found[p.get("node", 0)].stopped[p["pgid"]] = p["stopped_with"]
    try:
        prov = rundir.read_json(folder.provenance)
        for node, facts in zip(found, prov.get("nodes") or [prov], strict=False):
            node.preflight = facts.get("preflight")
            node.sampled = node.preflight is not None or any(r.role == "sampler" for r in node.refs)
    except rundir.RunDirError:
        pass
    return found
