"""One run, start to finish: preflight → sampler → server → watch → stop → drain → collect → parse → status.

A run has one node (one host) or, for a multi-node server, several: every node gets its own sampler and
server process, they are watched together, and when one fails they are all stopped. Whatever happens (a
failed launch, a kit error, a lost host, Ctrl-C), the `finally` block stops every server's process group,
waits for the GPUs to drain, stops the samplers and collects the raw files; a second Ctrl-C during that
cleanup is deferred until it is done. The kit writes status.json from what it observed, never from
papermill's view of the notebook (which can report success for a run whose kernel died).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from launchlab import __version__, locks, logparse, masking, outputs, params, patching, provenance, reaper, telemetry
from launchlab.errors import HostError, LaunchlabError, ParamsError, RunDirError
from launchlab.hosts import Host, ProcessRef, commands, sim
from launchlab.logparse import patterns
from launchlab.logparse.patterns import BudgetedPattern
from launchlab.plan import Run
from launchlab.reaper import RUN_ID_ENV
from launchlab.sim.state import STATE_ENV

POLL_S = 0.2
FATAL_GRACE_S = 3.0  # after a fatal line, let the server finish writing its traceback before stopping it


@dataclass
class RunResult:
    """What the kit observed of one run; status.json and a row of runs.parquet."""

    run_id: str
    variant: str
    repetition: int
    host: str
    levels: dict[str, str]
    status: str = "error"  # ready | failed | timeout | degraded | error
    failure_reason: str | None = None
    failure_phase: str | None = None
    failure_message: str | None = None
    phase_reached: str | None = None
    startup_s: float | None = None
    peak_mem_used_mib: float | None = None
    server_started_at: str | None = None
    stopped_with: str | None = None
    drained: bool | None = None
    drain_s: float | None = None
    simulated: bool = False
    nodes: list[str] = field(default_factory=list)
    gpus: list[int] | None = None  # the GPU slot the run was given (CUDA_VISIBLE_DEVICES); None: the whole host
    smoke_status: int | None = None
    smoke_s: float | None = None
    smoke_response: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Outcome:
    status: str
    reason: str | None
    message: str
    ready_after_s: float | None = None


@dataclass
class _Node:
    """One host of a run: where its files live there and what was started on it."""

    rank: int
    host: Host
    dir: str
    tag: str  # the run id its processes carry (RUN_ID_ENV)
    refs: list[ProcessRef] = field(default_factory=list)
    preflight: dict | None = None
    gpus: list[int] | None = None
    argv: tuple[str, ...] = ()
    patch_root: str | None = None
    patches_applied: list[str] = field(default_factory=list)
    masker: masking.Masker = field(default_factory=masking.Masker)  # the secrets of this node's launch
    sampled: bool = True  # False with `sampler: {kind: none}`: no GPU samples to take or collect

    @property
    def log_name(self) -> str:
        return outputs.SERVER_LOG if self.rank == 0 else f"server.node{self.rank}.log"

    @property
    def csv_name(self) -> str:
        return outputs.TELEMETRY_CSV if self.rank == 0 else f"nvidia-smi.node{self.rank}.csv"

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


def _host_dir(host: Host, exp: params.Experiment, run_dir: Path, run_id: str) -> str:
    """Where the run's raw files are written on a host before they are collected."""
    return f"{host.workdir}/{exp.experiment}/{Path(run_dir).name}/{run_id}"


def _nodes(exp: params.Experiment, run: Run, run_dir: Path, hosts: dict[str, Host],
           gpus: list[int] | None = None) -> list[_Node]:
    masker = masking.for_experiment(exp)
    tag = run_tag(exp, run_dir, run.run_id)
    return [_Node(rank, hosts[name], _host_dir(hosts[name], exp, run_dir, run.run_id), tag, gpus=gpus, masker=masker)
            for rank, name in enumerate(run.hosts)]


