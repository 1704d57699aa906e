"""After a run: stop every server, then what escaped its groups, revert patches, wait for the GPUs to drain,
stop the samplers, and collect the raw files. Every step runs even when an earlier one failed (a lost host);
failures become notes on the run. Collecting a server log copies its head and tail only (keptlog.py), a piece
at a time, under a deadline: a server that wrote GBs, or a host that sends slowly, cannot keep a run from
reaching its final status."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from launchlab import masking, params, safefiles
from launchlab.errors import HostError, LaunchlabError
from launchlab.gpu import telemetry
from launchlab.hosts import Host, ProcessRef, commands, patching, reaper
from launchlab.hosts.nodes import Node, write_processes
from launchlab.polling import backoff
from launchlab.store import rundir
from launchlab.store.keptlog import HEAD_BYTES, TAIL_BYTES, KeptLog, LogCut
from launchlab.store.records import RunRecord

# how long collecting a run's files from all its nodes may take: a capped log is 16 MiB a node, seconds on any link
# a run can be watched over; past this the run ends as an error that says so (issue 23: a run left `collecting`)
COLLECT_S = 300.0
READ_BYTES = 4 * 2**20  # one read of a server log on the host: what the copy holds of it at once


class _Late(Exception):
    """The collection's deadline passed while a log was being copied."""


def cleanup(exp: params.Experiment, nodes: list[Node], folder: rundir.RunFolder, result: RunRecord,
            *, collect: bool = True, collect_s: float | None = None) -> str | None:
    """Stop every server, wait for the GPUs to drain, stop the samplers, fetch the raw files. Every step runs
    even when an earlier one failed (a lost host); failures become notes on the run. Returns why the collection
    did not finish in time (collect_s), or None."""
    stopped: dict[tuple[int, int], str] = {}
    for node in nodes:  # all servers first: one failed node must not keep the others' GPUs busy
        for ref in node.refs:
            if ref.role != "sampler":
                _stop(exp, node, ref, result=result, stopped=stopped)
    _ask_how_jobs_ended(nodes, result)
    # then what left the servers' groups (a `setsid` child), found by the run id it carries; the samplers of every
    # node are spared until the drain is over (nodes can share a machine, and they share the run id)
    samplers = set().union(*(n.sampler_groups for n in nodes))
    for node in nodes:
        _sweep(exp, node, result, spare=samplers)
    for node in nodes:  # then the installed package back to how it was released
        if node.patches_applied:
            _revert(node, result)
    for node in nodes:
        _drain(exp, node, result, spare=samplers)
    for node in nodes:
        for ref in node.refs:
            if ref.role == "sampler":
                _stop(exp, node, ref, result=result, stopped=stopped)
    for node in nodes:  # the last of the run: e.g. a sampler the kernel died before recording
        _sweep(exp, node, result, spare=set())
    if any(n.refs for n in nodes):
        try:  # a record of what was stopped: failing to write it must not keep the run from being collected
            write_processes(folder, nodes, stopped)
        except LaunchlabError as exc:
            result.notes.append(f"how the run's processes were stopped is not recorded in processes.json: {exc}")
    return _collect_all(nodes, folder, result, COLLECT_S if collect_s is None else collect_s) if collect else None


def _stop(exp: params.Experiment, node: Node, ref: ProcessRef, *, result: RunRecord,
          stopped: dict[tuple[int, int], str]) -> None:
    """Stop a process group of a node, noting how in `stopped`; a failure is a note on the run."""
    try:
        how = node.host.kill_group(ref.pgid, exp.server.stop_grace_s)
        # gone because the kit stopped it earlier (Node.stopped) is not gone by itself
        stopped[(node.rank, ref.pgid)] = node.stopped.get(ref.pgid, how) if how == "gone" else how
        if ref.role == "server" and node.rank == 0:
            result.stopped_with = stopped[(node.rank, ref.pgid)]
    except LaunchlabError as exc:
        result.notes.append(f"stopping the {ref.role} on {node.label} failed: {exc}")


def _ask_how_jobs_ended(nodes: list[Node], result: RunRecord) -> None:
    """How a scheduler ended each node's job (Node.ended_why, for lifecycle._ended_by_scheduler), asked right after
    the stop, while the controller still remembers the job."""
    for node in nodes:
        if node.refs:
            try:
                node.ended_why = node.host.ended_why(node.refs[-1].pgid)
            except LaunchlabError as exc:
                result.notes.append(f"how the job on {node.label} ended is unknown: {exc}")


def _collect_all(nodes: list[Node], folder: rundir.RunFolder, result: RunRecord, collect_s: float) -> str | None:
    """Every node's raw files, all within collect_s; why they were not all fetched in time, or None."""
    late = None
    deadline = time.monotonic() + collect_s
    for node in nodes:
        late = _collect(node, folder, result, deadline, collect_s=collect_s) or late
    return late


