"""After a run: stop every server, then what escaped its groups, revert patches, wait for the GPUs to drain,
stop the samplers, and collect the raw files. Every step runs even when an earlier one failed (a lost host);
failures become notes on the run."""

from __future__ import annotations

import time

from launchlab import params, patching, reaper, rundir, telemetry
from launchlab.errors import HostError, LaunchlabError
from launchlab.hosts import ProcessRef
from launchlab.nodes import Node, write_processes
from launchlab.polling import backoff
from launchlab.records import RunRecord


def cleanup(exp: params.Experiment, nodes: list[Node], folder: rundir.RunFolder, result: RunRecord,
            collect: bool = True) -> None:
    """Stop every server, wait for the GPUs to drain, stop the samplers, fetch the raw files. Every step runs
    even when an earlier one failed (a lost host); failures become notes on the run."""
    stopped: dict[tuple[int, int], str] = {}

    def stop(node: Node, ref: ProcessRef) -> None:
        try:
            how = node.host.kill_group(ref.pgid, exp.server.stop_grace_s)
            # gone because the kit stopped it earlier (Node.stopped) is not gone by itself
            stopped[(node.rank, ref.pgid)] = node.stopped.get(ref.pgid, how) if how == "gone" else how
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
        write_processes(folder, nodes, stopped)
    if collect:
        for node in nodes:
            _collect(node, folder, result)


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


def _collect(node: Node, folder: rundir.RunFolder, result: RunRecord) -> None:
    """Fetch the node's log and samples (masked) into the run folder, then remove its folder on the host. When
    this machine cannot take them (a full disk), the host's copy is removed all the same: the run is repeated
    with --resume, and a GPU host's disk must not fill up with the leftovers of runs nobody can read."""
    collected, local_failure = 0, False
    names = ((node.log_name, node.csv_name) if node.sampled else (node.log_name,)) + tuple(node.host.extra_logs)
    for name in names:
        partial = folder.path / f".{name}.fetching"
        try:
            node.host.fetch(f"{node.dir}/{name}", str(partial))
            node.masker.mask_file(partial)
            partial.replace(folder.path / name)  # only a complete copy replaces what was mirrored during the run
            collected += 1
        except (OSError, LaunchlabError) as exc:
            partial.unlink(missing_ok=True)
            local_failure = local_failure or not isinstance(exc, HostError)
            kept = " (the part seen during the run is kept)" if (folder.path / name).exists() else ""
            result.notes.append(f"could not collect {name}{kept}: {exc}")
    if collected == len(names) or local_failure:
        try:
            node.host.remove_dir(node.dir)
        except LaunchlabError as exc:
            result.notes.append(f"could not remove the run folder on {node.label}: {exc}")


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
        node.host.run(telemetry.snapshot_command(node.gpus), timeout=30).stdout)}
    return {i: now[i] - before.get(i, 0) for i in now if now[i] - before.get(i, 0) > exp.drain.tolerance_mib}