def run_variant(experiment: str | Path, run_id: str, run_dir: str | Path, gpus: str = "",
                params_sha256: str = "") -> RunResult:
    """Run one planned run of a params file into run_dir/runs/<run_id>/ (what run_variant.ipynb calls).
    gpus: "0,1" to give the run only those GPUs of its host (CUDA_VISIBLE_DEVICES), "" for all of them.
    params_sha256: the digest the batch validated; a params file edited since then is refused."""
    from launchlab import hosts
    from launchlab.plan import find_run, make_plan

    if params_sha256 and params.digest(experiment) != params_sha256:
        raise ParamsError(str(experiment), ["the file changed after the batch validated it; this run was not "
                                            "launched — rerun the batch (`launchlab run … --resume RUN_DIR`)"])
    exp = params.load(experiment)
    run = find_run(make_plan(exp), run_id) if run_id else make_plan(exp)[0]
    slot = [int(g) for g in gpus.split(",")] if gpus else None
    box = outputs.read_json(Path(run_dir) / outputs.MANIFEST).get("sim_box")  # the batch's simulated machine
    own_box = box is None and any(exp.hosts[h].transport == "sim" for h in run.hosts)
    if own_box:  # a run notebook executed by hand: a simulated machine of its own, gone when the run is
        box = sim.new_box()
    try:
        return run_one(exp, run, Path(run_dir), {name: hosts.connect(exp, name, sim_box=box) for name in run.hosts},
                       gpus=slot)
    finally:
        if own_box:
            shutil.rmtree(box, ignore_errors=True)


def run_one(exp: params.Experiment, run: Run, run_dir: Path, hosts: Host | dict[str, Host],
            gpus: list[int] | None = None) -> RunResult:
    """Run one planned run on its host (a Host) or its nodes (a dict of the run's hosts by name), optionally
    on a slot of the host's GPUs only."""
    hosts = hosts if isinstance(hosts, dict) else {hosts.name: hosts}
    folder = outputs.run_folder(run_dir, run.run_id)
    folder.mkdir(parents=True, exist_ok=True)
    _refuse_a_second_attempt(folder, run.run_id)
    nodes = _nodes(exp, run, run_dir, hosts, gpus)
    result = RunResult(run.run_id, run.variant.name, run.repetition, run.host, dict(run.variant.levels),
                       simulated=any(n.host.simulated for n in nodes), nodes=list(run.hosts), gpus=gpus)
    outcome: _Outcome | None = None
    t_start = time.monotonic()

    def state(name: str) -> None:
        try:  # progress only: a full disk must not keep the cleanup from stopping the server
            outputs.write_json(folder / outputs.STATUS, {"run_id": run.run_id, "state": name,
                                                        "elapsed_s": round(time.monotonic() - t_start, 2)})
        except LaunchlabError as exc:
            result.notes.append(f"progress not recorded: {exc}")

    try:
        state("preflight")
        for node in nodes:
            node.host.make_dir(node.dir)
            node.sampled = exp.sampler.kind != "none"
            node.preflight = _preflight(node.host, node.gpus) if node.sampled else None
        port = nodes[0].host.free_port()
        launches = [params.render(exp, run.variant, port=port, run_id=run.run_id, host=n.host.name, node_rank=n.rank,
                                  nnodes=len(nodes), gpus=n.gpus) for n in nodes]
        for node, launch in zip(nodes, launches, strict=True):
            node.masker = node.masker.merge(masking.Masker.collect(launch.env, launch.argv, _secret_names(exp)))
        _write_provenance(folder, exp, nodes, launches)
        if run.variant.patches:
            state("patching")
            for node, launch in zip(nodes, launches, strict=True):
                node.argv = launch.argv
                node.patch_root, node.patches_applied = patching.apply(node.host, launch.argv, run.variant.patches,
                                                                       node.dir)
            prov = outputs.read_json(folder / outputs.PROVENANCE)
            outputs.write_json(folder / outputs.PROVENANCE, {**prov, "patched": True,
                                                             "patches": list(run.variant.patches)})

        state("starting")
        # The run id travels in the environment of everything the kit starts, so a process left behind by a
        # run that lost its host can be found again on that host (`leftovers`).
        tag = {RUN_ID_ENV: nodes[0].tag, locks.BATCH_ENV: _batch_of(run_dir)}
        for node in nodes:
            if not node.sampled:
                continue
            node.host.write_text(f"{node.dir}/sampler.env", commands.env_file_text(tag))
            node.refs.append(node.host.start_detached("sampler", telemetry.sampler_argv(exp.sampler.interval_ms, node.gpus,
                                                                            exp.sampler.kind),
                                                      cwd=node.dir, log_name=node.csv_name, env_file="sampler.env"))
            _write_processes(folder, nodes)
        result.server_started_at = nodes[0].host.clock()
        t_launch = time.monotonic()
        for node, launch in zip(nodes, launches, strict=True):
            # the one file that holds the real secret values on the host: 0600, in a 0700 run folder
            node.host.write_text(f"{node.dir}/server.env", commands.env_file_text({**launch.env, **tag}), private=True)
            node.refs.append(node.host.start_detached("server", launch.argv, cwd=node.dir, log_name=node.log_name,
                                                      env_file="server.env"))
            _write_processes(folder, nodes)

        state("watching")
        rules = logparse.rules_for(exp.server.kind, exp.server.ready.log_pattern, tuple(exp.server.ready.fatal_patterns))
        outcome = _watch_or_lost(nodes, folder, rules, launches[0].health_url, t_launch + exp.server.ready.timeout_s,
                                 t_launch, result.notes)
        if outcome.status == "ready" and exp.server.smoke is not None:
            state("smoke request")
            outcome = _smoke(exp.server.smoke, nodes[0], launches[0].smoke_url, outcome, result)
    except KeyboardInterrupt:
        outcome = _Outcome("error", None, "interrupted by the user (Ctrl-C); the server was stopped")
        raise
    except LaunchlabError as exc:
        outcome = _Outcome("error", None, str(exc))
    finally:
        with _sigint_deferred():
            state("stopping")
            _cleanup(exp, nodes, folder, result)
            state("collecting")
            _conclude(exp, result, outcome, folder, nodes)
            _write_status(folder, result, nodes)
    return result


