"""One run, start to finish, as named steps: prepare → patch → start → watch → smoke; then, whatever happened,
finish: clean up (cleanup.py), read what the run left, conclude (verdicts/runstatus.py), write the record.

A run has one node (one host) or, for a multi-node server, several (nodes.py): every node gets its own
sampler and server, they are watched together, and when one fails they are all stopped. Whatever happens (a
failed launch, a kit error, a lost host, Ctrl-C), `finish` stops every process of the run, waits for the GPUs
to drain and collects the raw files; a second Ctrl-C during that is deferred until it is done. The kit writes
status.json from what it observed, never from papermill's view of the notebook (which can report success for
a run whose kernel died). Recovery of a run whose notebook died is in recovery.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from launchlab import __version__ as KIT_VERSION
from launchlab import interrupts, logparse, masking, params
from launchlab.errors import LaunchlabError, RunDirError
from launchlab.gpu import telemetry
from launchlab.hosts import Host, JobStart, commands, nodes, patching, provenance
from launchlab.hosts.nodes import Node
from launchlab.logparse import patterns
from launchlab.run import cleanup, watch
from launchlab.store import records, rundir
from launchlab.store.records import Outcome, Run, RunRecord
from launchlab.tags import BATCH_ENV, RUN_ID_ENV
from launchlab.verdicts import gpustate, runstatus


def run_one(exp: params.Experiment, run: Run, run_dir: Path, hosts: Host | dict[str, Host],
            *, gpus: list[int] | None = None) -> RunRecord:
    """Run one planned run on its host (a Host) or its nodes (a dict of the run's hosts by name), optionally
    on a slot of the host's GPUs only."""
    hosts = nodes.by_name(hosts)
    folder = rundir.RunDir(run_dir).run(run.run_id)
    rundir.make_folder(folder.path)
    _refuse_a_second_attempt(folder)
    run_nodes = nodes.make(exp, run, run_dir, hosts, gpus=gpus)
    record = _new_record(run, run_nodes, gpus)
    progress = _StatusWriter(folder, record)
    outcome: Outcome | None = None
    looks: list | None = None  # the looks at the GPUs during the run (gpustate.py); None until the server starts
    try:
        progress("preflight")
        launches = _prepare(exp, run, run_nodes, folder, run_dir=run_dir)
        if run.variant.patches or run.variant.instrument:
            progress("patching")
            _patch(exp, run, run_nodes, launches, folder=folder)
        progress("starting")
        looks = []
        t_launch = _start(exp, run_dir, run_nodes, launches, folder=folder, record=record, progress=progress)
        progress("watching")
        outcome = watch.watch(run_nodes, folder, exp.server.rules(), launches[0].health_url,
                              deadline=t_launch + exp.server.ready.timeout_s, t_launch=t_launch, notes=record.notes)
        record.ready_line_s, record.probe_answers = outcome.ready_line_s, outcome.probe
        _look_at_gpus(run_nodes, gpustate.WATCHED, looks, record)
        if outcome.status == "ready" and exp.server.smoke is not None:
            progress("smoke request")
            outcome = watch.smoke(exp.server.smoke, run_nodes[0], launches[0].smoke_url, outcome, result=record)
    except KeyboardInterrupt as exc:
        outcome = Outcome("error", interrupts.REASON, f"{interrupts.describe(exc)}; the kit stopped the server")
        raise
    except LaunchlabError as exc:
        outcome = Outcome("error", None, str(exc))
    finally:
        _last_look(folder, run_nodes, looks, record, outcome=outcome)
        finish(exp, run_nodes, folder, record, outcome=outcome, progress=progress)
    return record


def _new_record(run: Run, run_nodes: list[Node], gpus: list[int] | None) -> RunRecord:
    return RunRecord(run.run_id, run.variant.name, run.repetition, run.host, dict(run.variant.levels),
                     simulated=any(n.host.simulated for n in run_nodes), nodes=list(run.hosts), gpus=gpus,
                     warmup=run.warmup)


def _last_look(folder: rundir.RunFolder, run_nodes: list[Node], looks: list | None, record: RunRecord, *,
               outcome: Outcome | None) -> None:
    """The last look at the GPUs, then every look recorded: once the server was started."""
    if looks is not None:  # not after a kit error or Ctrl-C: the host may be gone, and stopping comes first
        if outcome is not None and outcome.status != "error":
            _look_at_gpus(run_nodes, gpustate.END, looks, record)
        _record_gpu_state(folder, run_nodes, looks, record)


def finish(exp: params.Experiment, run_nodes: list[Node], folder: rundir.RunFolder, record: RunRecord,
           *, outcome: Outcome | None, progress=None, collect: bool = True) -> None:
    """Stop and collect (cleanup.py), read what the run left, conclude, write the final status — with Ctrl-C
    held until it is done, so a second press cannot leave a server running."""
    with _sigint_deferred():
        if progress:
            progress("stopping")
        late = cleanup.cleanup(exp, run_nodes, folder, record, collect=collect)
        if late is not None:  # what the log says is not known: the run is an error that says why
            outcome = Outcome("error", None, late)
        _scheduler_end(run_nodes, record)
        outcome = _ended_by_scheduler(run_nodes, outcome, kit_cancelled=record.stopped_with == "KILL")
        if progress:
            progress("collecting")
        _record_kept(run_nodes, record)
        logs, peaks = _read_results(exp, run_nodes, folder, record)
        runstatus.conclude(record, outcome, logs, peaks)
        _write_final(folder, record, run_nodes)


class _StatusWriter:
    """Keeps status.json current with the run's state (what `launchlab run` prints and the notebook shows)."""

    def __init__(self, folder: rundir.RunFolder, record: RunRecord):
        self.folder, self.record, self.t0 = folder, record, time.monotonic()

    def __call__(self, state: records.State, detail: str | None = None) -> None:
        try:  # progress only: a full disk must not keep the cleanup from stopping the server
            records.write_progress(self.folder, self.record.run_id, state, time.monotonic() - self.t0, detail=detail)
        except LaunchlabError as exc:
            self.record.notes.append(f"progress not recorded: {exc}")


# ---------------------------------------------------------------------------------------------------------
# The steps


def _prepare(exp: params.Experiment, run: Run, run_nodes: list[Node], folder: rundir.RunFolder, *, run_dir: Path) -> list:
    """Each node's run folder and GPU state before the launch, the launches rendered (their secrets known to
    the masks from here on), and the provenance recorded. The preflight of a host whose commands may run at once
    runs next to the provenance's commands (both only read the host; one after the other they were most of a
    short run, bench/run_overhead.py)."""
    with ThreadPoolExecutor(max_workers=len(run_nodes), thread_name_prefix="preflight") as pool:
        preflights = {}
        for node in run_nodes:
            node.host.make_dir(node.dir)
            node.sampled = exp.sampler.kind != "none"
            if node.sampled:
                preflights[node.rank] = pool.submit(_preflight, node.host, node.gpus) \
                    if node.host.concurrent_commands else _done(_preflight(node.host, node.gpus))
        launches, per_node = _provenance(exp, run, run_nodes, rundir.RunDir(run_dir))
        for node, record in zip(run_nodes, per_node, strict=True):
            node.preflight = preflights[node.rank].result() if node.rank in preflights else None
            record["preflight"] = node.preflight
    facts = provenance.run_record(KIT_VERSION, exp.server.kind, per_node, nodes.masker_of(run_nodes))
    # the batch that ran it (manifest.batch, set anew by every --resume): what changed at a resume is named so
    rundir.write_json(folder.provenance, {**facts, "batch": _batch_of(run_dir)})
    return launches


def _done(value) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def _provenance(exp: params.Experiment, run: Run, run_nodes: list[Node],
                run_dir: rundir.RunDir) -> tuple[list, list[dict]]:
    """The launches rendered, their secrets added to the nodes' masks, and each node's provenance record (its
    preflight filled in by _prepare; the host facts that cannot have changed taken over from the newest earlier
    run on the same host, provenance.host_facts)."""
    port = run_nodes[0].host.free_port()
    launches = [params.render(exp, run.variant, port=port, run_id=run.run_id, host=n.host.name, node_rank=n.rank,
                              nnodes=len(run_nodes), gpus=n.gpus, per_task=n.host.per_task) for n in run_nodes]
    for node, launch in zip(run_nodes, launches, strict=True):
        node.masker = node.masker.merge(masking.Masker.collect(launch.env, launch.argv, exp.secrets))
    # a scheduler's node is known once its job runs: the job gathers its facts there (_start), not the login node
    per_node = []
    for node, launch in zip(run_nodes, launches, strict=True):
        found, node.masker = provenance.node_record(
            node.host, node.rank, launch, preflight=None, masker=node.masker, secret_names=exp.secrets,
            earlier=provenance.earlier_facts(run_dir, run.run_id, node.host.name),
            recorded=node.host.facts_before_start())
        per_node.append(found)
    return launches, per_node


def _patch(exp: params.Experiment, run: Run, run_nodes: list[Node], launches: list, *,
           folder: rundir.RunFolder) -> None:
    """The variant's patches (the kind's instrumentation for the installed version included) applied on every node
    (cleanup reverts them)."""
    applied: list[str] = []
    for node, launch in zip(run_nodes, launches, strict=True):
        node.argv = launch.argv
        patches = patching.of_variant(node.host, launch.argv, run.variant, exp.server.kind)
        node.patch_root, node.patches_applied = patching.apply(node.host, launch.argv, patches, node.dir)
        applied = list(patches)
    rundir.update_json(folder.provenance, {"patched": True, "patches": applied})


def _start(exp: params.Experiment, run_dir: Path, run_nodes: list[Node], launches: list, *, folder: rundir.RunFolder,
           record: RunRecord, progress=None) -> float:
    """The samplers, then the servers, detached, each recorded in processes.json as soon as it runs; returns
    when the servers were started (monotonic clock). The run id travels in the environment of everything the
    kit starts, so a process a lost run left behind can be found again on its host (recovery.leftovers).
    On a scheduler's host the server is a job that may wait in the queue first: the wait is `queue_s`, and the
    start (and so the ready timeout and startup_s) is when the job runs."""
    tag = {RUN_ID_ENV: run_nodes[0].tag, BATCH_ENV: _batch_of(run_dir)}
    for node in run_nodes:
        if node.sampled:
            node.host.write_text(f"{node.dir}/sampler.env", commands.env_file_text(tag))
            argv = commands.gpu_sampler(exp.sampler.interval_ms, node.gpus, exp.sampler.kind)
            node.refs.append(node.host.start_detached("sampler", argv, cwd=node.dir, log_name=node.csv_name,
                                                      env_file="sampler.env"))
            nodes.write_processes(folder, run_nodes)
    record.server_started_at = run_nodes[0].host.clock()
    t_launch = time.monotonic()
    for node, launch in zip(run_nodes, launches, strict=True):
        # the one file that holds the real secret values on the host: 0600, in a 0700 run folder
        node.host.write_text(f"{node.dir}/server.env", commands.env_file_text({**launch.env, **tag}), private=True)
        node.refs.append(node.host.start_detached("server", launch.argv, cwd=node.dir, log_name=node.log_name,
                                                  env_file="server.env"))
        nodes.write_processes(folder, run_nodes)
    starts = [n.host.job_start(n.refs[-1], lambda reason: progress and progress("queued", reason))
              for n in run_nodes]
    if any(start is not None for start in starts):  # jobs: their servers started when the scheduler ran them
        t_launch = _jobs_started(exp, run_nodes, launches, starts, folder=folder, record=record, progress=progress)
    return t_launch


def _jobs_started(exp: params.Experiment, run_nodes: list[Node], launches: list, starts: list[JobStart | None], *,
                  folder: rundir.RunFolder, record: RunRecord, progress=None) -> float:
    """Servers a scheduler started as jobs (Host.job_start): how long they were queued (`queue_s`), where they run,
    the provenance their nodes gathered, and when they started (the ready clock starts after their provenance
    commands, which each job runs before its server)."""
    record.queue_s = max(start.queue_s if start else 0.0 for start in starts)
    record.scheduler = [start.placement for start in starts if start and start.placement]
    recorded = [start.facts if start else None for start in starts]
    for node, found in zip(run_nodes, recorded, strict=True):
        if found is None:
            record.notes.append(f"the provenance of the node that ran the job of {node.label} is missing: the "
                                "job ended (or took too long) before its facts were gathered")
    record.server_started_at = run_nodes[0].host.clock()
    t_launch = time.monotonic()
    if progress:
        progress("watching")
    per_node = []
    for node, launch, found in zip(run_nodes, launches, recorded, strict=True):
        facts, node.masker = provenance.node_record(node.host, node.rank, launch, preflight=node.preflight,
                                                    masker=node.masker, secret_names=exp.secrets, recorded=found or {})
        per_node.append(facts)
    rundir.update_json(folder.provenance, {**provenance.run_record(KIT_VERSION, exp.server.kind, per_node,
                                                                   nodes.masker_of(run_nodes)),
                                           "scheduler": record.scheduler})
    return t_launch


def _scheduler_end(run_nodes: list[Node], record: RunRecord) -> None:
    """How each node's job ended, as the scheduler tells it after the end (state, exit code, node, end time, and
    whether sacct or the controller said so)."""
    ends = []
    for node in run_nodes:
        if node.refs:  # a scheduler's record of the job (a host without one says None)
            try:
                facts = node.host.final_state(node.refs[-1])
            except LaunchlabError as exc:
                record.notes.append(f"how the job on {node.label} ended is unknown: {exc}")
                continue
            if facts:
                ends.append(facts)
    if ends:
        record.scheduler_end = ends


def _ended_by_scheduler(run_nodes: list[Node], outcome: Outcome | None, *, kit_cancelled: bool) -> Outcome | None:
    """A failed launch whose job the scheduler ended (time limit, node failure, preemption) failed for that reason,
    whatever its server wrote as it went down (a rank's TERM read as "Received sigquit …" by SGLang). Read by the
    cleanup right after the stop (Node.ended_why): while the scheduler ends a job it says only COMPLETING (for as long
    as its KillWait), so the watch, which stops at the server's last line, cannot know yet. A cancelled job is
    someone else's doing unless the kit cancelled it itself (`scancel` without a signal, its stop past the grace:
    stopped_with "KILL"; its TERM only signals the job's steps, which never makes a job CANCELLED)."""
    if outcome is None or outcome.status != "failed":
        return outcome
    for node in run_nodes:
        ended = node.ended_why
        if ended is not None and not (ended[0] == "job_cancelled" and kit_cancelled):
            where = "" if len(run_nodes) == 1 else f"{node.label}: "
            return Outcome("failed", ended[0], where + ended[1], outcome.ready_after_s)
    return outcome


def _preflight(host: Host, slot: list[int] | None = None) -> dict | None:
    """GPU memory in use and compute processes before launch: evidence of a dirty start, kept with the run; None
    where the run's GPUs are not known before it starts (a scheduler's job, which samples them itself)."""
    snapshot = host.run_on_gpu_node(commands.gpu_snapshot(slot), timeout=60)
    if snapshot is None:
        return None
    gpus = telemetry.parse_snapshot(snapshot)
    apps = telemetry.parse_apps(host.run_on_gpu_node(commands.gpu_apps(slot), timeout=60) or "")
    return {"gpus": [dataclasses.asdict(g) for g in gpus], "compute_apps": apps}


def _look_at_gpus(run_nodes: list[Node], at: str, looks: list, record: RunRecord) -> None:
    """Which processes hold the run's GPUs now, and whether each is the run's (gpustate.py), on every node the
    kit samples itself (a scheduler's job runs on a node the kit does not reach). A look that fails is a note: it
    must not stop the run."""
    for node in run_nodes:
        if not node.sampled:
            continue
        try:
            text = node.host.run_on_gpu_node(commands.gpu_owners(RUN_ID_ENV, node.gpus), timeout=60)
            if text is None:  # a scheduler's job, on a node the kit's commands do not reach
                continue
            sessions = frozenset(r.pgid for r in node.refs if r.role == "server")  # a server is a session leader
            looks.append(gpustate.read_look(text, at, node.host.name, node.tag, sessions=sessions))
        except LaunchlabError as exc:
            record.notes.append(f"the GPUs' processes on {node.label} could not be read ({at}): {exc}")


def _record_gpu_state(folder: rundir.RunFolder, run_nodes: list[Node], looks: list, record: RunRecord) -> None:
    """The looks into provenance.json (`gpu_state`), masked like the rest of it; nothing when the kit did not look
    (then the run's GPU state during the run is not observed, not zero)."""
    if not looks or not folder.provenance.exists():
        return
    try:
        rundir.update_json(folder.provenance, {
            "gpu_state": nodes.masker_of(run_nodes).record(gpustate.gather(looks).to_json())})
    except LaunchlabError as exc:
        record.notes.append(f"the GPU state during the run was not recorded: {exc}")


# ---------------------------------------------------------------------------------------------------------
# After the steps


def _read_results(exp: params.Experiment, run_nodes: list[Node], folder: rundir.RunFolder,
                  record: RunRecord) -> tuple[list[runstatus.NodeLog], list[float]]:
    """Every node's collected log, parsed (node 0's also as parsed.json), and the peak of its samples."""
    logs, peaks = [], []
    for node in run_nodes:
        if folder.log(node.rank).exists():
            try:
                parsed = logparse.parse_file(folder.log(node.rank), exp.server.kind, exp.server.rules())
            except LaunchlabError as exc:
                record.notes.append(f"parsing {node.log_name} failed: {exc}")
            else:
                logs.append(runstatus.NodeLog(node.rank, "" if node.rank == 0 else f"{node.label}: ", parsed))
                record.notes.extend(dataclasses.replace(slow, source=node.log_name).note()
                                    for slow in parsed.slow_patterns if not patterns.noted(record.notes, slow.pattern))
                if node.rank == 0:
                    try:  # derived (the report rebuilds it): its failure must not keep the status from being written
                        rundir.write_json(folder.parsed, node.masker.record(parsed.to_json()))
                    except LaunchlabError as exc:
                        record.notes.append(f"parsed.json not written: {exc}")
        if folder.samples(node.rank).exists() and \
                (peak := telemetry.peak_memory_mib(folder.samples(node.rank))) is not None:
            peaks.append(peak)
    return logs, peaks


def _record_kept(run_nodes: list[Node], record: RunRecord) -> None:
    """What the run folder keeps of each server log (keptlog.LogCut) into the record, and a note for each log the
    kit cut: `server.log: 2.4 GiB written, 16.0 MiB kept (head 8.0 MiB + tail 8.0 MiB), 2.4 GiB cut`."""
    for node in run_nodes:
        for cut in node.kept.values():
            record.logs.append(cut.to_json())
            if cut.cut:
                record.notes.append(f"{cut.note()} (cut as the kit copied it into the run folder; the server's own "
                                    "file was never edited)")


def _write_final(folder: rundir.RunFolder, record: RunRecord, run_nodes: list[Node]) -> None:
    """The final status.json, every string masked (failure messages and notes quote the server's log)."""
    masker = nodes.masker_of(run_nodes)
    record.failure_message = masker.text(record.failure_message) if record.failure_message else None
    record.smoke_response = masker.text(record.smoke_response) if record.smoke_response else None
    record.notes = [masker.text(n) for n in record.notes]
    records.write_final(folder, record)


def _refuse_a_second_attempt(folder: rundir.RunFolder) -> None:
    """Raw files are written once: a run that already ran in this folder is not run over it (`launchlab run
    --resume` keeps an earlier attempt under attempts/ and repeats the run)."""
    status = records.read_status(folder)
    if status is not None and status.done:
        raise RunDirError(f"run {folder.run_id} already ran in {folder.path.parent.parent} ({folder.status}); its "
                          "raw files are never overwritten. Run it into a new run directory (run_dir = \"\"), or "
                          "repeat unfinished runs with `launchlab run PARAMS --resume RUN_DIR`")


def _batch_of(run_dir: Path) -> str:
    """The id of the batch running a run directory now (its manifest; `-` for a run started by hand, e.g. the run
    notebook run alone: a batch of its own for confounds.at_the_resume, which names what changed when a
    `launchlab run --resume` ran the rest)."""
    try:
        return rundir.RunDir(run_dir).manifest().batch or "-"
    except (LaunchlabError, OSError):
        return "-"


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