def _revert(node: Node, result: RunRecord) -> None:
    """The node's patched package back as released, checked against its RECORD; a failure is a note."""
    try:
        patching.revert(node.host, node.patch_root, node.patches_applied)
        ok, facts = patching.pristine(node.host, node.argv)
        result.notes.append(f"patches reverted on {node.label}; package pristine (RECORD check): {ok}")
        if not ok:
            result.notes.append(f"NOT pristine after reverting on {node.label}: {facts}")
    except LaunchlabError as exc:
        result.notes.append(f"reverting the patches on {node.label} FAILED, the package is still modified: {exc}")


def _sweep(exp: params.Experiment, node: Node, result: RunRecord, spare: set[int]) -> None:
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


def _collect(node: Node, folder: rundir.RunFolder, result: RunRecord, deadline: float, *, collect_s: float) -> str | None:
    """Fetch the node's logs (their head and tail, masked) and samples (masked) into the run folder, then remove its
    folder on the host. When this machine cannot take them (a full disk), the host's copy is removed all the same:
    the run is repeated with --resume, and a GPU host's disk must not fill up with the leftovers of runs nobody can
    read. Returns why a log could not be copied before the deadline (its host folder is then kept), or None."""
    collected, local_failure, late = 0, False, None
    logs = (node.log_name, *node.host.extra_logs)
    names = (*logs, node.csv_name) if node.sampled else logs
    for name in names:
        try:
            # only a complete copy replaces what was mirrored during the run (safefiles: never through a link)
            with safefiles.replacing(folder.path / name) as partial:
                if name in logs:
                    node.kept[name] = copy_log(node.host, f"{node.dir}/{name}", partial, node.masker, deadline=deadline)
                else:  # fetched into a private scratch folder, then masked into the unnamed file
                    with tempfile.TemporaryDirectory(prefix="launchlab-fetch-") as scratch:
                        node.host.fetch(f"{node.dir}/{name}", f"{scratch}/{name}")
                        with safefiles.open_regular(f"{scratch}/{name}") as src, open(partial, "wb") as dst:
                            node.masker.stream(src, dst)
            if name == node.csv_name:
                folder.keep_samples(node.rank)
            collected += 1
        except _Late as exc:
            late = (f"collecting the raw files of {node.label} ran past its deadline ({collect_s:.0f} s): {exc}; the "
                    "run's outcome cannot be told from its log, so it is an error. The server's log is still on the "
                    f"host in {node.dir}; what was seen during the run is kept as {name}")
            result.notes.append(late)
        except (OSError, LaunchlabError) as exc:
            local_failure = local_failure or not isinstance(exc, HostError)
            kept = " (the part seen during the run is kept)" if (folder.path / name).exists() else ""
            result.notes.append(f"could not collect {name}{kept}: {exc}")
    if collected == len(names) or (local_failure and late is None):
        try:
            node.host.remove_dir(node.dir)
        except LaunchlabError as exc:
            result.notes.append(f"could not remove the run folder on {node.label}: {exc}")
    return late


def copy_log(host: Host, remote: str, local: Path, masker: masking.Masker, *, deadline: float) -> LogCut:
    """The kit's copy of a server log on a host (keptlog.py): all of it when it is no longer than its head and tail
    together, else its first HEAD_BYTES and its last TAIL_BYTES, the middle never read. Raises _Late when the
    deadline passes between two reads."""
    size = host.file_size(remote)
    if size is None:
        raise HostError(host.name, f"{remote} does not exist (the server never started, or its folder was removed)")
    kept = KeptLog(local, masker)

    def read_to(end: int, at: int) -> int:
        while at < end:
            if time.monotonic() > deadline:
                kept.abandon()
                raise _Late(f"{at:,} of {size:,} bytes of {remote} read")
            chunk = host.read_bytes(remote, at, min(READ_BYTES, end - at))
            if not chunk:  # the file shrank (it was not the server's to edit): what there was is kept
                return at
            kept.feed(chunk)
            at += len(chunk)
        return at

    if size <= HEAD_BYTES + TAIL_BYTES:
        read_to(size, 0)
    else:
        read_to(HEAD_BYTES, 0)
        kept.skip(size - HEAD_BYTES - TAIL_BYTES)
        read_to(size, size - TAIL_BYTES)
    return kept.close(size, name=Path(remote).name)


def _drain(exp: params.Experiment, node: Node, result: RunRecord, spare: set[int]) -> None:
    """Wait (bounded) until no process of the run but the spared groups (its samplers) is left on the node and every
    GPU's memory.used is back near its preflight value. Both: memory can read "back" while a process of the run has
    not allocated yet or is about to, and a run without a preflight has only its processes to wait for."""
    before = {g["index"]: g["mem_used_mib"] for g in node.preflight["gpus"]} if node.preflight else None
    tic = time.monotonic()
    for pause in backoff(longest_s=0.25):
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
        time.sleep(pause)


def _memory_over(exp: params.Experiment, node: Node, before: dict[int, float]) -> dict[int, float]:
    """MiB above the preflight level, per GPU of the node that is more than the tolerance above it."""
    now = {g.index: g.mem_used_mib for g in telemetry.parse_snapshot(
        node.host.run(commands.gpu_snapshot(node.gpus), timeout=30).stdout)}
    return {i: now[i] - before.get(i, 0) for i in now if now[i] - before.get(i, 0) > exp.drain.tolerance_mib}