def _refuse_a_second_attempt(folder: Path, run_id: str) -> None:
    """Raw files are written once: a run that already ran in this folder is not run over it (`launchlab run
    --resume` keeps an earlier attempt under attempts/ and repeats the run)."""
    try:
        done = outputs.read_json(folder / outputs.STATUS).get("state") == "done"
    except RunDirError:
        return
    if done:
        raise RunDirError(f"run {run_id} already ran in {folder.parent.parent} ({folder / outputs.STATUS}); its raw "
                          "files are never overwritten. Run it into a new run directory (run_dir = \"\"), or repeat "
                          "unfinished runs with `launchlab run PARAMS --resume RUN_DIR`")


def _recorded_nodes(exp: params.Experiment, run: Run, run_dir: Path, hosts: dict[str, Host]) -> list[_Node]:
    """The run's nodes with the processes and preflight its folder recorded."""
    folder = outputs.run_folder(run_dir, run.run_id)
    nodes = _nodes(exp, run, run_dir, hosts)
    try:
        recorded = outputs.read_json(folder / outputs.PROCESSES)
    except LaunchlabError:
        recorded = []
    for p in recorded:
        node = nodes[p.get("node", 0)]
        node.refs.append(ProcessRef(p["role"], p["pid"], p["pgid"]))
    try:
        prov = outputs.read_json(folder / outputs.PROVENANCE)
        for node, facts in zip(nodes, prov.get("nodes") or [prov], strict=False):
            node.preflight = facts.get("preflight")
    except LaunchlabError:
        pass
    return nodes


def stop_recorded(exp: params.Experiment, run: Run, run_dir: Path, hosts: Host | dict[str, Host]) -> None:
    """Stop every process group a run recorded (used when its notebook cannot be trusted to do it)."""
    hosts = hosts if isinstance(hosts, dict) else {hosts.name: hosts}
    for node in _recorded_nodes(exp, run, run_dir, hosts):
        for ref in node.refs:
            try:
                node.host.kill_group(ref.pgid, exp.server.stop_grace_s)
            except LaunchlabError:
                pass  # recover() tries again and records what failed


