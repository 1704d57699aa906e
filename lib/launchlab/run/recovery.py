"""Runs the kit lost track of: stop what a run recorded when its notebook cannot be trusted to (Ctrl-C, a
dead kernel), finish its record as an error, and find the processes of dead batches left on a host."""

from __future__ import annotations

from pathlib import Path

from launchlab import params
from launchlab.errors import LaunchlabError
from launchlab.hosts import Host, locks, nodes
from launchlab.run import lifecycle
from launchlab.store import records, rundir
from launchlab.store.records import Outcome, Run, RunRecord


def stop_recorded(exp: params.Experiment, run: Run, run_dir: Path, hosts: Host | dict[str, Host]
                  ) -> dict[tuple[int, int], str]:
    """Stop every process group a run recorded (used when its notebook cannot be trusted to do it); returns how
    each was stopped, by (node rank, pgid), for `recover` to record (its own look finds them gone)."""
    hosts = nodes.by_name(hosts)
    stopped = {}
    for node in nodes.recorded(exp, run, run_dir, hosts):
        for ref in node.refs:
            try:
                stopped[(node.rank, ref.pgid)] = node.host.kill_group(ref.pgid, exp.server.stop_grace_s)
            except LaunchlabError:
                pass  # recover() tries again and records what failed
    return stopped


def recover(exp: params.Experiment, run: Run, run_dir: Path, hosts: Host | dict[str, Host],
            *, message: str, stopped: dict[tuple[int, int], str] | None = None, reason: str | None = None) -> RunRecord:
    """Finish a run whose kernel died or was killed: stop every process it recorded or that carries its run id,
    collect its files and write its status as `error` with the reason. Safe on a run that already finished.
    `stopped`: the groups the kit stopped already (stop_recorded), so the record says the kit stopped them rather
    than that they had exited by themselves. `reason`: the record's failure_reason (`interrupted` for a batch
    stopped by Ctrl-C or a signal)."""
    hosts = nodes.by_name(hosts)
    folder = rundir.RunDir(run_dir).run(run.run_id)
    run_nodes = nodes.recorded(exp, run, run_dir, hosts)
    for node in run_nodes:
        node.stopped.update({pgid: how for (rank, pgid), how in (stopped or {}).items()
                             if rank == node.rank and how in nodes.KIT_STOPS})
    record = RunRecord(run.run_id, run.variant.name, run.repetition, run.host, dict(run.variant.levels),
                       simulated=any(n.host.simulated for n in run_nodes), nodes=list(run.hosts), warmup=run.warmup)
    try:
        status = records.read_status(folder)
    except LaunchlabError:
        status = None
    if status is not None and status.done:
        record.server_started_at = status.record.server_started_at
        # the run's own cleanup stopped its server before its notebook failed (a full disk, say)
        servers = [r for r in run_nodes[0].refs if r.role == "server"] if run_nodes else []
        if servers and status.record.stopped_with in nodes.KIT_STOPS:
            run_nodes[0].stopped.setdefault(servers[-1].pgid, status.record.stopped_with)
    # a run whose notebook finished already collected its files (and removed them from the host)
    lifecycle.finish(exp, run_nodes, folder, record, outcome=Outcome("error", reason, message),
                     collect=not (status is not None and status.done))
    return record


def leftovers(host: Host, live: set[str] | None = None) -> list[dict]:
    """Process groups on the host that a launchlab run of this user started and whose batch is gone (no live
    lock names it; `live`: the batch ids known to be alive, default: read from the host's locks):
    [{pgid, pids, run, batch}]. Another batch's live runs, and other users' processes, are never listed."""
    if live is None:
        live = locks.live_batches(locks.holders(host))
    return host.leftovers(live)  # a scheduler's host lists its jobs, by the run id and batch they carry