def recover(exp: params.Experiment, run: Run, run_dir: Path, hosts: Host | dict[str, Host], message: str) -> RunResult:
    """Finish a run whose kernel died or was killed: stop every process group it recorded, collect its files
    and write its status as `error` with the reason. Safe to call on a run that already finished."""
    hosts = hosts if isinstance(hosts, dict) else {hosts.name: hosts}
    folder = outputs.run_folder(run_dir, run.run_id)
    nodes = _recorded_nodes(exp, run, run_dir, hosts)
    result = RunResult(run.run_id, run.variant.name, run.repetition, run.host, dict(run.variant.levels),
                       simulated=any(n.host.simulated for n in nodes), nodes=list(run.hosts))
    try:
        status = outputs.read_json(folder / outputs.STATUS)
    except LaunchlabError:
        status = {}
    result.server_started_at = status.get("server_started_at")
    with _sigint_deferred():
        # a run whose notebook finished already collected its files (and removed them from the host)
        _cleanup(exp, nodes, folder, result, collect=status.get("state") != "done")
        _conclude(exp, result, _Outcome("error", None, message), folder, nodes)
        _write_status(folder, result, nodes)
    return result


def _batch_of(run_dir: Path) -> str:
    """The id of the batch running a run directory now (its manifest; `-` for a run started by hand)."""
    try:
        return str(outputs.read_json(Path(run_dir) / outputs.MANIFEST).get("batch") or "-")
    except LaunchlabError:
        return "-"


def _secret_names(exp: params.Experiment) -> tuple[str, ...]:
    return tuple(exp.secrets)


def _write_status(folder: Path, result: RunResult, nodes: list[_Node]) -> None:
    """The final status.json, every string masked (failure messages and notes quote the server's log)."""
    masker = masking.Masker()
    for node in nodes:
        masker = masker.merge(node.masker)
    for name in ("failure_message", "smoke_response"):
        setattr(result, name, masker.text(getattr(result, name)) if getattr(result, name) else getattr(result, name))
    result.notes = [masker.text(n) for n in result.notes]
    record = {**dataclasses.asdict(result), "state": "done", "kit_version": __version__}
    try:
        outputs.write_json(folder / outputs.STATUS, record)
    except RunDirError as exc:
        # a full disk: the essentials still fit in place of the progress record, so the run is marked
        result.status, result.failure_message = "error", str(exc)
        keep = ("run_id", "variant", "repetition", "host", "levels", "status", "failure_message", "stopped_with")
        outputs.write_json(folder / outputs.STATUS, {**{k: getattr(result, k) for k in keep}, "state": "done",
                                                    "notes": ["the full status could not be written"]})
        raise


def leftovers(host: Host, live: set[str] | None = None) -> list[dict]:
    """Process groups on the host that a launchlab run of this user started and whose batch is gone (no live
    lock names it; `live`: the batch ids known to be alive, default: read from the host's locks):
    [{pgid, pids, run, batch}]. Another batch's live runs, and other users' processes, are never listed."""
    if live is None:
        live = locks.live_batches(locks.holders(host))
    me = host.run(commands.user_id(), timeout=30, check=False).stdout.strip()
    out = host.run(commands.find_launchlab_processes(RUN_ID_ENV, locks.BATCH_ENV, STATE_ENV), timeout=60).stdout
    if not out.rstrip().endswith(commands.TAGGED_END):  # a cut-off listing never reads as "none left"
        raise HostError(host.name, f"the listing of launchlab processes did not run to its end ({out[-200:]!r})")
    # a simulated box is a machine of its own (a sim host, or an ssh host whose sessions are one): only its
    # processes are its leftovers, and a real host's are never a simulated box's
    box = host.run(commands.env_value(STATE_ENV), timeout=30, check=False).stdout.strip() or "-"
    groups: dict[int, dict] = {}
    for line in out.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) != 6 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        pid, pgid, uid, batch, where, run = int(parts[0]), int(parts[1]), parts[2], parts[3], parts[4], parts[5]
        if batch in live or (me and uid != me) or where != box:
            continue
        groups.setdefault(pgid, {"pgid": pgid, "pids": [], "run": run, "batch": batch})["pids"].append(pid)
    return list(groups.values())


def _preflight(host: Host, slot: list[int] | None = None) -> dict:
    """GPU memory in use and compute processes before launch: evidence of a dirty start, kept with the run."""
    gpus = telemetry.parse_snapshot(host.run(telemetry.snapshot_command(slot), timeout=60).stdout)
    apps = telemetry.parse_apps(host.run(telemetry.apps_command(slot), timeout=60).stdout)
    return {"gpus": [dataclasses.asdict(g) for g in gpus], "compute_apps": apps}


def _write_provenance(folder: Path, exp: params.Experiment, nodes: list[_Node], launches: list[params.LaunchSpec]) -> None:
    per_node = []
    extra = _secret_names(exp)
    for node, launch in zip(nodes, launches, strict=True):
        facts = provenance.host_facts(node.host)
        per_node.append({
            "node": node.rank,
            "host": node.host.name,
            "transport": node.host.transport,
            "simulated": node.host.simulated,
            "hostname": facts["hostname"],
            "host_facts": facts,
            "interpreter": provenance.interpreter_facts(node.host, launch.argv),
            "integrity": provenance.integrity(node.host, launch.argv),
            "host_env": provenance.host_env(node.host, lambda env, m=node.masker: m.env(env, extra)),
            "argv": node.masker.argv(launch.argv, extra),
            "env": node.masker.env(launch.env, extra),
            "health_url": node.masker.text(launch.health_url) if launch.health_url else None,
            "preflight": node.preflight,
        })
    # node 0 at the top level (the whole story for single-host runs), every node under "nodes"
    record = {"kit_version": __version__, "server_kind": exp.server.kind, **per_node[0],
              "nodes": per_node if len(nodes) > 1 else None}
    outputs.write_json(folder / outputs.PROVENANCE, nodes[0].masker.record(record))


def _write_processes(folder: Path, nodes: list[_Node], stopped: dict[tuple[int, int], str] | None = None) -> None:
    outputs.write_json(folder / outputs.PROCESSES, [
        {"role": r.role, "pid": r.pid, "pgid": r.pgid, "host": n.host.name, "node": n.rank,
         "stopped_with": (stopped or {}).get((n.rank, r.pgid))}
        for n in nodes for r in n.refs
    ])


class _Mirror:
    """Follows a growing file on the host: returns its new complete lines and appends them, secrets masked, to
    a local copy, so what was seen survives a host or connection that goes away mid-run. (A line still being
    written is held back until it is complete: a secret could be cut in two at a chunk's end.)"""

    def __init__(self, host: Host, remote: str, local: Path, masker: masking.Masker):
        self.host, self.remote, self.local, self.offset, self.partial = host, remote, local, 0, b""
        self.masker = masker
        local.write_bytes(b"")

    def new_lines(self) -> list[str]:
        chunk = self.host.read_bytes(self.remote, self.offset)
        if not chunk:
            return []
        self.offset += len(chunk)
        data = self.partial + chunk
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        complete, self.partial = self.masker.bytes(data[:cut]), data[cut:]
        if complete:
            with open(self.local, "ab") as fh:
                fh.write(complete)
        return re.split(r"[\r\n]", complete.decode("utf-8", errors="replace"))[:-1]


def _watch_or_lost(nodes: list[_Node], folder: Path, rules: logparse.ReadyRules, health_url: str | None,
                   deadline: float, t_launch: float, notes: list[str]) -> _Outcome:
    """_watch, with the patterns under a time budget (a slow one is noted) and a lost host turned into an error:
    a host the kit cannot reach (its transport already retried) says nothing about the server, so the run is
    then an error, never a failure."""
    ready_rx = BudgetedPattern(rules.ready_pattern) if rules.ready_pattern else None
    fatal_rx = [BudgetedPattern(p) for p in rules.fatal_patterns]
    try:
        return _watch(nodes, folder, ready_rx, fatal_rx, health_url, deadline, t_launch)
    except HostError as exc:
        return _Outcome("error", None, f"lost the connection to host {exc.host!r} while watching: {exc}. What the "
                                       "server did is unknown, so the run is an error, not a failure; if it is still "
                                       "running there, the next `launchlab run` finds it (--stop-leftovers)")
    finally:
        notes.extend(slow.note() for rx in [ready_rx, *fatal_rx] if rx is not None and (slow := rx.slow()) is not None)


def _watch(nodes: list[_Node], folder: Path, ready_rx: BudgetedPattern | None, fatal_rx: list[BudgetedPattern],
           health_url: str | None, deadline: float, t_launch: float) -> _Outcome:
    """Poll until ready, failed (a fatal line or an exit on any node) or the deadline. Ready means: every node
    alive, the ready line seen on node 0 (when the kind has one) and the health URL, asked from node 0's host,
    answering 200 (when one is given)."""
    logs = [_Mirror(n.host, f"{n.dir}/{n.log_name}", folder / n.log_name, n.masker) for n in nodes]
    samples = [_Mirror(n.host, f"{n.dir}/{n.csv_name}", folder / n.csv_name, n.masker) for n in nodes]
    ready_line = ready_rx is None
    fatal_line, fatal_at = None, None
    polls = 0
    numbers = [0] * len(nodes)  # lines read per node: where a slow pattern is reported
    while True:
        for node, log in zip(nodes, logs, strict=True):
            for line in log.new_lines():
                numbers[node.rank] += 1
                at = (numbers[node.rank], node.log_name)
                if node.rank == 0 and ready_rx is not None and ready_rx.search(line, *at):
                    ready_line = True
                if fatal_line is None and any(rx.search(line, *at) for rx in fatal_rx):
                    fatal_line = line.strip() if node.rank == 0 else f"{node.label}: {line.strip()}"
                    fatal_at = time.monotonic()
        polls += 1
        if polls % 5 == 0:
            for mirror in samples:
                mirror.new_lines()
        dead = [n for n in nodes if not n.host.group_alive(n.refs[-1].pgid)]
        if fatal_line is not None and (dead or time.monotonic() - fatal_at > FATAL_GRACE_S):
            return _Outcome("failed", None, fatal_line)
        if dead:
            for log in logs:
                log.new_lines()
            where = "" if len(nodes) == 1 else f" on {', '.join(n.label for n in dead)}"
            return _Outcome("failed", "process_exited", f"the server exited{where} before it was ready")
        if fatal_line is None and ready_line and (health_url is None or nodes[0].host.http_status(health_url) == 200):
            return _Outcome("ready", None, "", time.monotonic() - t_launch)
        if time.monotonic() > deadline:
            return _Outcome("timeout", None, f"not ready after {deadline - t_launch:.0f} s")
        time.sleep(POLL_S)


def _smoke(spec: params.SmokeSpec, node: _Node, url: str, ready: _Outcome, result: RunResult) -> _Outcome:
    """One request to the ready server, from its own host; an unexpected answer makes the run `degraded`."""
    tic = time.monotonic()
    status, text = node.host.http_post(url, spec.body, spec.timeout_s)
    result.smoke_status, result.smoke_s, result.smoke_response = status, round(time.monotonic() - tic, 2), text[:500]
    if status == spec.expect_status:
        return ready
    time.sleep(1.0)  # let the server log why before it is stopped
    answer = f"answered {status}" if status is not None else f"got no answer ({text[:200]})"
    return _Outcome("degraded", "smoke_request_failed", f"ready, but the smoke request to {url} {answer}: {text[:300]}",
                    ready.ready_after_s)


def _cleanup(exp: params.Experiment, nodes: list[_Node], folder: Path, result: RunResult, collect: bool = True) -> None:
    """Stop every server, wait for the GPUs to drain, stop the samplers, fetch the raw files. Every step runs
    even when an earlier one failed (a lost host); failures become notes on the run."""
    stopped: dict[tuple[int, int], str] = {}

    def stop(node: _Node, ref: ProcessRef) -> None:
        try:
            stopped[(node.rank, ref.pgid)] = node.host.kill_group(ref.pgid, exp.server.stop_grace_s)
            if ref.role == "server" and node.rank == 0:
                result.stopped_with = stopped[(node.rank, ref.pgid)]
        except LaunchlabError as exc:
            result.notes.append(f"stopping the {ref.role} on {node.label} failed: {exc}")

    for node in nodes:  # all servers first: one failed node must not keep the others' GPUs busy
        for ref in node.refs:
            if ref.role != "sampler":
                stop(node, ref)
    # then what left the servers' groups (a `setsid` child), found by the run id it carries; the samplers of every
    # node are spared until the drain is over (nodes can share a machine, and they share the run id)
    samplers = set().union(*(n.sampler_groups for n in nodes))
    for node in nodes:
        _sweep(exp, node, result, spare=samplers)
    for node in nodes:  # then the installed package back to how it was released
        if node.patches_applied:
            try:
                patching.revert(node.host, node.patch_root, node.patches_applied)
                ok, facts = patching.pristine(node.host, node.argv)
                result.notes.append(f"patches reverted on {node.label}; package pristine (RECORD check): {ok}")
                if not ok:
                    result.notes.append(f"NOT pristine after reverting on {node.label}: {facts}")
            except LaunchlabError as exc:
                result.notes.append(f"reverting the patches on {node.label} FAILED, the package is still modified: {exc}")
    for node in nodes:
        _drain(exp, node, result, spare=samplers)
    for node in nodes:
        for ref in node.refs:
            if ref.role == "sampler":
                stop(node, ref)
    for node in nodes:  # the last of the run: e.g. a sampler the kernel died before recording
        _sweep(exp, node, result, spare=set())
    if any(n.refs for n in nodes):
        _write_processes(folder, nodes, stopped)
    if collect:
        for node in nodes:
            _collect(node, folder, result)


def _sweep(exp: params.Experiment, node: _Node, result: RunResult, spare: set[int]) -> None:
    """Stop every process of the run still alive on the node outside the spared groups, and note which there were."""
    try:
        sweep = reaper.stop_run(node.host, node.tag, exp.server.stop_grace_s, spare)
    except LaunchlabError as exc:
        result.notes.append(f"looking for processes of the run left on {node.label} failed: {exc}")
        return
    if sweep.pids:
        result.notes.append(f"{len(sweep.pids)} process(es) of the run outlived its recorded process groups on "
                            f"{node.label} (a child that left its group, e.g. with setsid, or one never recorded): "
                            f"pids {', '.join(map(str, sweep.pids))}; stopped with {sweep.signal}")


def _collect(node: _Node, folder: Path, result: RunResult) -> None:
    """Fetch the node's log and samples (masked) into the run folder, then remove its folder on the host. When
    this machine cannot take them (a full disk), the host's copy is removed all the same: the run is repeated
    with --resume, and a GPU host's disk must not fill up with the leftovers of runs nobody can read."""
    collected, local_failure = 0, False
    names = (node.log_name, node.csv_name) if node.sampled else (node.log_name,)
    for name in names:
        partial = folder / f".{name}.fetching"
        try:
            node.host.fetch(f"{node.dir}/{name}", str(partial))
            node.masker.mask_file(partial)
            partial.replace(folder / name)  # only a complete copy replaces what was mirrored during the run
            collected += 1
        except (OSError, LaunchlabError) as exc:
            partial.unlink(missing_ok=True)
            local_failure = local_failure or not isinstance(exc, HostError)
            kept = " (the part seen during the run is kept)" if (folder / name).exists() else ""
            result.notes.append(f"could not collect {name}{kept}: {exc}")
    if collected == len(names) or local_failure:
        try:
            node.host.remove_dir(node.dir)
        except LaunchlabError as exc:
            result.notes.append(f"could not remove the run folder on {node.label}: {exc}")


def _drain(exp: params.Experiment, node: _Node, result: RunResult, spare: set[int]) -> None:
    """Wait (bounded) until no process of the run but the spared groups (its samplers) is left on the node and every
    GPU's memory.used is back near its preflight value. Both: memory can read "back" while a process of the run has
    not allocated yet or is about to, and a run without a preflight has only its processes to wait for."""
    before = {g["index"]: g["mem_used_mib"] for g in node.preflight["gpus"]} if node.preflight else None
    tic = time.monotonic()
    while True:
        try:
            left = reaper.of_run(node.host, node.tag, spare)
            over = _memory_over(exp, node, before) if before is not None else {}
        except HostError as exc:
            result.notes.append(f"drain check on {node.label} failed: {exc}")
            result.drained = False
            return
        elapsed = round(time.monotonic() - tic, 2)
        if not left and not over:
            if before is not None:
                result.drained = result.drained is not False
                result.drain_s = max(result.drain_s or 0.0, elapsed)
            return
        if elapsed > exp.drain.timeout_s:
            result.drained, result.drain_s = False, max(result.drain_s or 0.0, elapsed)
            if left:
                result.notes.append(f"processes of the run were still alive on {node.label} after "
                                    f"{exp.drain.timeout_s:.0f} s: pids {', '.join(str(p.pid) for p in left)}")
            if over:
                result.notes.append(f"GPU memory on {node.label} did not return to its preflight level within "
                                    f"{exp.drain.timeout_s:.0f} s: "
                                    + ", ".join(f"GPU {i} +{v:.0f} MiB" for i, v in over.items()))
            return
        time.sleep(0.25)


def _memory_over(exp: params.Experiment, node: _Node, before: dict[int, float]) -> dict[int, float]:
    """MiB above the preflight level, per GPU of the node that is more than the tolerance above it."""
    now = {g.index: g.mem_used_mib for g in telemetry.parse_snapshot(
        node.host.run(telemetry.snapshot_command(node.gpus), timeout=30).stdout)}
    return {i: now[i] - before.get(i, 0) for i in now if now[i] - before.get(i, 0) > exp.drain.tolerance_mib}


def _conclude(exp: params.Experiment, result: RunResult, outcome: _Outcome | None, folder: Path,
              nodes: list[_Node]) -> None:
    """Status, failure and figures from the outcome and the collected files (node 0's log first)."""
    rules = logparse.rules_for(exp.server.kind, exp.server.ready.log_pattern, tuple(exp.server.ready.fatal_patterns))
    parsed_nodes = []
    for node in nodes:
        if not (folder / node.log_name).exists():
            continue
        try:
            parsed = logparse.parse_file(folder / node.log_name, exp.server.kind, rules)
        except LaunchlabError as exc:
            result.notes.append(f"parsing {node.log_name} failed: {exc}")
            continue
        if node.rank == 0:
            result.phase_reached = parsed.phase_reached
            try:  # derived (the report rebuilds it): its failure must not keep the status from being written
                outputs.write_json(folder / outputs.PARSED, node.masker.record(parsed.to_json()))
            except LaunchlabError as exc:
                result.notes.append(f"parsed.json not written: {exc}")
        parsed_nodes.append((node, parsed))
        result.notes.extend(dataclasses.replace(slow, source=node.log_name).note() for slow in parsed.slow_patterns
                            if not patterns.noted(result.notes, slow.pattern))
    peaks = []
    for node in nodes:
        if (folder / node.csv_name).exists():
            frame = telemetry.read_query_csv(folder / node.csv_name)
            if "memory.used" in frame and frame["memory.used"].notna().any():
                peaks.append(float(frame["memory.used"].max()))
    result.peak_mem_used_mib = max(peaks) if peaks else None
    if outcome is None:
        result.status, result.failure_message = "error", "the run stopped before the server was watched"
        return
    result.status = outcome.status
    failing = next(((n, p) for n, p in parsed_nodes if p.failure is not None), None)
    if outcome.status in ("ready", "degraded"):
        result.startup_s = round(outcome.ready_after_s, 2)
    if outcome.status == "degraded":
        # the server's own reason when its log has one (e.g. the KV cache could not be sized at the first request)
        if failing is not None:
            result.failure_reason, result.failure_phase = failing[1].failure.reason, failing[1].failure.phase
        else:
            result.failure_reason, result.failure_phase = outcome.reason, result.phase_reached
        result.failure_message = outcome.message
    elif outcome.status == "failed":
        if failing is not None:
            node, parsed = failing
            result.failure_reason = parsed.failure.reason
            result.failure_phase = parsed.failure.phase
            where = "" if node.rank == 0 else f"{node.label}: "
            result.failure_message = where + parsed.failure.message
        else:
            result.failure_reason = outcome.reason or "exception"
            result.failure_phase = result.phase_reached
            result.failure_message = outcome.message
    elif outcome.status != "ready":
        result.failure_message = outcome.message
        if outcome.status == "timeout":
            result.failure_phase = result.phase_reached


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C while cleaning up, so a second press cannot leave a server running; re-raise after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt
